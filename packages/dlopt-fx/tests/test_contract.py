"""dlopt's provider contract suite over the fx plan and one compiled Inductor plan."""

from __future__ import annotations

from dlopt.testing import ProviderContractSuite
from dlopt_fx import probes
from dlopt_fx.providers import FxProvider, InductorProvider


class TestFxContract(ProviderContractSuite):
    distribution = "dlopt-fx"
    entry_point = "fx"
    heavy_modules = ()
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True

    def make_provider(self) -> FxProvider:
        return FxProvider()


class TestInductorFreezingContract(ProviderContractSuite):
    """Two of these checks compile (batch 1 and 4, then batch 1): the suite's compile cost."""

    distribution = "dlopt-fx"
    entry_point = "fx"
    # Loading the plugin must not import Dynamo/Inductor; hiding them must disable the plan.
    heavy_modules = ("torch._dynamo", "torch._inductor")
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True

    def make_provider(self) -> InductorProvider:
        return InductorProvider("inductor_freezing", freezing=True)

    def _forget_probe_caches(self) -> None:
        probes.forget_probe_caches()
