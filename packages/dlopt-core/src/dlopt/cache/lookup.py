"""The cache's part in a selection, as the optimizer wires it: look a key up, reuse a
revalidated record, store a race's decision.

``look_up`` hashes the ingredients and reads the record (or, on a miss, finds the
closest older record and what differs); ``store`` writes a race's decision with what its
plan needs to come back (its artifacts, and torch's compile caches for a plan rebuilt
with them). Failures to store are reported on the decision, never raised.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from dlopt.bundle.store import PROGRAM_ARTIFACT, BundleError
from dlopt.cache.kept_rounding import rounding_record, stored_rounding
from dlopt.cache.key import cache_ingredients, key_of
from dlopt.cache.recheck import Recheck
from dlopt.cache.record_store import CacheRecord, PlanCache, PlanCacheError, PlanCacheWarning
from dlopt.cache.reload import COMPILE_CACHE_ARTIFACT, ProgramSaver, save_compile_cache
from dlopt.contract.provider import Reload
from dlopt.evidence.report import CacheEvidence, OptimizationReport
from dlopt.pipeline.state import CandidateState
from dlopt.serving.evidence import with_serving_policy
from dlopt.settings.policy import OptimizationPolicy
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadProfile
from dlopt.validation.fingerprint import ModelFingerprint
from dlopt.validation.reference import MeasuredRounding, ReferenceOutputs


@attrs.define(eq=False)
class Lookup:
    """One key looked up: its ingredients, the record found (if any) and, on a miss
    beside an older record, that record's key and the ingredients that differ."""

    cache: PlanCache
    key: str
    ingredients: dict[str, Any]
    record: CacheRecord | None
    lookup_time_s: float
    closest_key: str | None = None
    differences: tuple[str, ...] = ()
    #: Why the record of this key could not be read (it was set aside), if it could not.
    set_aside: str | None = None


def look_up(
    cache_dir: str,
    model: torch.nn.Module,
    workload: WorkloadProfile,
    policy: OptimizationPolicy,
    target: ExecutionTarget,
    candidates: Sequence[CandidateState],
    fingerprint: ModelFingerprint | None = None,
) -> Lookup:
    """Hash everything that can change the decision and read its record (timed);
    ``fingerprint``: the model's, as the selection's guard took it (its weights are not
    read again)."""
    start = time.perf_counter()
    ingredients = cache_ingredients(
        model,
        workload,
        policy,
        target,
        [c.info for c in candidates],
        [c.options for c in candidates],
        fingerprint,
    )
    key = key_of(ingredients)
    cache = PlanCache(cache_dir)
    record, unreadable = cache.find(key)
    found = Lookup(cache, key, ingredients, record, 0.0, set_aside=unreadable)
    if record is None:
        closest = cache.closest(ingredients)
        if closest is not None:
            found.closest_key, found.differences = closest[0], tuple(closest[1])
    found.lookup_time_s = time.perf_counter() - start
    return found


def known_rounding(
    record: CacheRecord | None, reference: ReferenceOutputs
) -> MeasuredRounding | None:
    """The fp32 rounding ``record`` kept for ``reference``'s very inputs, if it kept one."""
    if record is None:
        return None
    return stored_rounding(record.reference_rounding, reference)


def hit_report(
    found: Lookup, recheck: Recheck, seconds: float, policy: OptimizationPolicy
) -> OptimizationReport:
    """The record's report, saying it was served from the cache and how it was checked
    (and what this policy does with unseen signatures and its production guard: not part
    of the key)."""
    assert found.record is not None
    report = found.record.report
    return attrs.evolve(
        report,
        serving=with_serving_policy(report.serving, policy.on_unseen_signature, policy.guard),
        cache=CacheEvidence(
            cache_hit=True,
            key=found.key,
            lookup_time_s=found.lookup_time_s,
            revalidation_time_s=seconds,
            reason=recheck.reason,
            probe_baseline=recheck.probe_baseline,
            probe_speedup=recheck.probe,
        ),
    )


def miss_evidence(
    found: Lookup, recheck: Recheck | None, seconds: float | None, reuse: bool
) -> CacheEvidence:
    """Why this selection raced: no record, an unreadable one (set aside), reuse switched
    off, or a failed recheck."""
    if recheck is not None:
        reason = f"the recheck failed, raced again: {recheck.reason}"
    elif found.set_aside is not None:
        reason = (
            f"the record for this key could not be read ({found.set_aside}); it was set "
            "aside and the plans raced again"
        )
    elif found.record is not None and not reuse:
        reason = "a record exists but reuse_cached_plan is off: raced again"
    elif found.closest_key is not None:
        reason = (
            f"no record for this key; the closest record, {found.closest_key[:12]}, differs in "
            + (", ".join(found.differences[:8]) or "nothing readable")
        )
    else:
        reason = "no record for this key"
    return CacheEvidence(
        cache_hit=False,
        key=found.key,
        lookup_time_s=found.lookup_time_s,
        revalidation_time_s=seconds,
        reason=reason,
        differences=found.differences,
        closest_key=found.closest_key,
        probe_baseline=recheck.probe_baseline if recheck else None,
        probe_speedup=recheck.probe if recheck else None,
    )


def store(
    found: Lookup,
    report: OptimizationReport,
    selected: CandidateState,
    program: ProgramSaver | None,
    artifact_dir: Path,
    reference: ReferenceOutputs | None = None,
) -> OptimizationReport:
    """Write the race's decision under ``found.key``; the report with ``record_written``.

    ``program``: saves the selected plan as a program (where its provider can), into the
    record (``None``: the record keeps no program). ``reference``: the race's reference,
    whose measured fp32 rounding the record keeps for a hit.
    """
    assert selected.plan is not None and report.cache is not None
    cache = report.cache
    artifacts: dict[str, Any] = dict(selected.plan.artifacts)
    provider = selected.info.provider
    if Reload.of(provider) is Reload.REBUILD_WITH_COMPILE_CACHE:
        caches = save_compile_cache(
            Path(tempfile.mkdtemp(prefix="compile-cache-", dir=artifact_dir))
        )
        if caches is not None:
            artifacts[COMPILE_CACHE_ARTIFACT] = caches
    saved = program(artifact_dir) if program is not None else None
    if saved is not None:
        cache = attrs.evolve(cache, saved_program=saved.note)
        if saved.directory is not None:
            artifacts[PROGRAM_ARTIFACT] = saved.directory
    written = attrs.evolve(cache, record_written=True)
    try:
        result = found.cache.write(
            found.key,
            found.ingredients,
            attrs.evolve(report, cache=written),
            artifacts,
            replace=found.record is not None,
            reference_rounding=rounding_record(reference) if reference is not None else None,
        )
    except (OSError, BundleError, PlanCacheError) as exc:
        note = f"the record could not be written to {found.cache.root}: {exc}"
        warnings.warn(note, PlanCacheWarning, stacklevel=3)
        return attrs.evolve(
            report, cache=attrs.evolve(cache, record_written=False, write_note=note)
        )
    if not result.written:
        return attrs.evolve(
            report, cache=attrs.evolve(cache, record_written=False, write_note=result.note)
        )
    return attrs.evolve(report, cache=written)
