"""Check one candidate's outputs against the reference, and aggregate over cases."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import attrs
import torch
from attrs import field, frozen

from dlopt.platform.serialization import finite_or_none
from dlopt.precision import Precision
from dlopt.settings.quality import Direction, QualityLimits, QualityPolicy, UserMetric
from dlopt.validation.metrics import LeafMetrics, compute_leaf_metrics, fmt, pct
from dlopt.validation.reference import ReferenceCase
from dlopt.validation.rounding import LeafRounding
from dlopt.validation.structure import find_path, match_structure

#: How many failures a reason spells out before saying "and N more".
_REASON_DETAIL = 3


@frozen
class UserMetricResult:
    """The value of one user metric on one case. ``value`` is ``None`` when it was not
    a finite number (``note`` says what it was: inf for identical outputs, NaN, an error)."""

    name: str
    path: str | None
    value: float | None
    limit: float
    direction: Direction
    passed: bool
    note: str | None = None

    def failure(self) -> str:
        where = f" on {self.path}" if self.path else ""
        if self.value is None:
            return f"user metric {self.name}{where}: {self.note}"
        op = "<" if self.direction == "higher" else ">"
        return f"user metric {self.name}{where} {fmt(self.value)} {op} limit {fmt(self.limit)}"


def _tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


@frozen
class CaseValidation:
    """A candidate's outputs on one workload case next to the reference's.

    ``leaves`` holds every leaf's metrics (also when the case passes); ``structure``
    lists structural mismatches (then there are no leaf metrics); ``reason`` is the
    first failures in words, ``None`` when the case passed.
    """

    case: str
    passed: bool
    reason: str | None
    precision: Precision
    leaves: tuple[LeafMetrics, ...] = field(default=(), converter=_tuple)
    user_metrics: tuple[UserMetricResult, ...] = field(default=(), converter=_tuple)
    structure: tuple[str, ...] = field(default=(), converter=_tuple)
    error: str | None = None

    @classmethod
    def failed(cls, case: str, precision: Precision | str, error: str) -> CaseValidation:
        """A case the candidate could not be checked on (it raised, it timed out)."""
        return cls(
            case=case,
            passed=False,
            reason=f"case {case!r}: {error}",
            precision=Precision.parse(precision),
            error=error,
        )


@frozen
class ValidationResult:
    """Whether a candidate passed the quality gate on every case, and the evidence.

    ``reason`` names the first failing case, output path, metric, value and limit.
    """

    passed: bool
    reason: str | None
    cases: tuple[CaseValidation, ...] = field(default=(), converter=_tuple)

    @classmethod
    def from_cases(cls, cases: Iterable[CaseValidation]) -> ValidationResult:
        """Aggregate per-case results: passes only when every case passed."""
        cases = tuple(cases)
        if not cases:
            return cls(False, "no workload case was validated", ())
        failing = [c for c in cases if not c.passed]
        if not failing:
            return cls(True, None, cases)
        reason = failing[0].reason or f"case {failing[0].case!r} failed"
        if len(failing) > 1:
            others = ", ".join(repr(c.case) for c in failing[1:])
            reason += (
                f" (also failed: case {others})"
                if len(failing) == 2
                else f" (also failed: cases {others})"
            )
        return cls(False, reason, cases)

    @classmethod
    def rejected(cls, reason: str, cases: Iterable[CaseValidation] = ()) -> ValidationResult:
        """A candidate rejected for a reason outside the outputs (it mutated the model)."""
        return cls(False, reason, tuple(cases))


# ---------------------------------------------------------------------------- checking


def check_leaf(metrics: LeafMetrics, limits: QualityLimits, label: str) -> LeafMetrics:
    """Hold ``metrics`` to ``limits``; the returned copy carries the verdict."""
    failures: list[str] = []
    if metrics.kind == "float":
        if metrics.nonfinite_mismatch:
            failures.append(
                f"{metrics.nonfinite_mismatch} non-finite value(s) not in the reference "
                f"(candidate has {metrics.candidate_nonfinite} non-finite, reference "
                f"{metrics.reference_nonfinite})"
            )
        if metrics.rel_l2 is not None and metrics.rel_l2 > limits.max_rel_l2:
            failures.append(f"rel_l2 {fmt(metrics.rel_l2)} > limit {fmt(limits.max_rel_l2)}")
        if metrics.cosine is not None and metrics.cosine < limits.min_cosine:
            failures.append(f"cosine {metrics.cosine:.6g} < limit {limits.min_cosine:.6g}")
        if (
            limits.max_abs_error is not None
            and metrics.max_abs_error is not None
            and metrics.max_abs_error > limits.max_abs_error
        ):
            failures.append(
                f"max_abs_error {fmt(metrics.max_abs_error)} > limit {fmt(limits.max_abs_error)}"
            )
        if (metrics.outside_fraction or 0.0) > limits.max_outside_fraction:
            failures.append(
                f"{metrics.outside_count} of {metrics.numel} elements "
                f"({pct(metrics.outside_fraction)}) outside atol={fmt(limits.atol)}, "
                f"rtol={fmt(limits.rtol)} > limit {pct(limits.max_outside_fraction)}"
            )
    elif (metrics.mismatch_fraction or 0.0) > limits.max_mismatch_fraction:
        failures.append(
            f"{metrics.mismatch_count} of {metrics.numel} {metrics.kind} elements differ "
            f"({pct(metrics.mismatch_fraction)}) > limit {pct(limits.max_mismatch_fraction)}"
        )
    return attrs.evolve(metrics, limits_label=label, passed=not failures, failures=tuple(failures))


def _run_user_metric(metric: UserMetric, candidate: Any, reference: Any) -> UserMetricResult:
    def result(value: float | None, passed: bool, note: str | None = None) -> UserMetricResult:
        return UserMetricResult(
            metric.name, metric.path, value, float(metric.limit), metric.direction, passed, note
        )

    try:
        if metric.path is not None:
            candidate = find_path(candidate, metric.path)
            reference = find_path(reference, metric.path)
        raw = metric.fn(candidate, reference)
        value = float(raw.item() if isinstance(raw, torch.Tensor) else raw)
    except KeyError as exc:
        return result(None, False, f"no output leaf at path {exc.args[0]}")
    except Exception as exc:
        return result(None, False, f"raised {type(exc).__name__}: {exc}")
    if math.isnan(value):
        return result(None, False, "returned NaN")
    passed = metric.accepts(value)
    note = None if math.isfinite(value) else f"value is {value}"
    return result(finite_or_none(value), passed, note)


def _reason(case: str, label_failures: list[tuple[str, str, str]]) -> str:
    # label_failures: (where, failure, limits label)
    def item(where: str, failure: str) -> str:
        return f"{where}: {failure}" if where else failure

    where, failure, label = label_failures[0]
    text = f"case {case!r}, {item(where, failure)}" if where else f"case {case!r}: {failure}"
    text += f" ({label})" if label else ""
    if len(label_failures) > 1:
        more = len(label_failures) - 1
        shown = [item(w, f) for w, f, _ in label_failures[1:_REASON_DETAIL]]
        text += "; also " + "; ".join(shown)
        if more >= _REASON_DETAIL:
            text += f"; and {more - _REASON_DETAIL + 1} more"
    return text


def validate_outputs(
    candidate: Any,
    reference: Any,
    *,
    precision: Precision | str,
    output_dtype: torch.dtype | None = None,
    policy: QualityPolicy | None = None,
    case_name: str,
) -> CaseValidation:
    """Check a candidate's outputs for one case against the reference's outputs.

    ``reference`` is the eager fp32 output for the case, or its ``ReferenceCase`` (whose
    measured fp32 rounding then widens the fp32 limits, see ``QualityPolicy``).
    Structure first (paths, types, keys, lengths, shapes, dtypes; ``output_dtype`` is
    the lower-precision dtype the plan declared for its floating outputs), then metrics
    per leaf in float64, held to the limits of ``precision`` as overridden by ``policy``,
    then the policy's user metrics.
    """
    policy = policy or QualityPolicy()
    precision = Precision.parse(precision)
    rounding: dict[str, LeafRounding] = {}
    if isinstance(reference, ReferenceCase):
        rounding, reference = reference.fp32_rounding, reference.outputs
    pairs, mismatches = match_structure(candidate, reference, output_dtype=output_dtype)
    if mismatches:
        structural = [("structure mismatch", m, "") for m in mismatches]
        return CaseValidation(
            case=case_name,
            passed=False,
            reason=_reason(case_name, structural),
            precision=precision,
            structure=tuple(mismatches),
        )

    leaves: list[LeafMetrics] = []
    failures: list[tuple[str, str, str]] = []
    for pair in pairs:
        limits, label = policy.limits_for(precision, pair.path, rounding.get(pair.path))
        metrics = compute_leaf_metrics(
            pair.path, pair.candidate, pair.reference, atol=limits.atol, rtol=limits.rtol
        )
        checked = check_leaf(metrics, limits, label)
        leaves.append(checked)
        failures.extend((f"output {pair.path}", f, label) for f in checked.failures)

    user_results = [_run_user_metric(m, candidate, reference) for m in policy.user_metrics]
    failures.extend(("", r.failure(), "") for r in user_results if not r.passed)
    return CaseValidation(
        case=case_name,
        passed=not failures,
        reason=_reason(case_name, failures) if failures else None,
        precision=precision,
        leaves=tuple(leaves),
        user_metrics=tuple(user_results),
    )
