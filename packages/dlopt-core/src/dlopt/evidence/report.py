"""The audit trail of a selection: strict JSON, versioned, exact round trip."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import cattrs
from attrs import field, frozen
from cattrs.gen import make_dict_unstructure_fn, override

from dlopt._version import __version__
from dlopt.contract.priors import OperatorMix
from dlopt.contract.records import PluginFailure
from dlopt.evidence.provenance import RuntimeInfo
from dlopt.measurement import (
    LatencyStats,
    RaceSummary,
    RatioInterval,
)
from dlopt.pipeline.state import StageError
from dlopt.platform.fileio import read_bytes_capped
from dlopt.platform.serialization import (
    atomic_write_text,
    converter,
    dumps,
    from_jsonable,
    parse_strict_json,
)
from dlopt.selection.throughput import BatchPoint
from dlopt.serving.evidence import ServingEvidence
from dlopt.settings.policy import DeploymentConstraints
from dlopt.settings.target import ExecutionTarget
from dlopt.validation import CaseValidation, ValidationResult
from dlopt.vocabulary import Objective, Status, Verdict

#: Bumped whenever a field changes meaning or is removed (adding a field is compatible).
SCHEMA_VERSION = 2
#: The largest report file :func:`load_report` reads; real reports are far smaller.
MAX_REPORT_BYTES = 64 * 2**20


@frozen
class CaseEvidence:
    """One candidate on one workload case."""

    name: str
    weight: float
    first_call_time_s: float | None = None
    latency: LatencyStats | None = None
    validation: CaseValidation | None = None


@frozen
class WorkerFault:
    """How a plan took its isolated worker down (``OptimizationPolicy(isolation="process")``).

    ``kind``: ``crashed`` (the worker died: ``signal`` names the signal, or ``exit_code``
    the status it exited with) or ``hung`` (the watchdog killed it after ``elapsed_s``
    seconds in one call, probe or build). ``stage`` is where the plan was; ``stderr`` the
    worker's last lines of error output; ``attempt`` the worker it happened in.
    """

    kind: str
    stage: str
    attempt: int
    signal: str | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    limit_s: float | None = None
    stderr: tuple[str, ...] = ()


@frozen
class WorkerAttempt:
    """One worker of an isolated selection, read from its journal: how it ended
    (``report``, ``crashed``, ``hung`` or ``killed`` from outside), with which plan in
    flight, and the evidence it had gathered (plans validated, rounds raced)."""

    attempt: int
    outcome: str
    plan: str | None = None
    stage: str | None = None
    validated: tuple[str, ...] = ()
    rounds: int = 0


@frozen
class IsolationSummary:
    """How an isolated selection went: the workers it took and the plans they lost."""

    mode: str
    workers: int
    crashed: tuple[str, ...] = ()
    hung: tuple[str, ...] = ()
    #: Workers ended from outside (a kill no watchdog sent), each resumed.
    external_kills: int = 0
    #: How "resume" treats the evidence (docs/isolation.md).
    note: str | None = None
    #: Every worker, first to last: the journaled evidence of those that were lost.
    attempts: tuple[WorkerAttempt, ...] = ()
    #: What the workers left behind that could not be cleaned up (a process a plan
    #: started that survived SIGKILL, say), one line each.
    warnings: tuple[str, ...] = ()


@frozen
class LatencyEvidence:
    """Steady-state latency per request, traffic-weighted over the cases (the mean is the
    exact mixture mean; percentiles are weighted averages of per-case percentiles, exact
    for a single case). ``ci95_*`` bound the weighted mean at the measurement policy's
    confidence (named for the default 95%)."""

    median_ms: float | None = None
    mean_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    ci95_low_ms: float | None = None
    ci95_high_ms: float | None = None
    #: The longest single call it made while measured (warm-up, settling or timed).
    longest_call_s: float | None = None


@frozen
class RaceEvidence:
    """What the race concluded: the verdict, the gate (against ``gate_against``), the
    speedups with their intervals, and, for an eliminated plan, the comparison that
    eliminated it."""

    verdict: Verdict | None = None
    noisy: bool | None = None
    gate_passed: bool | None = None
    gate_against: str | None = None
    #: Over the reference (eager fp32; the report's ``speedup_vs_eager``).
    speedup_vs_reference: RatioInterval | None = None
    #: Over the baseline when a native plan replaced the reference as the baseline (the
    #: report's ``speedup_vs_native``).
    speedup_vs_baseline: RatioInterval | None = None
    #: What the race said of the plan beyond its verdict (eliminated, left at warm-up,
    #: stopped for futility, unsettled bursts).
    note: str | None = None
    #: The plan it was eliminated against (the leader, or the baseline when it left at
    #: warm-up) and its speedup over that plan when the race decided: the interval that
    #: decided, often pooled (``speedup_vs_reference`` is then only descriptive).
    eliminated_by: str | None = None
    elimination_speedup: RatioInterval | None = None
    #: The standard deviation of its per-round score difference against the report's
    #: baseline (the reference, or the native plan that replaced it; log scale, the
    #: rounds of the speedup against it less one degrees of freedom): a cache hit's
    #: revalidation probe starts from it (:mod:`dlopt.cache.recheck`).
    round_spread: float | None = None


@frozen
class MemoryEvidence:
    """Peak memory over build and first calls."""

    peak_mb: float | None = None
    method: str | None = None
    note: str | None = None
    #: Peak device memory as the plan's own runtime reports it (``BuiltPlan.device_memory_mb``).
    device_mb: float | None = None
    #: CUDA: growth of the memory in use on the whole device over build and first calls.
    device_wide_mb: float | None = None


@frozen
class LifecycleEvidence:
    """One-off costs and what they mean over the deployment's calls."""

    setup_time_s: float | None = None
    first_call_time_s: float | None = None
    projected_total_ms: float | None = None
    break_even_calls_vs_baseline: float | None = None
    break_even_note: str | None = None
    speedup_vs_baseline_lifecycle: RatioInterval | None = None


@frozen
class ObjectiveEvidence:
    """The objective's value: the weighted mean latency (steady state) or the projected
    total (lifecycle), with its bounds."""

    cost_ms: float | None = None
    cost_low_ms: float | None = None
    cost_high_ms: float | None = None


@frozen
class ValidationEvidence:
    """The quality gate, each time it ran."""

    #: The first calls, every case, every metric (the report's ``parity``).
    first_calls: ValidationResult | None = None
    #: After the race: the outputs of its last measured call per case, validated again.
    revalidation: ValidationResult | None = None
    #: The selected plan (and any chosen plan that failed it): a fresh call per case after
    #: the race, validated before the decision was returned.
    final_check: ValidationResult | None = None


@frozen
class PriorEvidence:
    """What a plan was expected to do before it was built (docs/selection.md, "Decision
    time"): a speedup over eager fp32 in ``[low, high]``, the seconds its build and first
    calls were expected to take, where that came from, and how it held."""

    speedup: float
    low: float
    high: float
    cost_s: float
    source: str
    #: The measured speedup fell outside ``[low, high]``: by how much (``None``: inside,
    #: or not measured).
    miss: str | None = None
    #: Its speedup in the short paired screening right after validation, when screened.
    screening: RatioInterval | None = None
    #: Built though the prior said it would not win, to test what it names: a rounding
    #: whose failure spares costlier plans (``None``: built for its own chance).
    built_to_test: str | None = None


@frozen
class CandidateEvidence:
    """Everything known about one candidate: who it is, where it stands, and its evidence
    grouped by kind (``latency``, ``race``, ``memory``, ``lifecycle``, ``objective``,
    ``validation``).

    In JSON the groups are flat, in the names deployment engineers expect
    (``latency_ms``, ``speedup_vs_eager``, ``parity``...): :data:`CANDIDATE_JSON_LAYOUT`
    maps each key to its place, so adding a figure is one field and one line there. Each
    grouped figure also reads under its report name (``cand.latency_ms`` is
    ``cand.latency.median_ms``).
    """

    name: str
    status: Status
    precision: str
    #: reference | native | challenger, as the provider declared it.
    role: str = "challenger"
    #: The plan's options as raced (part of what identifies the plan).
    options: dict[str, Any] | None = None
    plugin: str | None = None
    distribution: str | None = None
    version: str | None = None
    availability_reason: str | None = None
    install_hint: str | None = None
    latency: LatencyEvidence = field(factory=LatencyEvidence)
    race: RaceEvidence = field(factory=RaceEvidence)
    memory: MemoryEvidence = field(factory=MemoryEvidence)
    lifecycle: LifecycleEvidence = field(factory=LifecycleEvidence)
    objective: ObjectiveEvidence = field(factory=ObjectiveEvidence)
    validation: ValidationEvidence = field(factory=ValidationEvidence)
    error: StageError | None = None
    #: An isolated selection only: the crash or hang that rejected this plan.
    fault: WorkerFault | None = None
    cases: tuple[CaseEvidence, ...] = ()
    #: Before it was built: its prior (``None``: a report from before priors).
    prior: PriorEvidence | None = None
    #: Why it was not built: its prior could not beat the confirmed leader, or the time
    #: budget had no room for it (status ``not_built``).
    not_built: str | None = None
    #: Why it was built and validated but not raced: the race's share of the time budget
    #: had no room for it (status ``lost``).
    not_raced: str | None = None
    metadata: dict[str, Any] = field(factory=dict)
    artifacts: dict[str, str] = field(factory=dict)


#: The JSON keys of a candidate, in their order, each with its group (``None``: a field
#: of the candidate itself) and the attribute that holds it.
CANDIDATE_JSON_LAYOUT: tuple[tuple[str, str | None, str], ...] = (
    ("name", None, "name"),
    ("status", None, "status"),
    ("precision", None, "precision"),
    ("role", None, "role"),
    ("options", None, "options"),
    ("plugin", None, "plugin"),
    ("distribution", None, "distribution"),
    ("version", None, "version"),
    ("availability_reason", None, "availability_reason"),
    ("install_hint", None, "install_hint"),
    ("latency_ms", "latency", "median_ms"),
    ("latency_mean_ms", "latency", "mean_ms"),
    ("latency_p90_ms", "latency", "p90_ms"),
    ("latency_p95_ms", "latency", "p95_ms"),
    ("latency_p99_ms", "latency", "p99_ms"),
    ("latency_ci95_low_ms", "latency", "ci95_low_ms"),
    ("latency_ci95_high_ms", "latency", "ci95_high_ms"),
    ("selection_cost_ms", "objective", "cost_ms"),
    ("selection_cost_low_ms", "objective", "cost_low_ms"),
    ("selection_cost_high_ms", "objective", "cost_high_ms"),
    ("confidence_gate_passed", "race", "gate_passed"),
    ("gate_against", "race", "gate_against"),
    ("peak_memory_mb", "memory", "peak_mb"),
    ("peak_memory_method", "memory", "method"),
    ("peak_memory_note", "memory", "note"),
    ("device_memory_mb", "memory", "device_mb"),
    ("device_wide_memory_mb", "memory", "device_wide_mb"),
    ("setup_time_s", "lifecycle", "setup_time_s"),
    ("first_call_time_s", "lifecycle", "first_call_time_s"),
    ("projected_total_ms", "lifecycle", "projected_total_ms"),
    ("break_even_calls_vs_baseline", "lifecycle", "break_even_calls_vs_baseline"),
    ("break_even_note", "lifecycle", "break_even_note"),
    ("speedup_vs_eager", "race", "speedup_vs_reference"),
    ("speedup_vs_native", "race", "speedup_vs_baseline"),
    ("speedup_vs_baseline_lifecycle", "lifecycle", "speedup_vs_baseline_lifecycle"),
    ("measurement_verdict", "race", "verdict"),
    ("noisy", "race", "noisy"),
    ("parity", "validation", "first_calls"),
    ("revalidation", "validation", "revalidation"),
    ("final_check", "validation", "final_check"),
    ("longest_call_s", "latency", "longest_call_s"),
    ("error", None, "error"),
    ("fault", None, "fault"),
    ("cases", None, "cases"),
    ("metadata", None, "metadata"),
    ("artifacts", None, "artifacts"),
    ("measurement_note", "race", "note"),
    ("eliminated_by", "race", "eliminated_by"),
    ("elimination_speedup", "race", "elimination_speedup"),
    ("round_spread", "race", "round_spread"),
    ("prior", None, "prior"),
    ("not_built", None, "not_built"),
    ("not_raced", None, "not_raced"),
)


def _field_types(cls: type) -> dict[str, Any]:
    return {f.name: f.type for f in attrs.fields(attrs.resolve_types(cls))}


def _unstructure_candidate(cand: CandidateEvidence) -> dict[str, Any]:
    types = {group: _field_types(type(getattr(cand, group))) for group in _GROUPS}
    types[None] = _field_types(CandidateEvidence)  # type: ignore[index]
    out: dict[str, Any] = {}
    for key, group, attr in CANDIDATE_JSON_LAYOUT:
        holder = cand if group is None else getattr(cand, group)
        value = getattr(holder, attr)
        if value is None and key in _LEFT_OUT_WHEN_EMPTY:
            continue
        out[key] = converter.unstructure(value, types[group][attr])  # type: ignore[index]
    return out


def _structure_candidate(data: Any, _: object) -> CandidateEvidence:
    if not isinstance(data, dict):
        raise TypeError(f"a candidate must be a JSON object, got {type(data).__name__}")
    top: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {group: {} for group in _GROUPS}
    for key, group, attr in CANDIDATE_JSON_LAYOUT:
        if key in data:
            (top if group is None else groups[group])[attr] = data[key]
    for group, values in groups.items():
        top[group] = values
    return converter.structure_attrs_fromdict(top, CandidateEvidence)


#: The isolated mode's fields are left out of a report that has none: a report written in
#: process reads exactly as before they were added.
_LEFT_OUT_WHEN_EMPTY = frozenset({"fault", "prior", "not_built", "not_raced", "round_spread"})

#: The evidence groups of a candidate, by attribute name.
_GROUPS = ("latency", "race", "memory", "lifecycle", "objective", "validation")


def evolve_candidate(cand: CandidateEvidence, **changes: Any) -> CandidateEvidence:
    """A copy of ``cand`` with ``changes``, each named as a field of the candidate
    (``status=``, ``latency=``) or as its report field (``latency_ms=``, ``parity=``)."""
    places = {key: (group, attr) for key, group, attr in CANDIDATE_JSON_LAYOUT if group}
    top: dict[str, Any] = {}
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in changes.items():
        if name in places:
            group, attr = places[name]
            grouped.setdefault(group, {})[attr] = value
        else:
            top[name] = value
    for group, values in grouped.items():
        top[group] = attrs.evolve(top.get(group, getattr(cand, group)), **values)
    return attrs.evolve(cand, **top)


def _report_field(group: str, attr: str) -> property:
    return property(
        lambda cand: getattr(getattr(cand, group), attr),
        doc=f"``{group}.{attr}``, read under its report field's name.",
    )


# Every grouped figure also reads under its report field's name (``cand.latency_ms``), as
# code written against the flat record does.
for _key, _group, _attr in CANDIDATE_JSON_LAYOUT:
    if _group is not None:
        setattr(CandidateEvidence, _key, _report_field(_group, _attr))

converter.register_unstructure_hook(CandidateEvidence, _unstructure_candidate)
converter.register_structure_hook(CandidateEvidence, _structure_candidate)


@frozen
class CaseSignature:
    name: str
    weight: float
    inputs: str  # e.g. "args[0]: float32[8, 3, 64, 64]"


@frozen
class WorkloadSummary:
    name: str
    expected_calls: int | None
    cases: tuple[CaseSignature, ...]
    #: Where the raced inputs came from (``WorkloadProfile.inputs``), when said.
    inputs: str | None = None


#: The report's ``measurement`` field: the race-wide figures of the race that decided.
MeasurementSummary = RaceSummary


@frozen
class CacheEvidence:
    """What the plan cache did for this decision (docs/cache.md).

    ``cache_hit``: the decision came from a record, revalidated. ``key``: the record's key
    (the SHA-256 of its ingredients). ``lookup_time_s``: hashing the ingredients and
    reading the record; ``revalidation_time_s``: bringing the plan back, validating it and
    the paired probe. ``reason``: why the record was reused, or why there was none to
    reuse (no record, revalidation failed...). ``differences``: on a miss beside an older
    record (``closest_key``), the ingredients that differ. ``probe_speedup``: the
    revalidation probe's speedup of the cached pick over the baseline (``probe_baseline``).
    ``record_written``: a race's decision was stored (``False`` with the reason in
    ``write_note`` when it could not be, or another process wrote it first).
    ``saved_program``: whether the selected plan was also saved as a program that serves
    without compiling (an AOTInductor package), how long it took or why not; ``None``
    when its provider saves none.
    """

    cache_hit: bool
    key: str
    lookup_time_s: float | None = None
    revalidation_time_s: float | None = None
    reason: str | None = None
    differences: tuple[str, ...] = ()
    closest_key: str | None = None
    probe_baseline: str | None = None
    probe_speedup: RatioInterval | None = None
    record_written: bool | None = None
    write_note: str | None = None
    saved_program: str | None = None


@frozen
class ThroughputEvidence:
    """The throughput objective's evidence: every (plan, batch size) with its interval and
    budget check (the throughput curves), and how the choice was made.

    ``budget``: the latency budget per call (``"max_p99_latency_ms 20 ms"``) or ``None``.
    ``budget_met``: whether any (plan, batch size) met it; when none did, ``closest_miss``
    says which came closest and by how much. ``memory_note``: why batch sizes were
    dropped for memory. ``shapes``: per plan, how it serves several batch sizes.
    """

    batch_sizes: tuple[int, ...]
    batch_dim: int
    baseline_batch_size: int
    budget_met: bool
    points: tuple[BatchPoint, ...]
    budget: str | None = None
    closest_miss: str | None = None
    memory_note: str | None = None
    shapes: dict[str, str] = field(factory=dict)


@frozen
class MachineLoadEvidence:
    """How busy the machine was around the selection (docs/selection.md, "A busy
    machine"): a race beside other work measures that work too."""

    #: The CPUs this process may run on.
    cpus: int
    #: The 1-minute load average when the selection started and when it ended (``None``:
    #: the system does not say); the selection's own threads are in the second.
    load_before: float | None
    load_after: float | None
    #: How many CPUs' worth of work other processes did while the selection ran (the
    #: machine's busy time less the selection's own, over its wall time; ``None``: the
    #: system does not say, or the selection was too short to tell).
    others_cpus: float | None
    #: The reference's traffic-weighted mean call time in the race over its call time
    #: measured before the builds (``None``: not measured): above 1, something slowed it.
    reference_drift: float | None
    #: Whether the machine was busy: the other processes' work passed its threshold
    #: (``why`` says so, in words).
    busy: bool
    why: str = ""


@frozen
class DecisionTimeEvidence:
    """How the decision's time was planned and spent (docs/selection.md, "Decision time")."""

    #: The time budget in seconds (``None``: none: ``time_budget_s=None`` or exhaustive).
    budget_s: float | None
    #: How the budget was set: ``auto`` (from the reference's call time), ``policy``, or
    #: ``none``.
    budget_rule: str
    #: Seconds from ``select`` to the report.
    spent_s: float
    #: Every plan was built and raced (``exhaustive=True``): no pruning, no budget.
    exhaustive: bool
    #: The machine class and operator mix the priors were read for.
    machine_class: str
    operator_mix: OperatorMix
    mix_kind: str
    #: The reference's traffic-weighted milliseconds per call (what ``auto`` scales by).
    reference_call_ms: float
    #: Actual over expected build and first-call seconds on this machine (later plans'
    #: costs were read through it).
    cost_scale: float
    #: The plans not built, in build order (each candidate's ``not_built`` says why).
    not_built: tuple[str, ...] = ()
    #: How busy the machine was (``None``: a report written before it was recorded).
    machine_load: MachineLoadEvidence | None = None


@frozen
class OptimizationReport:
    """The whole decision and its evidence. ``dumps``/``load_report`` round-trip exactly."""

    schema_version: int
    dlopt_version: str
    created_at: str
    objective: Objective
    target: ExecutionTarget
    constraints: DeploymentConstraints
    quality: dict[str, Any]
    workload: WorkloadSummary
    runtime: RuntimeInfo
    baseline: str
    selected_plan: str
    selection_reason: str
    candidates: tuple[CandidateEvidence, ...]
    measurement: MeasurementSummary | None = None
    plugin_failures: tuple[PluginFailure, ...] = ()
    #: An isolated selection only: its workers and the plans that crashed or hung.
    isolation: IsolationSummary | None = None
    #: What the plan cache did (``None``: no cache was configured).
    cache: CacheEvidence | None = None
    #: The batch size the selected plan serves at (``None``: a report written before
    #: batch sizes were recorded, which served batch 1 as given).
    batch_size: int | None = None
    #: The throughput objective only: the throughput curves and the budget's verdict.
    throughput: ThroughputEvidence | None = None
    #: How the decision serves its plan: the calling context it was judged in, threads,
    #: and what a call with an unseen signature gets (docs/serving.md).
    serving: ServingEvidence | None = None
    #: How the decision's time was planned and spent: the budget, the priors' inputs and
    #: the plans not built (``None``: a report from before decision time was recorded).
    decision_time: DecisionTimeEvidence | None = None

    def candidate(self, name: str) -> CandidateEvidence:
        for cand in self.candidates:
            if cand.name == name:
                return cand
        raise KeyError(f"no candidate {name!r} in this report")

    def to_json(self) -> str:
        return dumps(self)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the report as strict JSON, atomically."""
        return atomic_write_text(path, self.to_json() + "\n")


# A report says nothing of the isolated mode or the plan cache when it used neither: those
# fields are written only when set, so such reports read and write back exactly as before.
def _omitting_default(cls: type, *names: str) -> Any:
    made: Any = None

    def unstructure(value: Any) -> Any:
        nonlocal made
        if made is None:  # built on first use: the field types resolve only then
            overrides: dict[str, Any] = {name: override(omit_if_default=True) for name in names}
            made = make_dict_unstructure_fn(cls, converter, **overrides)
        return made(value)

    return unstructure


converter.register_unstructure_hook(
    OptimizationReport,
    _omitting_default(
        OptimizationReport,
        "isolation",
        "cache",
        "batch_size",
        "throughput",
        "serving",
        "decision_time",
    ),
)


def load_report(path: str | os.PathLike[str]) -> OptimizationReport:
    """Read a report written by :meth:`OptimizationReport.save` (strict JSON, no pickle).

    Reads at most :data:`MAX_REPORT_BYTES` (an endless or huge file is refused, not read
    whole). Raises ``ValueError`` naming the file for anything that is not a report, and
    ``OSError`` when the path cannot be read (missing, a directory).
    """
    data = read_bytes_capped(path, MAX_REPORT_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    return report_from_json(text)


def report_from_json(text: str) -> OptimizationReport:
    """Parse a report from strict JSON text (``ValueError`` when it is not one)."""
    try:
        data = parse_strict_json(text)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply to be a dlopt report") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        writer = data.get("dlopt_version") if isinstance(data, dict) else None
        by = f" (written by dlopt {writer})" if isinstance(writer, str) else ""
        raise ValueError(
            f"report schema_version {version!r}{by} is not supported by this dlopt "
            f"{__version__} (reads version {SCHEMA_VERSION}); read it with the dlopt "
            "version that wrote it, or rerun the selection to get a current report"
        )
    try:
        return from_jsonable(data, OptimizationReport)
    except cattrs.BaseValidationError as exc:
        # Valid JSON of the right version whose fields do not fit: say which, as ValueError.
        problems = "; ".join(cattrs.transform_error(exc)[:3])
        raise ValueError(
            f"the report does not match schema_version {version}: {problems}"
        ) from None
