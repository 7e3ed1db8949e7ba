"""What the agent tools show of reports, workloads and providers: plain JSON values.

Free texts are cut to a known length here; the result envelope (``dlopt.agents.tool_results``)
bounds the whole. Host file paths (plan artifacts) are shown by name only.
"""

from __future__ import annotations

from typing import Any

from dlopt.agents.tool_results import clip
from dlopt.evidence.report import CandidateEvidence, OptimizationReport
from dlopt.pipeline.probe import ProbeRecord
from dlopt.platform.serialization import strict_jsonable
from dlopt.platform.tree import describe_inputs
from dlopt.settings.workload import WorkloadProfile

#: The longest reason, message or description a summary shows.
TEXT_LIMIT = 600


#: The fields of a candidate's evidence the decision summary shows (absent ones read null).
SUMMARY_FIELDS = (
    "name",
    "status",
    "role",
    "precision",
    "latency_ms",
    "speedup_vs_eager",
    "measurement_verdict",
    "confidence_gate_passed",
    "setup_time_s",
)
#: The fields of the race's measurement summary the decision summary shows.
MEASUREMENT_FIELDS = ("rounds", "stop_reason", "total_time_s", "confidence")
#: The fields of a speedup interval a summary shows.
INTERVAL_FIELDS = ("point", "low", "high", "confidence")


def _pick(data: Any, keys: tuple[str, ...]) -> dict[str, Any] | None:
    return {key: data.get(key) for key in keys} if isinstance(data, dict) else None


def candidate_summary(cand: CandidateEvidence) -> dict[str, Any]:
    """One line of the decision summary: status, latency, speedup, why it was rejected."""
    data = strict_jsonable(cand)
    line = _pick(data, SUMMARY_FIELDS) or {}
    line["speedup_vs_eager"] = _pick(data.get("speedup_vs_eager"), INTERVAL_FIELDS)
    error = data.get("error")
    line["error"] = (
        {"stage": error.get("stage"), "message": clip(error.get("message"), TEXT_LIMIT)}
        if isinstance(error, dict)
        else None
    )
    reason = data.get("availability_reason")
    line["unavailable_reason"] = clip(reason, TEXT_LIMIT) if reason else None
    return line


def report_summary(workload: str, report: OptimizationReport) -> dict[str, Any]:
    """The decision in a few dozen fields: what was selected, why, and every candidate."""
    measurement = strict_jsonable(report.measurement)
    budget = measurement.get("policy") if isinstance(measurement, dict) else None
    summary = _pick(measurement, MEASUREMENT_FIELDS)
    if summary is not None:
        summary.update(_pick(budget, ("max_time_s", "max_rounds")) or {})
    return strict_jsonable(
        {
            "workload": workload,
            "selected_plan": report.selected_plan,
            "baseline": report.baseline,
            "selection_reason": clip(report.selection_reason, 2 * TEXT_LIMIT),
            "objective": report.objective,
            "min_speedup": report.constraints.min_speedup,
            "created_at": report.created_at,
            "target": report.target.device,
            "measurement": summary,
            "candidates": [candidate_summary(c) for c in report.candidates],
            **throughput_summary(report),
        }
    )


#: The fields of each (plan, batch size) point a throughput summary shows.
POINT_FIELDS = (
    "plan",
    "batch_size",
    "latency_ms",
    "items_per_s",
    "items_per_s_low",
    "items_per_s_high",
    "admissible",
    "budget_note",
)


def throughput_summary(report: OptimizationReport) -> dict[str, Any]:
    """Under the throughput objective: the served batch size, the budget's verdict and
    the throughput curves; nothing otherwise."""
    evidence = report.throughput
    if evidence is None:
        return {}
    points = [_pick(strict_jsonable(p), POINT_FIELDS) for p in evidence.points]
    for point in points:
        if point is not None and point.get("budget_note"):
            point["budget_note"] = clip(point["budget_note"], TEXT_LIMIT)
    return {
        "batch_size": report.batch_size,
        "throughput": {
            "budget": evidence.budget,
            "budget_met": evidence.budget_met,
            "closest_miss": clip(evidence.closest_miss, TEXT_LIMIT)
            if evidence.closest_miss
            else None,
            "curves": points,
        },
    }


def candidate_details(workload: str, cand: CandidateEvidence) -> dict[str, Any]:
    """One candidate's whole evidence; artifact files by name only (no host paths)."""
    evidence = strict_jsonable(cand)
    evidence["artifacts"] = sorted(cand.artifacts)
    return {"workload": workload, "candidate": evidence}


def workload_view(
    name: str,
    description: str,
    profile: WorkloadProfile,
    *,
    optimizing: bool,
    report: OptimizationReport | None,
) -> dict[str, Any]:
    """A registered workload: its cases by input signature and traffic share, and the
    latest decision."""
    return strict_jsonable(
        {
            "name": name,
            "description": clip(description, TEXT_LIMIT),
            "expected_calls": profile.expected_calls,
            "cases": [
                {
                    "name": clip(case.name, 100),
                    "weight": weight,
                    "inputs": clip(describe_inputs(case.args, case.kwargs), TEXT_LIMIT),
                }
                for case, weight in zip(profile.cases, profile.weights)
            ],
            "optimizing": optimizing,
            "latest_decision": (
                {
                    "selected_plan": report.selected_plan,
                    "created_at": report.created_at,
                    "selection_reason": clip(report.selection_reason, TEXT_LIMIT),
                }
                if report is not None
                else None
            ),
        }
    )


def provider_view(status: ProbeRecord, role: str | None) -> dict[str, Any]:
    """One installed plan and whether it can run here."""
    availability = status.availability
    return strict_jsonable(
        {
            "name": status.name,
            "role": role,
            "precision": status.precision,
            "available": availability.available,
            "reason": clip(availability.reason, TEXT_LIMIT) if availability.reason else None,
            "install_hint": (
                clip(availability.install_hint, TEXT_LIMIT) if availability.install_hint else None
            ),
            "distribution": status.distribution,
            "version": status.version,
            "sdk_versions": dict(availability.sdk_versions),
        }
    )
