"""The bf16 compiled plans on a CUDA GPU with native bf16 (compute capability 8.0+);
each skips with the probe's reason where it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from dlopt.plugin import ExecutionTarget, PreparedCase, ProviderContext, WorkloadProfile
from dlopt.testing.contexts import plan_gate
from dlopt_fx.providers import default_providers

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

BF16_PLANS = [p.name for p in default_providers() if p.precision.value == "bf16"]


@pytest.mark.parametrize("name", BF16_PLANS)
def test_bf16_plan_runs_every_case_on_cuda(name: str, tmp_path: Path) -> None:
    provider = next(p for p in default_providers() if p.name == name)
    target = ExecutionTarget("cuda:0")
    availability = provider.probe(ProviderContext(target=target))
    if not availability.available:
        pytest.skip(f"{name} unavailable here: {availability.reason}")
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 16 * 16, 8),
    )
    gen = torch.Generator().manual_seed(1)
    inputs = [torch.randn(n, 3, 16, 16, generator=gen).cuda() for n in (2, 8)]
    model = model.cuda().eval()
    with torch.inference_mode():
        cases = [PreparedCase(f"b{x.shape[0]}", (x,), {}, model(x).cpu()) for x in inputs]
    context = ProviderContext(
        target=target,
        workload=WorkloadProfile.single(inputs[0]),
        artifact_dir=tmp_path,
        cases=cases,
        availability=availability,
    )
    with provider.build(model, context) as plan, torch.inference_mode():
        assert plan.metadata["reduced_precision_check"].endswith("bf16 applied")
        for case in cases:
            out = plan(*case.args)
            assert out.device.type == "cuda" and out.dtype is torch.bfloat16
            result = plan_gate(plan, out.cpu(), case.reference, case.name)
            assert result.passed, result.reason
