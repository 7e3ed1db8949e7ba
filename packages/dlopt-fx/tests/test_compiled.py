"""Compiled plans: lazy compile, one shared compile for several checks, isolation.

Each Inductor compile costs 10-30 s on a small CPU, so every check that needs a compiled
call shares the one module-scoped plan below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dlopt.plugin import BuiltPlan, ProviderContext, WorkloadCase, WorkloadProfile
from dlopt_fx import probes
from dlopt_fx.compiled import CACHE_SUBDIR, varying_dims
from dlopt_fx.providers import InductorProvider


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(8, 3)

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, scale: float = 1.0
    ) -> torch.Tensor:
        y = self.drop(torch.relu(self.bn(self.conv(x)))).mean(dim=(2, 3))
        out = self.head(y) * scale
        return out if bias is None else out + bias


def _workload() -> WorkloadProfile:
    gen = torch.Generator().manual_seed(0)
    return WorkloadProfile(
        cases=(
            WorkloadCase(
                "b1", args=(torch.randn(1, 3, 10, 10, generator=gen),), kwargs={"scale": 0.5}
            ),
            WorkloadCase(
                "b4", args=(torch.randn(4, 3, 10, 10, generator=gen),), kwargs={"scale": 0.5}
            ),
        )
    )


def _graphs_compiled() -> int:
    import torch._dynamo.utils

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: Any) -> Any:
    if not probes.probe_inductor("cpu").available:
        pytest.skip("TorchInductor cannot compile on this CPU (no working C++ compiler)")
    torch.manual_seed(0)
    model = SmallNet().eval()
    workload = _workload()
    context = ProviderContext(workload=workload, artifact_dir=tmp_path_factory.mktemp("art"))
    provider = InductorProvider("fx_inductor", graph="fx", cache_in_plan_dir=True)
    before = _graphs_compiled()
    plan = provider.build(model, context)
    after_build = _graphs_compiled()
    with torch.no_grad():
        outputs = [plan(*c.args, **c.kwargs) for c in workload.cases]
    yield {
        "model": model,
        "workload": workload,
        "plan": plan,
        "outputs": outputs,
        "compiled_by_build": after_build - before,
        "compiled_by_calls": _graphs_compiled() - after_build,
        "context": context,
    }
    plan.close()


def test_build_is_lazy_and_first_calls_compile(compiled: Any) -> None:
    assert compiled["compiled_by_build"] == 0
    assert compiled["compiled_by_calls"] >= 1
    assert compiled["plan"].metadata["compiles_on_first_call"] is True


def test_batch_1_and_4_with_kwargs_match_eager(compiled: Any) -> None:
    model, workload = compiled["model"], compiled["workload"]
    with torch.no_grad():
        for case, got in zip(workload.cases, compiled["outputs"]):
            torch.testing.assert_close(got, model(*case.args, **case.kwargs), rtol=1e-4, atol=1e-4)
        # A steady-state call (same signature, no compile) on new data still matches.
        x = torch.randn(4, 3, 10, 10)
        torch.testing.assert_close(
            compiled["plan"](x, scale=0.5), model(x, scale=0.5), rtol=1e-4, atol=1e-4
        )


def test_evidence_records_rewrites_and_dynamic_dims(compiled: Any) -> None:
    meta = compiled["plan"].metadata
    assert meta["rewrites"]["conv_bn"] == 1 and meta["rewrites"]["dropout"] == 1
    assert meta["traced_as_constants"] == ["bias"]  # None in every case: guarded constant
    assert meta["dynamic_shapes"] == "marked"
    assert meta["dynamic_dims"] == {"0": [0]}  # only the batch dim of x varies


def test_inductor_cache_lives_under_the_plan_dir(compiled: Any) -> None:
    cache = Path(compiled["plan"].metadata["inductor_cache_dir"])
    assert cache == compiled["context"].artifact_dir / "fx_inductor" / CACHE_SUBDIR
    assert any(cache.rglob("*")), "compiling wrote nothing to the plan's cache dir"
    import os

    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(cache)  # scoped, not leaked


def test_closed_plan_refuses_to_run(compiled: Any) -> None:
    # A separate plan (never called, so nothing compiles) to close.
    plan = InductorProvider("inductor").build(compiled["model"], compiled["context"])
    assert isinstance(plan, BuiltPlan)
    other = compiled["plan"].runner
    assert plan.runner._code is not other._code  # each plan owns its Dynamo cache
    plan.close()
    with pytest.raises(RuntimeError, match="closed"):
        plan(torch.ones(1, 3, 10, 10))


def test_varying_dims_follows_the_cases() -> None:
    x = torch.ones(2, 3)
    same = (WorkloadCase("a", args=(x,)), WorkloadCase("b", args=(x,)))
    assert varying_dims(same) == ("static", {})
    mixed = (
        WorkloadCase("a", args=(torch.ones(1, 7), torch.ones(3))),
        WorkloadCase("b", args=(torch.ones(4, 9), torch.ones(3))),
    )
    assert varying_dims(mixed) == ("marked", {0: (0, 1)})
    ragged = (WorkloadCase("a", args=(x,)), WorkloadCase("b", args=(x,), kwargs={"m": x}))
    assert varying_dims(ragged) == ("automatic", {})
    assert varying_dims(None) == ("automatic", {})
    assert varying_dims(()) == ("automatic", {})


def test_raced_calls_reuse_what_the_first_calls_compiled(tmp_path: Path) -> None:
    """The pipeline's first calls run on copies of the cases under inference mode, the race
    on the cases themselves: the copies must not differ in a way Dynamo guards on, or the
    compile is paid again inside the race."""
    from dlopt.validation import copy_inputs

    if not probes.probe_inductor("cpu").available:
        pytest.skip("TorchInductor cannot compile on this CPU (no working C++ compiler)")
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).eval()
    workload = WorkloadProfile(cases=(WorkloadCase("b2", args=(torch.randn(2, 16),)),))
    context = ProviderContext(workload=workload, artifact_dir=tmp_path)
    plan = InductorProvider("fx_inductor", graph="fx").build(model, context)
    try:
        with torch.inference_mode():
            for case in workload.cases:
                args, kwargs = copy_inputs(case.args, case.kwargs)
                plan(*args, **kwargs)
            compiled_by_first_calls = _graphs_compiled()
            for case in workload.cases:
                plan(*case.args, **case.kwargs)
        assert _graphs_compiled() == compiled_by_first_calls
    finally:
        plan.close()
