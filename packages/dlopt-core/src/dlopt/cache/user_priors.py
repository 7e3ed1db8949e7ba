"""The user's own evidence for priors: the reports of earlier selections in a plan cache.

A plan cache holds the report of every selection it kept, its own races and those a fleet
published into it. A report records, per plan, the speedup over eager fp32 the race
measured and what the plan's build and first calls took, with the machine class and the
operator mix's kind of that selection (``decision_time``), and which plans failed
validation. On the same machine class, for a model of the same kind, those make a plan's
prior (its pass rate: the selections it passed in, of those it was judged in), ahead of
the table shipped with dlopt-core (:mod:`dlopt.selection.prior_table`).

Reports are read as strict JSON (never unpickled or executed); one that cannot be read is
skipped, and the newest :data:`MAX_RECORDS` records are read at most.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from dlopt.bundle.store import REPORT_NAME
from dlopt.cache.record_store import BUNDLE_DIR, PlanCache
from dlopt.contract.priors import Prior, pass_rate
from dlopt.evidence.report import OptimizationReport, load_report
from dlopt.vocabulary import Stage

#: The newest records read for evidence (reading is cheap, but a cache may be large).
MAX_RECORDS = 200
#: How far beyond the measured spread a prior's interval reaches (x/÷): one machine's
#: earlier races are good evidence, but not of this model.
WIDEN = 1.3


def user_priors(cache_dir: str | None, machine: str, kind: str) -> dict[str, Prior]:
    """Per plan, the prior the reports in ``cache_dir`` give on ``machine`` for models of
    mix ``kind`` (empty: no cache, or no report of this machine class and kind)."""
    if cache_dir is None:
        return {}
    cache = PlanCache(cache_dir)
    if not cache.is_cache():
        return {}
    speedups: dict[str, list[tuple[float, float, float]]] = {}
    costs: dict[str, list[float]] = {}
    failed: dict[str, int] = {}
    for summary in cache.summaries()[:MAX_RECORDS]:
        report = _report(summary.path / BUNDLE_DIR / REPORT_NAME)
        timing = report.decision_time if report is not None else None
        if report is None or timing is None:
            continue
        if timing.machine_class != machine or timing.mix_kind != kind:
            continue
        for cand in report.candidates:
            measured = cand.race.speedup_vs_reference
            if cand.role == "reference":
                continue
            if cand.error is not None and cand.error.stage is Stage.VALIDATION:
                failed[cand.name] = failed.get(cand.name, 0) + 1
            if measured is not None and measured.point is not None:
                low = measured.low if measured.low is not None else measured.point
                high = measured.high if measured.high is not None else measured.point
                speedups.setdefault(cand.name, []).append((measured.point, low, high))
            cost = (cand.lifecycle.setup_time_s or 0.0) + (cand.lifecycle.first_call_time_s or 0.0)
            if cost > 0:
                costs.setdefault(cand.name, []).append(cost)
    priors = {}
    for name, seen in speedups.items():
        point = math.exp(statistics.fmean(math.log(p) for p, _, _ in seen))
        low = min(low for _, low, _ in seen) / WIDEN
        high = max(high for _, _, high in seen) * WIDEN
        cost = statistics.median(costs.get(name) or [1.0])
        source = f"your evidence: {len(seen)} selection(s) on {machine}, {kind} models"
        if failed.get(name):
            source += f", failed validation in {failed[name]} more"
        priors[name] = Prior(
            point,
            min(low, point),
            max(high, point),
            max(cost, 1e-3),
            source,
            pass_rate=pass_rate(len(seen), failed.get(name, 0)),
        )
    return priors


def _report(path: Path) -> OptimizationReport | None:
    try:
        return load_report(path)
    except Exception:  # any report that does not read is no evidence, never an error
        return None
