"""Evidence assembly: turn the pipeline's working state into the strict-JSON report."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from dlopt._version import __version__
from dlopt.contract.records import PluginFailure
from dlopt.evidence.provenance import inspect_runtime, record_providers
from dlopt.evidence.report import (
    SCHEMA_VERSION,
    CandidateEvidence,
    CaseEvidence,
    CaseSignature,
    DecisionTimeEvidence,
    LatencyEvidence,
    LifecycleEvidence,
    MemoryEvidence,
    ObjectiveEvidence,
    OptimizationReport,
    PriorEvidence,
    RaceEvidence,
    ThroughputEvidence,
    ValidationEvidence,
    WorkloadSummary,
)
from dlopt.measurement import RaceResult, RatioInterval
from dlopt.pipeline.constraints import weighted_latency
from dlopt.pipeline.state import CandidateState
from dlopt.platform.serialization import finite_or_none, strict_jsonable, to_jsonable
from dlopt.platform.tree import describe_inputs
from dlopt.selection.rules import SelectionOutcome
from dlopt.serving.evidence import ServingEvidence
from dlopt.settings.policy import OptimizationPolicy
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadProfile
from dlopt.validation import CaseValidation
from dlopt.vocabulary import Objective, Status


def build_report(
    *,
    target: ExecutionTarget,
    policy: OptimizationPolicy,
    workload: WorkloadProfile,
    plugin_failures: Sequence[PluginFailure],
    candidates: Sequence[CandidateState],
    race: RaceResult,
    outcome: SelectionOutcome,
    expected_calls: int | None,
    serving: ServingEvidence | None = None,
    decision_time: DecisionTimeEvidence | None = None,
) -> OptimizationReport:
    """The strict-JSON report of one selection: what ran where, every candidate's
    evidence, the race's figures, the decision with its reason and how it serves."""
    runtime = record_providers(
        inspect_runtime(target, with_providers=False),
        [c.status for c in candidates if c.status is not None],
        plugin_failures,
    )
    comparisons = {(c.candidate, c.against): c for c in outcome.comparisons}
    evidence = tuple(candidate_evidence(policy, c, race, outcome, comparisons) for c in candidates)
    return OptimizationReport(
        schema_version=SCHEMA_VERSION,
        dlopt_version=__version__,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        objective=policy.objective,
        target=target,
        constraints=attrs.evolve(policy.constraints, expected_calls=expected_calls),
        quality=_quality_summary(policy),
        workload=WorkloadSummary(
            workload.name,
            workload.expected_calls,
            tuple(
                CaseSignature(
                    case.name, float(case.weight), describe_inputs(case.args, case.kwargs)
                )
                for case in workload.cases
            ),
            workload.inputs,
        ),
        runtime=runtime,
        baseline=outcome.baseline,
        selected_plan=outcome.selected,
        selection_reason=outcome.reason,
        candidates=evidence,
        measurement=race.summary(),
        plugin_failures=tuple(plugin_failures),
        batch_size=outcome.batch_size,
        throughput=throughput_evidence(policy, workload, candidates, outcome),
        serving=serving,
        decision_time=decision_time,
    )


def throughput_evidence(
    policy: OptimizationPolicy,
    workload: WorkloadProfile,
    candidates: Sequence[CandidateState],
    outcome: SelectionOutcome,
) -> ThroughputEvidence | None:
    """The throughput curves and the budget's verdict (throughput objective only)."""
    chosen = outcome.throughput
    if chosen is None or workload.batch_sizes is None:
        return None
    constraints = policy.constraints
    budget = " and ".join(
        f"{name} {value:g} ms"
        for name, value in (
            ("max_latency_ms", constraints.max_latency_ms),
            ("max_p99_latency_ms", constraints.max_p99_latency_ms),
        )
        if value is not None
    )
    miss = chosen.closest_miss
    sizes = ", ".join(map(str, workload.batch_sizes))
    return ThroughputEvidence(
        batch_sizes=workload.batch_sizes,
        batch_dim=workload.batch_dim,
        baseline_batch_size=chosen.baseline_batch_size,
        budget_met=chosen.budget_met,
        points=chosen.points,
        budget=budget or None,
        closest_miss=(
            f"{miss.plan} at batch {miss.batch_size}: {miss.budget_note}"
            if miss is not None and miss.budget_note
            else None
        ),
        memory_note=workload.memory_note,
        shapes={
            cand.name: shape_support(cand, sizes)
            for cand in candidates
            if cand.alive or cand.error is not None
        },
    )


#: The ``BuiltPlan.metadata`` key in which a plan says how one build serves several input
#: shapes (an ONNX export's dynamic axes, a TensorRT engine's shape range).
INPUT_SHAPES_KEY = "input_shapes"


def shape_support(cand: CandidateState, sizes: str) -> str:
    """How ``cand`` serves the raced batch sizes: one build for all of them, with the
    range the plan declares (``metadata["input_shapes"]``), or why it did not race."""
    if cand.not_raced is not None:
        return f"built and validated, not raced: {cand.not_raced}"
    if not cand.alive:
        stage = cand.error.stage if cand.error is not None else "build"
        return (
            f"not raced: rejected at {stage} (a plan that cannot serve every batch size "
            "from one build is rejected whole)"
        )
    declared = cand.plan.metadata.get(INPUT_SHAPES_KEY) if cand.plan is not None else None
    text = f"one build, validated and raced at every batch size ({sizes})"
    return f"{text}: {declared}" if isinstance(declared, str) and declared else text


def candidate_evidence(
    policy: OptimizationPolicy,
    cand: CandidateState,
    race: RaceResult,
    outcome: SelectionOutcome,
    comparisons: dict,
) -> CandidateEvidence:
    availability = cand.status.availability if cand.status else None
    # A provider that failed before building shows the precision it declares; one that
    # declares none (it broke the protocol, and its failure is the evidence) is not a crash.
    declared = getattr(cand.info.provider, "precision", "undeclared")
    precision = (
        cand.plan.precision.value if cand.plan else getattr(declared, "value", str(declared))
    )
    plan = cand.plan
    base: dict[str, Any] = dict(
        name=cand.name,
        precision=precision,
        role=cand.role.value,
        options=_recordable(lambda: to_jsonable(cand.options))
        if cand.options is not None
        else None,
        plugin=cand.info.plugin,
        distribution=cand.info.distribution,
        version=cand.info.version,
        availability_reason=availability.reason if availability else None,
        install_hint=availability.install_hint if availability else None,
        error=cand.error,
        metadata=_recordable(lambda: strict_jsonable(plan.metadata)) if plan else {},
        artifacts=(
            _recordable(lambda: {str(k): os.fspath(v) for k, v in plan.artifacts.items()})
            if plan
            else {}
        ),
    )
    if availability is not None and not availability.available:
        return CandidateEvidence(status=Status.UNAVAILABLE, **base)
    if cand.not_built is not None:
        return CandidateEvidence(
            status=Status.NOT_BUILT,
            prior=prior_evidence(cand, None),
            not_built=cand.not_built,
            **base,
        )
    measured = None
    with contextlib.suppress(KeyError):  # not raced: rejected before the race
        measured = race.candidate(cand.name)
    validation_by_case: dict[str, CaseValidation] = {
        v.case: v for v in (cand.validation.cases if cand.validation else ())
    }
    latency_by_case = {s.case: s for s in (measured.cases if measured else ())}
    cases = tuple(
        CaseEvidence(
            name=name,
            weight=weight,
            first_call_time_s=cand.first_calls_s[i] if i < len(cand.first_calls_s) else None,
            latency=latency_by_case.get(name),
            validation=validation_by_case.get(name),
        )
        for i, (name, weight) in enumerate(zip(race.case_names, race.weights))
    )
    if cand.name == outcome.selected:
        status = Status.SELECTED
    elif cand.not_applicable:
        status = Status.NOT_APPLICABLE
    elif cand.error is not None:
        status = Status.REJECTED
    elif cand.name == outcome.baseline:
        status = Status.BASELINE
    else:
        status = Status.LOST
    versus_eager = comparisons.get((cand.name, outcome.reference))
    versus_base = comparisons.get((cand.name, outcome.baseline))
    judged = versus_base or versus_eager
    steady_eager = measured.speedup_vs_baseline if measured and not cand.is_reference else None
    steady_native = outcome.steady_vs_baseline.get(cand.name) if cand.alive else None
    mean = measured.weighted_mean_ms if measured else None
    total = finite_or_none(outcome.projected_total_ms.get(cand.name))
    lifecycle = policy.objective is Objective.LIFECYCLE_LATENCY
    selection_interval = judged.speedup if (lifecycle and judged) else None
    return CandidateEvidence(
        status=status,
        latency=LatencyEvidence(
            median_ms=weighted_latency(measured, race.weights, lambda s: s.median_ms),
            mean_ms=mean,
            p90_ms=weighted_latency(measured, race.weights, lambda s: s.p90_ms),
            p95_ms=weighted_latency(measured, race.weights, lambda s: s.p95_ms),
            p99_ms=weighted_latency(measured, race.weights, lambda s: s.p99_ms),
            ci95_low_ms=measured.weighted_mean_low_ms if measured else None,
            ci95_high_ms=measured.weighted_mean_high_ms if measured else None,
            longest_call_s=measured.longest_call_s if measured else None,
        ),
        race=RaceEvidence(
            verdict=measured.verdict if measured else None,
            noisy=measured.noisy if measured else None,
            gate_passed=judged.gate_passed if judged else None,
            gate_against=judged.against if judged else None,
            speedup_vs_reference=steady_eager,
            speedup_vs_baseline=steady_native,
            note=(measured.note or None) if measured else None,
            eliminated_by=measured.eliminated_by if measured else None,
            elimination_speedup=measured.elimination_interval if measured else None,
            round_spread=(
                race.round_spread(cand.name, outcome.baseline)
                if measured and cand.name != outcome.baseline
                else None
            ),
        ),
        memory=MemoryEvidence(
            peak_mb=cand.memory.mb if cand.memory else None,
            method=cand.memory.method if cand.memory else None,
            note=cand.memory.note if cand.memory else None,
            device_mb=cand.device_memory_mb,
            device_wide_mb=cand.memory.device_wide_mb if cand.memory else None,
        ),
        lifecycle=LifecycleEvidence(
            setup_time_s=cand.setup_s,
            first_call_time_s=sum(cand.first_calls_s) if cand.first_calls_s else None,
            projected_total_ms=finite_or_none(total),
            break_even_calls_vs_baseline=(versus_base.break_even_calls if versus_base else None),
            break_even_note=(versus_base.break_even_note if versus_base else None),
            speedup_vs_baseline_lifecycle=selection_interval,
        ),
        objective=ObjectiveEvidence(
            cost_ms=total if lifecycle else mean,
            cost_low_ms=(
                _scale(total, selection_interval, "high")
                if lifecycle
                else (measured.weighted_mean_low_ms if measured else None)
            ),
            cost_high_ms=(
                _scale(total, selection_interval, "low")
                if lifecycle
                else (measured.weighted_mean_high_ms if measured else None)
            ),
        ),
        validation=ValidationEvidence(
            first_calls=cand.validation,
            revalidation=cand.revalidation,
            final_check=cand.final_check,
        ),
        cases=cases,
        prior=prior_evidence(cand, steady_eager),
        not_raced=cand.not_raced,
        **base,
    )


def prior_evidence(cand: CandidateState, measured: RatioInterval | None) -> PriorEvidence | None:
    """``cand``'s prior as reported, with its miss when ``measured`` (its speedup over
    eager fp32 in the race) fell outside the prior's interval."""
    prior = cand.prior
    if prior is None:
        return None
    miss = None
    point = measured.point if measured is not None else None
    if point is not None and not prior.low <= point <= prior.high:
        side = "above" if point > prior.high else "below"
        miss = (
            f"measured {point:.2f}x, {side} its prior's interval [{prior.low:.2f}, "
            f"{prior.high:.2f}] ({prior.source})"
        )
    return PriorEvidence(
        prior.speedup,
        prior.low,
        prior.high,
        prior.cost_s,
        prior.source,
        miss,
        cand.screening,
        cand.built_to_test,
    )


def _recordable(values: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A plan's metadata or artifacts as JSON, or nothing when the plugin's values cannot
    be recorded (the plan was then rejected at build, and its error says why)."""
    try:
        return values()
    except (ValueError, TypeError):
        return {}


def _scale(total: float | None, interval: RatioInterval | None, end: str) -> float | None:
    """Bound a projected total from the baseline total and a lifecycle speedup bound."""
    if total is None or interval is None or interval.point is None:
        return None
    bound = getattr(interval, end)
    if bound is None or bound <= 0:
        return None
    return finite_or_none(total * interval.point / bound)


def _quality_summary(policy: OptimizationPolicy) -> dict[str, Any]:
    """The quality policy as JSON; user metric functions are named, not serialized."""
    quality = policy.quality
    summary: dict[str, Any] = {
        "limits": to_jsonable(quality.limits),
        "per_precision": {
            getattr(k, "value", str(k)): to_jsonable(v) for k, v in quality.per_precision.items()
        },
        "per_output": {k: to_jsonable(v) for k, v in quality.per_output.items()},
        "user_metrics": [
            {"name": m.name, "limit": m.limit, "direction": m.direction, "path": m.path}
            for m in quality.user_metrics
        ],
        "training_mode": quality.training_mode,
        "allow_nonfinite_reference": quality.allow_nonfinite_reference,
        "reference_rel_tolerance": quality.reference_rel_tolerance,
    }
    return strict_jsonable(summary)
