"""Beyond the raced inputs: a model whose graph depends on its input values is refused by
every plan that traces or exports it, with the model's line quoted, and the decision
answers an input of the other branch as eager does; NaN inputs get eager's answer.

The raced inputs are all positive, so every case takes one branch and a traced plan would
pass validation: only the check at build stands between it and a silently wrong answer.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from dlopt import (
    DeploymentConstraints,
    InferenceOptimizer,
    OptimizationPolicy,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt.measurement import MeasurementPolicy

#: Every plan here that makes its graph by tracing or export (bf16 where the CPU has it).
TRACING_PLANS = (
    "onnxruntime_cpu",
    "onnxruntime_cpu_int8",
    "openvino_cpu",
    "openvino_cpu_bf16",
    "openvino_cpu_int8",
)


class SumBranch(torch.nn.Module):
    """The reported repro: ``if x.sum() > 0`` one layer, else another times three."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(64, 64)
        self.b = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.a(x)
        return self.b(x) * 3


class PeakBranch(torch.nn.Module):
    """A branch on another statistic of the input: its largest value."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if x.amax() < 5.0:
            return torch.relu(h)
        return h


class ValueLoop(torch.nn.Module):
    """A loop whose count the input's values set."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = int(x.mean().clamp(min=0, max=3) * 4)
        for _ in range(steps):
            x = torch.tanh(self.a(x))
        return x


VARIANTS = {
    "sum-branch": (SumBranch, "if x.sum() > 0:", lambda x: -x),
    "peak-branch": (PeakBranch, "if x.amax() < 5.0:", lambda x: x + 10.0),
    "value-loop": (ValueLoop, "steps = int(x.mean().clamp(min=0, max=3) * 4)", lambda x: x * 0),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_tracing_plan_refuses_a_value_dependent_graph(variant, tmp_path):
    pytest.importorskip("dlopt_onnxruntime")
    pytest.importorskip("dlopt_openvino")
    make, line, other_branch = VARIANTS[variant]
    torch.manual_seed(0)
    model = make().eval()
    gen = torch.Generator().manual_seed(1)
    workload = WorkloadProfile(
        cases=(
            WorkloadCase("b4", args=(torch.rand(4, 64, generator=gen) + 0.5,)),
            WorkloadCase("b8", args=(torch.rand(8, 64, generator=gen) + 0.5,)),
        )
    )
    policy = OptimizationPolicy(
        include=("eager_fp32", *TRACING_PLANS),
        constraints=DeploymentConstraints(min_speedup=0.01),
        measurement=MeasurementPolicy(max_time_s=2.0, seed=0, bootstrap_resamples=0),
        exhaustive=True,
    )
    decision = InferenceOptimizer("cpu", policy, artifact_dir=tmp_path / "plans").select(
        model, workload
    )
    by_name = {c.name: c for c in decision.report.candidates}
    refused = []
    for name in TRACING_PLANS:
        cand = by_name[name]
        if str(cand.status) == "unavailable":
            continue  # openvino_cpu_bf16 without native bf16
        assert str(cand.status) == "rejected", (name, cand.status)
        assert cand.error is not None and str(cand.error.stage) == "build", name
        assert "depends on the input values" in cand.error.message, cand.error.message
        assert line in cand.error.message and "test_beyond_raced_inputs.py:" in (
            cand.error.message
        ), cand.error.message
        refused.append(name)
    assert {"onnxruntime_cpu", "openvino_cpu", "openvino_cpu_int8"} <= set(refused)
    assert decision.selected_plan == "eager_fp32"
    x = other_branch(torch.rand(4, 64, generator=gen) + 0.5)
    with torch.inference_mode():
        torch.testing.assert_close(decision(x), model(x), rtol=0, atol=0)
    decision.close()


def test_nonfinite_inputs_get_eagers_answer_or_the_policys_error(tmp_path):
    """A ReLU MLP where OpenVINO answered NaN inputs with finite numbers: eager serves them
    by default, counted; ``on_nonfinite_input="raise"`` refuses them."""
    pytest.importorskip("dlopt_openvino")
    from dlopt import NonFiniteInputError
    from dlopt.testing.models import SlowEagerNet

    model = SlowEagerNet(channels=8, convs=1, sleep_s=0.01)  # eager is slow: the plan wins
    gen = torch.Generator().manual_seed(2)
    workload = WorkloadProfile(
        cases=(WorkloadCase("b4", args=(torch.randn(4, 3, 8, 8, generator=gen),)),)
    )
    base = {
        "include": ("eager_fp32", "openvino_cpu"),
        "constraints": DeploymentConstraints(min_speedup=0.01),
        "measurement": MeasurementPolicy(max_time_s=3.0, seed=0, bootstrap_resamples=0),
        "exhaustive": True,
    }
    decision = InferenceOptimizer("cpu", OptimizationPolicy(**base)).select(model, workload)
    if decision.selected_plan != "openvino_cpu":
        pytest.skip(f"openvino_cpu did not win here: {decision.selection_reason}")
    x = torch.randn(4, 3, 8, 8, generator=gen)
    x[0, 0, 0, 0] = float("nan")
    x[3] = float("-inf")
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        out = decision(x)
        expected = model(x)
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)
    assert any("NaN or infinity" in str(w.message) for w in caught)
    assert decision.health().fallbacks["nonfinite_input"] == 1
    decision.close()
    refusing = InferenceOptimizer(
        "cpu", OptimizationPolicy(**base, on_nonfinite_input="raise")
    ).select(model, workload)
    if refusing.selected_plan == "openvino_cpu":
        with pytest.raises(NonFiniteInputError), torch.inference_mode():
            refusing(x)
    refusing.close()
