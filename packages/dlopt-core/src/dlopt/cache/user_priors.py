"""The user's own evidence for priors: the reports of earlier selections in a plan cache.

A plan cache holds the report of every selection it kept, its own races and those a fleet
published into it. A report records, per plan, the speedup over eager fp32 the race
measured and what the plan's build and first calls took, with the machine class and the
operator mix's kind of that selection (``decision_time``), and which plans failed
validation. On the same machine class, for a model of the same kind, those make a plan's
prior (its pass rate: the selections it passed in, of those it was judged in), ahead of
the table shipped with dlopt-core (:mod:`dlopt.selection.prior_table`).

Only what a race could vouch for is evidence of speed, because one bad record would
otherwise steer every later selection of that machine class and mix:

- a report is read only when its bytes match the ``report_sha256`` its bundle's manifest
  records (an edited report is no evidence);
- a plan's speedup is left out when the race flagged it, or the reference it is measured
  against, ``noisy``, or the report's ``machine_load`` says the machine was busy (a busy
  machine slows eager fp32 and inflates every ratio over it: 1000x was seen), when it
  rests on fewer than :data:`MIN_ROUNDS` rounds, and when it is no finite number within
  :data:`PLAUSIBLE_SPEEDUP` either way of 1x; those records still count for the pass
  rate, validation does not depend on the machine's load;
- of the rest, a speedup far from the median of the plan's records (:func:`outliers`) is
  left out, and the prior's speedup is the median of the log speedups of what is left;
- interval bounds and costs that are no positive finite number are read as missing.

The prior's ``source`` names the records it used (their keys' first :data:`KEY_DIGITS`) and what was
left out. Reports are read as strict JSON (never unpickled or executed); one that cannot
be read is skipped, and the newest :data:`MAX_RECORDS` records are read at most.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence

from attrs import frozen

from dlopt.bundle.store import verified_report
from dlopt.cache.record_store import BUNDLE_DIR, PlanCache
from dlopt.contract.priors import Prior, pass_rate
from dlopt.evidence.report import CandidateEvidence, OptimizationReport
from dlopt.measurement.stats import RatioInterval
from dlopt.platform.config_checks import is_number
from dlopt.vocabulary import Stage

#: The newest records read for evidence (reading is cheap, but a cache may be large).
MAX_RECORDS = 200
#: How far beyond the measured spread a prior's interval reaches (x/÷): one machine's
#: earlier races are good evidence, but not of this model.
WIDEN = 1.3
#: A speedup over eager fp32 beyond this either way (above it, or below its inverse) is
#: no evidence: no plan of the benchmark suite comes near it, while a race on a contended
#: machine does (1000x was seen).
PLAUSIBLE_SPEEDUP = 100.0
#: The fewest paired rounds a speedup of evidence rests on (one round has no spread).
MIN_ROUNDS = 2
#: A speedup further from the median of its plan's records than this many robust standard
#: deviations (1.4826 x the median absolute deviation of the log speedups) is an outlier...
OUTLIER_DEVIATIONS = 3.0
#: ... and never when within this factor of the median: records that agree closely have
#: almost no spread, and other models of the same kind differ by that much.
OUTLIER_MIN_FACTOR = 4.0
#: The fewest records among which one can be called an outlier (of two, neither is).
OUTLIER_MIN_RECORDS = 3
#: Record keys shown in a prior's source (the rest are counted).
SHOWN_RECORDS = 5
#: Hex digits of a record's key shown in a prior's source (as ``dlopt cache list`` shows it).
KEY_DIGITS = 12


@frozen
class Observation:
    """One record's measurement of one plan: its speedup over eager fp32 in
    ``[low, high]`` and its build and first calls' seconds (``None``: not recorded)."""

    record: str
    speedup: float
    low: float
    high: float
    cost_s: float | None


def user_priors(cache_dir: str | None, machine: str, kind: str) -> dict[str, Prior]:
    """Per plan, the prior the reports in ``cache_dir`` give on ``machine`` for models of
    mix ``kind`` (empty: no cache, or no report of this machine class and kind)."""
    if cache_dir is None:
        return {}
    cache = PlanCache(cache_dir)
    if not cache.is_cache():
        return {}
    reports = []
    for summary in cache.summaries()[:MAX_RECORDS]:
        if summary.problem is not None:
            continue
        try:
            report = verified_report(summary.path / BUNDLE_DIR)
        except Exception:  # any report that does not read or match is no evidence, never an error
            continue
        reports.append((summary.key, report))
    return priors_from_reports(reports, machine, kind)


def priors_from_reports(
    reports: Iterable[tuple[str, OptimizationReport]], machine: str, kind: str
) -> dict[str, Prior]:
    """Per plan, the prior ``reports`` (each with its record's key) give on ``machine``
    for models of mix ``kind`` (see the module docstring for what counts)."""
    seen: dict[str, list[Observation]] = {}
    raced: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    left_out: dict[str, Counter[str]] = {}
    for key, report in reports:
        timing = report.decision_time
        if timing is None or timing.machine_class != machine or timing.mix_kind != kind:
            continue
        load = timing.machine_load
        busy = (load is not None and load.busy) or any(
            c.role == "reference" and c.race.noisy for c in report.candidates
        )
        for cand in report.candidates:
            if cand.role == "reference":
                continue
            if cand.error is not None and cand.error.stage is Stage.VALIDATION:
                failed[cand.name] += 1
            measured = cand.race.speedup_vs_reference
            if measured is None or measured.point is None:
                continue
            raced[cand.name] += 1
            why = _not_evidence(cand, measured, busy)
            if why is not None:
                left_out.setdefault(cand.name, Counter())[why] += 1
                continue
            seen.setdefault(cand.name, []).append(_observation(key, cand, measured))
    priors = {}
    for name, found in seen.items():
        far = outliers([math.log(o.speedup) for o in found])
        if far:
            left_out.setdefault(name, Counter())["outlier"] += len(far)
        used = [o for i, o in enumerate(found) if i not in far]
        priors[name] = _prior(used, machine, kind, raced[name], failed[name], left_out.get(name))
    return priors


def outliers(logs: Sequence[float]) -> set[int]:
    """The indices of the values in ``logs`` (log speedups) that lie further from their
    median than :data:`OUTLIER_DEVIATIONS` robust standard deviations and than
    :data:`OUTLIER_MIN_FACTOR`; none among fewer than :data:`OUTLIER_MIN_RECORDS`."""
    if len(logs) < OUTLIER_MIN_RECORDS:
        return set()
    middle = statistics.median(logs)
    spread = 1.4826 * statistics.median(abs(x - middle) for x in logs)
    reach = max(OUTLIER_DEVIATIONS * spread, math.log(OUTLIER_MIN_FACTOR))
    return {i for i, x in enumerate(logs) if abs(x - middle) > reach}


def _not_evidence(cand: CandidateEvidence, measured: RatioInterval, busy: bool) -> str | None:
    """Why ``cand``'s speedup is no evidence (``None``: it is)."""
    if busy or cand.race.noisy:
        return "noisy"
    if measured.rounds < MIN_ROUNDS:
        return f"under {MIN_ROUNDS} rounds"
    if not _plausible(measured.point):
        return "implausible"
    return None


def _plausible(value: float | None) -> bool:
    """Whether ``value`` is a speedup within :data:`PLAUSIBLE_SPEEDUP` either way of 1x."""
    return (
        value is not None
        and is_number(value)
        and 1.0 / PLAUSIBLE_SPEEDUP <= value <= PLAUSIBLE_SPEEDUP
    )


def _seconds(value: float | None) -> float | None:
    """``value`` when it is a finite number of seconds >= 0 (``None``: 0), else ``None``."""
    if value is None:
        return 0.0
    return float(value) if is_number(value) and value >= 0 else None


def _observation(key: str, cand: CandidateEvidence, measured: RatioInterval) -> Observation:
    """``cand``'s measurement in the record ``key`` (its point checked plausible): a bound
    that is missing or no plausible number reads as the point; a cost that is no finite
    number of seconds as missing."""
    point = float(measured.point or 1.0)
    low = float(measured.low) if measured.low is not None and _plausible(measured.low) else point
    high = (
        float(measured.high) if measured.high is not None and _plausible(measured.high) else point
    )
    setup = _seconds(cand.lifecycle.setup_time_s)
    first = _seconds(cand.lifecycle.first_call_time_s)
    cost = setup + first if setup is not None and first is not None else None
    usable = cost is not None and 0 < cost < math.inf
    return Observation(
        key[:KEY_DIGITS], point, min(low, point), max(high, point), cost if usable else None
    )


def _prior(
    used: Sequence[Observation],
    machine: str,
    kind: str,
    raced: int,
    failed: int,
    left_out: Counter[str] | None,
) -> Prior:
    """The prior of the observations ``used``: the median log speedup, the interval their
    bounds span widened by :data:`WIDEN`, the median cost; the pass rate over the records
    it was ``raced`` in and ``failed`` validation in."""
    point = math.exp(statistics.median(math.log(o.speedup) for o in used))
    low = min(o.low for o in used) / WIDEN
    high = max(o.high for o in used) * WIDEN
    cost = statistics.median([o.cost_s for o in used if o.cost_s is not None] or [1.0])
    source = f"your evidence: {len(used)} selection(s) on {machine}, {kind} models"
    if failed:
        source += f", failed validation in {failed} more"
    records = [o.record for o in used]
    shown = ", ".join(records[:SHOWN_RECORDS])
    more = f" and {len(records) - SHOWN_RECORDS} more" if len(records) > SHOWN_RECORDS else ""
    source += f" (records {shown}{more})"
    if left_out:
        source += "; left out: " + ", ".join(f"{n} {why}" for why, n in sorted(left_out.items()))
    return Prior(
        point,
        min(low, point),
        max(high, point),
        max(cost, 1e-3),
        source,
        pass_rate=pass_rate(raced, failed),
    )
