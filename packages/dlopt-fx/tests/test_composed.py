"""Composed compiled plans: bf16 autocast and channels-last inside the Inductor region,
freezing scoped to the plan's compiles, and the rule that a bf16 plan must compute in bf16.

The bf16 plans are offered only on CPUs with native bf16; their build path runs
everywhere (bf16 is emulated on AVX2, slower but correct), so it is checked here on tiny
models. Each compile costs seconds: the bf16 plan compiles once for the module.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from dlopt.plugin import (
    PlanNotApplicable,
    ProviderBuildError,
)
from dlopt.testing import ProviderContractSuite
from dlopt.testing.contexts import build_context, case_outputs, plan_gate
from dlopt.testing.models import Elementwise, SmallConvNet
from dlopt_fx import probes
from dlopt_fx.providers import InductorProvider, default_providers

pytestmark = pytest.mark.slow


def _plan(name: str) -> InductorProvider:
    return next(p for p in default_providers() if p.name == name)


@pytest.fixture(autouse=True)
def _needs_inductor() -> None:
    if not probes.check_cxx_compiler().works:
        pytest.skip("TorchInductor cannot compile on this CPU (no working C++ compiler)")


@pytest.fixture(scope="module")
def bf16_plan() -> Any:
    import torch._inductor.config as inductor_config

    torch.manual_seed(0)
    model = SmallConvNet().eval()
    gen = torch.Generator().manual_seed(1)
    context = build_context(
        model, torch.randn(1, 3, 16, 16, generator=gen), torch.randn(4, 3, 16, 16, generator=gen)
    )
    plan = _plan("inductor_bf16_channels_last_freezing").build(model, context)
    yield {
        "plan": plan,
        "context": context,
        "outputs": case_outputs(plan, context),
        "global_freezing": inductor_config.freezing,
    }
    plan.close()


def test_bf16_plan_computes_in_bf16_and_passes_the_gate(bf16_plan: Any) -> None:
    plan = bf16_plan["plan"]
    assert plan.output_dtype is torch.bfloat16
    for case, out in zip(bf16_plan["context"].cases, bf16_plan["outputs"]):
        assert out.dtype is torch.bfloat16
        assert not torch.equal(out.float(), case.reference)
        result = plan_gate(plan, out, case.reference, case.name)
        assert result.passed, result.reason


def test_bf16_plan_records_its_composition(bf16_plan: Any) -> None:
    meta = bf16_plan["plan"].metadata
    assert meta["autocast_dtype"] == "bfloat16"
    assert meta["channels_last"] is True
    assert meta["inductor_options"] == {"freezing": True}
    # The check ran the first case at build, so that case compiled in setup.
    assert meta["compiled_at_build_for_case"] == "b1"
    assert meta["reduced_precision_check"].endswith("bf16 applied")


def test_freezing_is_scoped_to_the_plan(bf16_plan: Any) -> None:
    import torch._inductor.config as inductor_config

    assert bf16_plan["global_freezing"] is False
    assert inductor_config.freezing is False


def test_bf16_plan_that_changes_nothing_is_rejected_at_build() -> None:
    model = Elementwise()
    context = build_context(model, torch.randn(4, 8))
    with pytest.raises(
        ProviderBuildError, match="bf16 was not applied: outputs equal fp32 eager bit for bit"
    ):
        InductorProvider("inductor_bf16", autocast_dtype=torch.bfloat16).build(model, context)


def test_channels_last_on_2d_inputs_is_not_applicable() -> None:
    model = nn.Linear(8, 4).eval()
    context = build_context(model, torch.randn(2, 8))
    with pytest.raises(PlanNotApplicable, match="channels-last needs 4-D or 5-D"):
        _plan("inductor_channels_last_freezing").build(model, context)


def test_fp32_channels_last_freezing_matches_eager() -> None:
    torch.manual_seed(0)
    model = SmallConvNet().eval()
    x = torch.randn(2, 3, 16, 16)
    context = build_context(model, x)
    with _plan("inductor_channels_last_freezing").build(model, context) as plan:
        assert plan.output_dtype is None
        assert "reduced_precision_check" not in plan.metadata
        with torch.inference_mode():
            torch.testing.assert_close(plan(x), context.cases[0].reference, rtol=1e-4, atol=1e-4)
    # The caller's model keeps its memory format.
    assert model.conv.weight.is_contiguous()


class TestBf16ChannelsLastFreezingContract(ProviderContractSuite):
    """The plan as registered: offered where bf16 is native (AVX-512 BF16 or AMX, or a
    CUDA GPU with 8.0+), skipped elsewhere with the probe's reason."""

    distribution = "dlopt-fx"
    entry_point = "fx"
    heavy_modules = ("torch._dynamo", "torch._inductor")
    # The suite's keyword and nested models are MLPs on 2-D inputs, which a channels-last
    # plan refuses as not applicable.
    supports_dynamic_shapes = True

    def make_provider(self) -> InductorProvider:
        return _plan("inductor_bf16_channels_last_freezing")

    def _forget_probe_caches(self) -> None:
        probes.forget_probe_caches()


class TestBf16ChannelsLastFreezingContractOnAnyCpu(TestBf16ChannelsLastFreezingContract):
    """The same checks on a CPU without native bf16, its probe told otherwise: the build,
    the gate and close run everywhere (bf16 is emulated there, slower but correct)."""

    @pytest.fixture(autouse=True)
    def _claim_native_bf16(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import attrs

        machine = probes.cpu_info()
        if not machine.fast_bf16:
            flags = (*machine.isa_flags, "amx_bf16")
            monkeypatch.setattr(probes, "cpu_info", lambda: attrs.evolve(machine, isa_flags=flags))
