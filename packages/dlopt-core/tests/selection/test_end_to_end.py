"""The whole pipeline on fake providers: who wins, who is rejected and why."""

from __future__ import annotations

import json

import pytest
import torch

from dlopt import WorkloadCase, WorkloadProfile
from dlopt.errors import ConfigurationError, ReferenceCheckError
from dlopt.evidence.report import load_report
from dlopt.settings.policy import DeploymentConstraints
from dlopt.testing.models import StructuredMLP as SmallNet


def _workload(x: torch.Tensor) -> WorkloadProfile:
    return WorkloadProfile(
        name="mix",
        cases=(
            WorkloadCase("batch-4", args=(x,), weight=70),
            WorkloadCase("batch-1", args=(x[:1],), kwargs={"scale": 0.5}, weight=30),
        ),
    )


def test_two_times_faster_exact_challenger_wins(race, x):
    eager, fast = race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)
    decision = race.optimizer(eager, fast).select_signature(SmallNet(), x)
    assert decision.selected_plan == "fast"
    evidence = decision.report.candidate("fast")
    assert evidence.status == "selected" and evidence.confidence_gate_passed
    assert evidence.speedup_vs_eager.low > 1.5 and evidence.speedup_vs_eager.point == pytest.approx(
        2, rel=0.05
    )
    assert "Selected fast" in decision.selection_reason and "1.02x" in decision.selection_reason
    torch.testing.assert_close(decision(x), SmallNet()(x))
    assert decision.report.candidate("eager_fp32").status == "baseline"
    assert eager.closes == 1 and fast.closes == 0  # losers are closed, the winner is served


def test_identical_challenger_never_wins(race, x):
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), race.fake("same", 2e-3)
    ).select_signature(SmallNet(), x)
    assert decision.selected_plan == "eager_fp32"
    assert decision.report.candidate("same").confidence_gate_passed is False
    assert decision.selection_reason.startswith("Kept eager_fp32")
    assert "same" in decision.selection_reason


def test_weighted_multi_case_workload_with_kwargs(race, x):
    # "fast" only wins on batch-1 (30% of traffic) and loses on batch-4 (70%): net slower.
    eager = race.fake("eager_fp32", 2e-3)
    lopsided = race.fake("lopsided", 2e-3, per_batch_scale={1: 0.2, 4: 1.5})
    decision = race.optimizer(eager, lopsided).select(SmallNet(), _workload(x))
    assert decision.selected_plan == "eager_fp32"
    cases = decision.report.candidate("lopsided").cases
    assert [c.name for c in cases] == ["batch-4", "batch-1"]
    assert [c.weight for c in cases] == pytest.approx([0.7, 0.3])
    assert cases[1].latency.median_ms < cases[0].latency.median_ms
    assert (
        decision.report.workload.cases[1].inputs == "args[0]: float32[1, 16]; kwargs['scale']: 0.5"
    )


@pytest.mark.parametrize("output", ["dict", "namedtuple"])
def test_structured_outputs_validate_and_serve(race, x, output):
    model = SmallNet(output)
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)
    ).select_signature(model, x)
    assert decision.selected_plan == "fast"
    parity = decision.report.candidate("fast").validation.first_calls
    assert parity.passed and len(parity.cases[0].leaves) >= 2
    out = decision(x)
    assert type(out) is type(model(x))


STAGES = ["probe", "probe_raises", "build", "first_call", "validation", "measure", "mutate_model"]


@pytest.mark.parametrize("stage", STAGES)
def test_failure_at_every_stage_is_reported_and_the_race_goes_on(race, x, stage):
    model = SmallNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    broken = race.fake("broken", 0.5e-3, fail=stage, fail_after_calls=3)
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), broken, race.fake("good", 1e-3)
    ).select_signature(model, x)
    assert decision.selected_plan == "good"
    evidence = decision.report.candidate("broken")
    if stage in ("probe", "probe_raises"):
        assert evidence.status == "unavailable"
        assert evidence.availability_reason
    else:
        assert evidence.status == "rejected"
        expected_stage = {"mutate_model": "build"}.get(stage, stage)
        assert evidence.error.stage == expected_stage, evidence.error
        assert evidence.error.message
    if stage == "validation":
        assert "rel_l2" in evidence.error.message or "outside" in evidence.error.message
    if stage == "mutate_model":
        assert "mutated" in evidence.error.message
    for key, value in before.items():
        assert torch.equal(model.state_dict()[key], value), f"{key} changed"
    # A plan that was built is closed once rejected; nothing to close when build failed.
    assert broken.closes == (1 if stage not in ("probe", "probe_raises", "build") else 0)


def test_every_challenger_failing_returns_eager_with_a_reason(race, x):
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("a", 1e-3, fail="build"),
        race.fake("b", 1e-3, fail="validation"),
    ).select_signature(SmallNet(), x)
    assert decision.selected_plan == "eager_fp32"
    assert "no other candidate passed validation" in decision.selection_reason


def test_eager_that_cannot_run_the_inputs_stops_before_any_build(race):
    challenger = race.fake("fast", 1e-3)
    with pytest.raises(ReferenceCheckError):
        race.optimizer(race.fake("eager_fp32", 2e-3), challenger).select_signature(
            SmallNet(), torch.randn(2, 5)
        )
    assert challenger.builds == 0


def test_constraints_reject(race, x):
    slow_build = race.fake("slow_build", 1e-3, setup_time_s=40.0)
    slow_first = race.fake("slow_first", 1e-3, first_call_time_s=20.0)
    constraints = DeploymentConstraints(max_setup_time_s=30, max_first_call_time_s=10)
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), slow_build, slow_first, constraints=constraints
    ).select_signature(SmallNet(), x)
    assert decision.selected_plan == "eager_fp32"
    for name, text in (("slow_build", "max_setup_time_s"), ("slow_first", "max_first_call_time_s")):
        evidence = decision.report.candidate(name)
        assert evidence.error.stage == "constraint" and text in evidence.error.message


def test_latency_constraint_rejects_after_measurement(race, x):
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("fast", 1e-3),
        constraints=DeploymentConstraints(max_latency_ms=0.5),
    ).select_signature(SmallNet(), x)
    assert decision.report.candidate("fast").error.stage == "constraint"
    assert decision.selected_plan == "eager_fp32"


@pytest.mark.parametrize(("calls", "winner"), [(1_000, "eager_fp32"), (10_000_000, "heavy")])
def test_lifecycle_objective_repays_setup_only_over_a_long_horizon(race, x, calls, winner):
    # 2x faster per call (1 ms saved) but 100 s to build: repays after 100k calls.
    heavy = race.fake("heavy", 1e-3, setup_time_s=100.0)
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        heavy,
        objective="lifecycle_latency",
        constraints=DeploymentConstraints(expected_calls=calls),
    ).select_signature(SmallNet(), x)
    assert decision.selected_plan == winner
    evidence = decision.report.candidate("heavy")
    assert evidence.break_even_calls_vs_baseline == pytest.approx(100_000, rel=0.05)
    assert evidence.projected_total_ms is not None
    assert decision.report.objective == "lifecycle_latency"


def test_steady_state_objective_ignores_setup_cost(race, x):
    heavy = race.fake("heavy", 1e-3, setup_time_s=100.0)
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        heavy,
        constraints=DeploymentConstraints(expected_calls=1_000),
    ).select_signature(SmallNet(), x)
    assert decision.selected_plan == "heavy"  # the objective is exactly what was chosen


def test_lifecycle_without_a_call_horizon_is_a_clear_error(race, x):
    with pytest.raises(ConfigurationError, match="expected_calls"):
        race.optimizer(
            race.fake("eager_fp32", 2e-3), objective="lifecycle_latency"
        ).select_signature(SmallNet(), x)


def test_native_variant_becomes_the_baseline_only_when_it_clears_the_gate(race, x):
    eager, native = race.fake("eager_fp32", 2e-3), race.fake("native_bf16", 1e-3, precision="bf16")
    # 10% faster than eager but 2x slower than the native baseline: must not win.
    other = race.fake("other", 1.8e-3)
    decision = race.optimizer(eager, native, other).select_signature(SmallNet(), x)
    assert decision.report.baseline == "native_bf16"
    assert decision.selected_plan == "native_bf16"
    evidence = decision.report.candidate("other")
    assert evidence.gate_against == "native_bf16" and evidence.confidence_gate_passed is False
    assert evidence.speedup_vs_native.point == pytest.approx(1 / 1.8, rel=0.05)


def test_report_is_strict_json_and_round_trips(race, x, tmp_path):
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("fast", 1e-3),
        race.fake("bad", 1e-3, fail="build"),
        race.fake("absent", 1e-3, fail="probe"),
    ).select(SmallNet(), _workload(x))
    path = decision.save_report(tmp_path / "report.json")
    text = path.read_text()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"found {name}"))
    loaded = load_report(path)
    assert loaded == decision.report
    assert loaded.to_json() + "\n" == text
    data = json.loads(text)
    assert data["schema_version"] == 2 and data["measurement"]["seed"] == 7
    fast = next(c for c in data["candidates"] if c["name"] == "fast")
    for key in (
        "latency_ms",
        "latency_mean_ms",
        "latency_p90_ms",
        "latency_p95_ms",
        "latency_p99_ms",
        "latency_ci95_low_ms",
        "latency_ci95_high_ms",
        "selection_cost_ms",
        "confidence_gate_passed",
        "peak_memory_mb",
        "setup_time_s",
        "first_call_time_s",
        "projected_total_ms",
        "break_even_calls_vs_baseline",
        "speedup_vs_eager",
        "speedup_vs_native",
        "parity",
        "precision",
        "error",
        "cases",
    ):
        assert key in fast
    bundle = decision.save_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["selected_plan"] == "fast" and manifest["report"] == "report.json"


def test_explicit_provider_replaces_discovered_one_and_progress_events_flow(race, x):
    events = []
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
    optimizer.observers = (events.append,)
    decision = optimizer.select_signature(SmallNet(), x)
    assert decision.report.candidate("eager_fp32").plugin == "explicit"
    kinds = [e.kind.value for e in events]
    assert kinds[0] == "race_started" and kinds[-1] == "decision_made"
    assert "round_finished" in kinds and "candidate_validated" in kinds


def test_model_on_the_wrong_device_is_a_clear_error(race, x):
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3))
    optimizer.target = type(optimizer.target)("cuda")
    with pytest.raises(ConfigurationError, match="move the model first"):
        optimizer.select_signature(SmallNet(), x)
