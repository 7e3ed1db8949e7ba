"""Test helpers shipped with dlopt-core: the provider contract suite and fake providers.

A third-party provider (a private NPU SDK, say) runs the same checks as dlopt's own::

    from dlopt.testing import ProviderContractSuite

    class TestMyNpuContract(ProviderContractSuite):
        distribution = "dlopt-mynpu"
        entry_point = "mynpu"
        heavy_modules = ("mynpu_sdk",)

        def make_provider(self):
            return MyNpuProvider()
"""

from dlopt.testing.contract import ProviderContractSuite
from dlopt.testing.fakes import FailingStage, FakeProvider

__all__ = ["FailingStage", "FakeProvider", "ProviderContractSuite"]
