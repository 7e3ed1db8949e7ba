"""The audit trail of a selection: strict JSON, versioned, exact round trip."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import cattrs
from attrs import field, frozen
from cattrs.gen import make_dict_unstructure_fn, override

from dlopt._version import __version__
from dlopt.api.policy import DeploymentConstraints
from dlopt.api.target import ExecutionTarget
from dlopt.evidence.provenance import RuntimeInfo
from dlopt.measurement import (
    AllocatorRegime,
    LatencyStats,
    MeasurementPolicy,
    OpenComparison,
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
from dlopt.plugins.records import PluginFailure
from dlopt.validation import CaseValidation, ValidationResult
from dlopt.vocabulary import Objective, Status, StopReason, Verdict

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
class CandidateEvidence:
    """Everything known about one candidate, in the names deployment engineers expect.

    Top-level ``latency_*`` figures are traffic-weighted over the cases (the mean is the
    exact mixture mean; percentiles are weighted averages of per-case percentiles, exact
    for a single case). ``latency_ci95_*`` bound the weighted mean at the measurement
    policy's confidence (named for the default 95%). ``selection_cost_ms`` is the objective
    value: the weighted mean latency (steady state) or the projected total (lifecycle).
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
    latency_ms: float | None = None
    latency_mean_ms: float | None = None
    latency_p90_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_ci95_low_ms: float | None = None
    latency_ci95_high_ms: float | None = None
    selection_cost_ms: float | None = None
    selection_cost_low_ms: float | None = None
    selection_cost_high_ms: float | None = None
    confidence_gate_passed: bool | None = None
    gate_against: str | None = None
    peak_memory_mb: float | None = None
    peak_memory_method: str | None = None
    peak_memory_note: str | None = None
    #: Peak device memory as the plan's own runtime reports it (``BuiltPlan.device_memory_mb``).
    device_memory_mb: float | None = None
    #: CUDA: growth of the memory in use on the whole device over build and first calls.
    device_wide_memory_mb: float | None = None
    setup_time_s: float | None = None
    first_call_time_s: float | None = None
    projected_total_ms: float | None = None
    break_even_calls_vs_baseline: float | None = None
    break_even_note: str | None = None
    speedup_vs_eager: RatioInterval | None = None
    speedup_vs_native: RatioInterval | None = None
    speedup_vs_baseline_lifecycle: RatioInterval | None = None
    measurement_verdict: Verdict | None = None
    noisy: bool | None = None
    parity: ValidationResult | None = None
    #: After the race: the outputs of its last measured call per case, validated again.
    revalidation: ValidationResult | None = None
    #: The selected plan (and any chosen plan that failed it): a fresh call per case after
    #: the race, validated before the decision was returned.
    final_check: ValidationResult | None = None
    #: The longest single call it made while measured (warm-up, settling or timed).
    longest_call_s: float | None = None
    error: StageError | None = None
    cases: tuple[CaseEvidence, ...] = ()
    metadata: dict[str, Any] = field(factory=dict)
    artifacts: dict[str, str] = field(factory=dict)


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


@frozen
class MeasurementSummary:
    seed: int
    rounds: int
    stop_reason: StopReason
    total_time_s: float
    timed_calls: int
    untimed_calls: int
    confidence: float
    policy: MeasurementPolicy
    #: The longest single call of the race and the plan that made it.
    longest_call_s: float | None = None
    longest_call_plan: str | None = None
    #: The measurement budget the race had (fixed, or scaled to the model's call cost).
    budget_s: float | None = None
    warmup_time_s: float | None = None
    #: Comparisons in the error family the boundary was set for.
    family_size: int | None = None
    #: The plan ranked first on all rounds among those in contention, and an upper bound
    #: (ratio) of how much faster any other surviving plan may still be.
    leader: str | None = None
    regret_bound: float | None = None
    #: Comparisons the race left open, with the budget that would close them.
    open_comparisons: tuple[OpenComparison, ...] = ()
    #: The heap allocator's regime during the race, and advice for deployments.
    allocator: AllocatorRegime | None = None


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
    #: What the plan cache did (``None``: no cache was configured).
    cache: CacheEvidence | None = None

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


# A report without a plan cache says nothing about it: ``cache`` is written only when set,
# so reports of selections without a cache read and write back exactly as before.
converter.register_unstructure_hook(
    OptimizationReport,
    make_dict_unstructure_fn(OptimizationReport, converter, cache=override(omit_if_default=True)),
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
