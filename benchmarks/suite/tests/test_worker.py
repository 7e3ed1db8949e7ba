"""The suite's record of a dlopt decision, read from a saved report (no selection runs)."""

from __future__ import annotations

from benchmarks.suite.results import BUDGET_TOOL, PriorRange
from benchmarks.suite.worker import decision_from_report, record_file, report_file
from dlopt.contract.priors import OperatorMix
from dlopt.evidence.provenance import inspect_runtime
from dlopt.evidence.report import (
    SCHEMA_VERSION,
    CandidateEvidence,
    DecisionTimeEvidence,
    OptimizationReport,
    PriorEvidence,
    ValidationEvidence,
    WorkloadSummary,
)
from dlopt.settings.policy import DeploymentConstraints
from dlopt.settings.target import ExecutionTarget
from dlopt.validation import ValidationResult
from dlopt.vocabulary import Objective, Status

PRUNED = "its prior is at most 1.30x (table: avx2, conv models, 5 workload(s)), and ..."
LATE = "no time left: its build and first calls are expected to take 9.0 s ..."


def _candidate(name: str, status: Status, **extra) -> CandidateEvidence:
    return CandidateEvidence(name=name, status=status, precision="fp32", **extra)


def report(decision_time: DecisionTimeEvidence | None) -> OptimizationReport:
    passed = ValidationEvidence(first_calls=ValidationResult(True, None))
    prior = PriorEvidence(2.0, 1.5, 2.6, 3.0, "table: avx2, conv models, 5 workload(s)")
    return OptimizationReport(
        schema_version=SCHEMA_VERSION,
        dlopt_version="test",
        created_at="2026-01-01T00:00:00+00:00",
        objective=Objective.STEADY_STATE_LATENCY,
        target=ExecutionTarget("cpu"),
        constraints=DeploymentConstraints(),
        quality={},
        workload=WorkloadSummary("w", None, ()),
        runtime=inspect_runtime("cpu", with_providers=False),
        baseline="eager_fp32",
        selected_plan="inductor",
        selection_reason="fastest",
        candidates=(
            _candidate(
                "eager_fp32",
                Status.SELECTED,
                validation=passed,
                prior=PriorEvidence(1.0, 1.0, 1.0, 0.05, "the reference"),
            ),
            _candidate("inductor", Status.SELECTED, validation=passed, prior=prior),
            _candidate(
                "onnxruntime_cpu",
                Status.NOT_BUILT,
                options={"opt_level": 99},
                not_built=PRUNED,
                prior=PriorEvidence(1.1, 0.9, 1.3, 4.0, "table: avx2, conv models, 5 workload(s)"),
            ),
            _candidate("openvino_cpu", Status.NOT_BUILT, not_built=LATE),
        ),
        decision_time=decision_time,
    )


def test_a_dlopt_record_holds_the_plans_not_built_the_budget_the_mix_and_the_priors(tmp_path):
    timing = DecisionTimeEvidence(
        budget_s=19.5,
        budget_rule="auto",
        spent_s=14.2,
        exhaustive=False,
        machine_class="avx2",
        operator_mix=OperatorMix(conv=0.7, linear=0.2, attention=0.0, other=0.1),
        mix_kind="conv",
        reference_call_ms=31.0,
        cost_scale=1.2,
        not_built=("onnxruntime_cpu", "openvino_cpu"),
    )
    path = report(timing).save(tmp_path / "report.json")
    record = decision_from_report(path, wall_s=15.0)
    assert record.pick == "inductor" and record.valid_plans == ("eager_fp32", "inductor")
    assert record.not_built == {"onnxruntime_cpu": PRUNED, "openvino_cpu": LATE}
    assert (record.budget_s, record.budget_rule, record.decision_spent_s) == (19.5, "auto", 14.2)
    assert record.mix_kind == "conv"
    assert record.operator_mix == {
        "conv": 0.7,
        "linear": 0.2,
        "attention": 0.0,
        "recurrent": 0.0,
        "other": 0.1,
    }
    assert record.priors["inductor"] == PriorRange(
        1.5, 2.6, "table: avx2, conv models, 5 workload(s)"
    )
    assert record.priors["onnxruntime_cpu"].high == 1.3
    assert "openvino_cpu" not in record.priors  # no prior recorded


def test_a_report_from_before_decision_time_gives_an_empty_record_of_it(tmp_path):
    path = report(None).save(tmp_path / "report.json")
    record = decision_from_report(path, wall_s=15.0)
    assert record.budget_s is None and record.mix_kind is None and record.operator_mix == {}


def test_the_budget_runs_files_do_not_clash_with_the_default_runs():
    assert record_file("dlopt", "mlp", 1) == "dlopt-mlp-1.json"
    assert report_file("dlopt", "mlp", 1) == "dlopt-report-mlp-1.json"
    assert record_file("repeat", "mlp", None) == "dlopt-mlp-repeat.json"
    assert report_file("repeat", "mlp", None) == "dlopt-report-mlp-repeat.json"
    assert record_file(BUDGET_TOOL, "mlp", 1) == "dlopt-budget20-mlp-1.json"
    assert report_file(BUDGET_TOOL, "mlp", 1) == "dlopt-budget20-report-mlp-1.json"
