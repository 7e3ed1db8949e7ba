"""Every torchao scheme built and run on a CUDA GPU (fp8 needs sm89+, int4 the tinygemm
or preshuffled kernels); each skips with the probe's reason where it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlopt.plugin import (
    ExecutionTarget,
    PlanNotApplicable,
    ProviderContext,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt.testing.contexts import plan_gate
from dlopt_torchao import Scheme, TorchAOProvider

pytestmark = pytest.mark.gpu


def _mlp() -> torch.nn.Module:
    # Dimensions every scheme's kernels take (multiples of 128 for fp8 and int4 groups).
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)
    ).eval()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "inductor"])
@pytest.mark.parametrize("scheme", list(Scheme), ids=lambda s: s.value)
def test_scheme_runs_every_case_on_cuda(scheme: Scheme, compiled: bool, tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA device")
    provider = TorchAOProvider(scheme, compiled)
    gen = torch.Generator().manual_seed(1)
    workload = WorkloadProfile(
        cases=(
            WorkloadCase("b1", args=(torch.randn(1, 512, generator=gen).cuda(),), weight=3),
            WorkloadCase("b32", args=(torch.randn(32, 512, generator=gen).cuda(),), weight=1),
        )
    )
    # Every variant is checked, also those not raced by default (eager int8 dynamic, fp8).
    context = ProviderContext(
        target=ExecutionTarget("cuda:0"),
        workload=workload,
        artifact_dir=tmp_path,
        options=provider.options_type(offer_everywhere=True),
    )
    availability = provider.probe(context)
    if not availability.available:
        pytest.skip(f"{provider.name} unavailable here: {availability.reason}")
    model = _mlp().cuda()
    if compiled and scheme is Scheme.INT8_DYNAMIC:
        # torch._int_mm needs more than 16 rows: the b1 case is refused at build, saying so.
        with pytest.raises(PlanNotApplicable, match=r"more than 16 rows.*'0'.*1 row.*'b1'"):
            provider.build(model, context)
        workload = WorkloadProfile(cases=workload.cases[1:])
        context = ProviderContext(
            target=context.target,
            workload=workload,
            artifact_dir=tmp_path,
            options=context.options,
        )
    with provider.build(model, context) as plan, torch.inference_mode():
        for case in workload.cases:
            got = plan(*case.args)
            assert got.device.type == "cuda"
            result = plan_gate(plan, got, model(*case.args), case.name)
            assert result.passed, result
    assert plan.metadata.get("config"), plan.metadata
