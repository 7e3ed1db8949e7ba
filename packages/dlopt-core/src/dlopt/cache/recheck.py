"""A selection's winner served again is checked before it is trusted: on a cache hit, and
in the host of an isolated selection (:func:`recheck_record`, the one way back).

The record's selected plan comes back (:mod:`dlopt.cache.reload`) through the stages a
race runs (:func:`dlopt.pipeline.race_stages.prepare_and_race`), so it is built (or
loaded), called once per case and validated against the fresh eager reference exactly as
in a race, with the build limits checked. Then a short paired, interleaved probe of the
race engine (two plans: the baseline and the cached pick, :func:`probe_policy`) measures
it again, its last outputs are validated again and the measured limits checked.

The rule (:func:`probe_keeps`): the cached pick is reused unless the probe's upper
confidence bound of its speedup over the baseline falls below ``min_speedup``. The bound
holds at the race's confidence over every look, so a plan that still clears the bar is
reused in at least that share of restarts; the probe's rounds make a plan that fell 10%
below the bar caught in at least 95% of restarts (both rates are tested on the fake
clock, tests/cache/test_revalidation_rates.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import torch

from dlopt.bundle.store import PROGRAM_ARTIFACT, SavedProgram
from dlopt.cache.record_store import CacheRecord
from dlopt.cache.reload import ProgramSaver, bring_back
from dlopt.contract.provider import ProviderContext
from dlopt.measurement import MeasurementPolicy, RatioInterval
from dlopt.measurement.sequential import KnownSpread
from dlopt.measurement.stats import describe_ratio
from dlopt.pipeline import measure, prepare, race_stages, state
from dlopt.pipeline.ground_truth import GroundTruth
from dlopt.validation import ReferenceOutputs

#: The probe's rounds: at most this many paired rounds (it stops earlier once the gate
#: is decided either way), within :data:`PROBE_MAX_TIME_S` of measurement, or longer
#: where ``min_rounds`` need it (slow models), up to :data:`PROBE_CEILING_S`.
PROBE_MAX_ROUNDS = 12
PROBE_MAX_TIME_S = 3.0
PROBE_CEILING_S = 60.0
#: The probe's least rounds where the record kept the spread of the pick's rounds against
#: the baseline (:func:`recorded_spread`): its degrees of freedom decide a large effect at
#: the second look (without it, the race's ``min_rounds``).
PROBE_MIN_ROUNDS_KNOWN_SPREAD = 2
#: The probe's warm-up per plan and case (calls, seconds) and timed calls per burst.
PROBE_WARMUP_CALLS = 10
PROBE_WARMUP_S = 0.5
PROBE_BURST_CALLS = 4


def probe_policy(measurement: MeasurementPolicy, known_spread: bool = False) -> MeasurementPolicy:
    """The race's measurement policy, cut down to the revalidation probe: a few rounds
    within a small budget, no futility stop (the probe's interval decides); with a
    ``known_spread`` (the record's), its first look at round
    :data:`PROBE_MIN_ROUNDS_KNOWN_SPREAD`.

    The budget is the race engine's automatic one: room for :data:`PROBE_MAX_ROUNDS` rounds
    at the first round's pace, at least :data:`PROBE_MAX_TIME_S` and at most
    :data:`PROBE_CEILING_S`. A fast model's probe keeps its 3 s; a slow model's gets the
    rounds that make its interval tell (a fixed 3 s measured no interval at all for
    mobilenet_v2 at batch 8 on 2 cores, whose paired round takes over a second, so its
    record was never reused; 3 rounds gave an uninformative interval)."""
    floor = min(measurement.max_time_s or PROBE_MAX_TIME_S, PROBE_MAX_TIME_S)
    least = min(measurement.min_rounds, PROBE_MAX_ROUNDS)
    if known_spread:
        least = min(least, PROBE_MIN_ROUNDS_KNOWN_SPREAD)
    return attrs.evolve(
        measurement,
        min_rounds=least,
        max_rounds=PROBE_MAX_ROUNDS,
        max_time_s=None,
        auto_budget_rounds=PROBE_MAX_ROUNDS,
        auto_budget_min_s=floor,
        auto_budget_max_s=max(floor, min(measurement.auto_budget_max_s, PROBE_CEILING_S)),
        futility_confidence=None,
        warmup_leave_factor=None,
        # Two plans the race already warmed and timed once: a short warm-up and the
        # shortest bursts (the rates below hold with them, tests/cache).
        warmup_max_calls=min(measurement.warmup_max_calls, PROBE_WARMUP_CALLS),
        warmup_max_time_s=min(measurement.warmup_max_time_s, PROBE_WARMUP_S),
        timed_calls_per_burst=PROBE_BURST_CALLS,
    )


def recorded_spread(
    record: CacheRecord, chosen: str, versus: str, reference: str
) -> KnownSpread | None:
    """The spread of ``chosen``'s rounds against ``versus`` in the race ``record`` kept,
    where it kept one: against its baseline (``reference``, the reference plan, or a
    native plan); ``None`` otherwise."""
    if versus != record.report.baseline or chosen == versus:
        return None
    try:
        race = record.report.candidate(chosen).race
    except KeyError:
        return None
    interval = race.speedup_vs_reference if versus == reference else race.speedup_vs_baseline
    rounds = interval.rounds if interval is not None else 0
    sd = race.round_spread
    if sd is None or not 0.0 < sd < math.inf or rounds < 2:
        return None
    return KnownSpread(sd, rounds - 1)


def probe_keeps(interval: RatioInterval | None, min_speedup: float) -> bool:
    """The rule: keep the cached pick unless the probe's upper bound of its speedup over
    the baseline is below ``min_speedup`` (no interval: not kept)."""
    if interval is None or interval.high is None:
        return False
    return interval.high >= min_speedup


@attrs.define(eq=False)
class Recheck:
    """What revalidating a record found. ``plan``: the cached pick, built and checked
    (``None`` when the record is not reused: ``reason`` says why)."""

    reused: bool
    reason: str
    selected: state.CandidateState | None = None
    probe_baseline: str | None = None
    probe: RatioInterval | None = None


def recheck_record(
    record: CacheRecord | None,
    chosen: str,
    candidates: Sequence[state.CandidateState],
    model: torch.nn.Module,
    context: ProviderContext,
    truth: GroundTruth,
    run: state.SelectionContext,
    *,
    probe: bool = True,
) -> Recheck:
    """Bring the plan ``chosen`` back (from ``record`` where there is one) and check it: the
    one way a selection's winner is served again (see the module docstring).

    ``probe``: race it again against the record's baseline (a cache hit). Without: only
    build and validate it (the host of an isolated selection, whose worker raced it).
    ``candidates``: the plans this selection would race (reference first), not yet
    built; ``truth``: this process's reference outputs and the guard on ``model``. Every
    plan built here is closed except the reused one.
    """
    by_name = {c.name: c for c in candidates}
    if chosen not in by_name:
        return Recheck(False, f"{chosen!r} is not among the plans raced now")
    versus, spread = chosen, None
    if probe:
        assert record is not None, "a probe races the record's baseline"
        reference_cand = candidates[0]
        baseline = record.report.baseline
        versus = baseline if baseline != chosen else reference_cand.name
        if versus not in by_name:
            return Recheck(
                False, f"the cached baseline {versus!r} is not among the plans raced now"
            )
        # Only the two plans it races: the ground truth already ran the model on every
        # case, so a reference plan that is not the baseline would only cost its calls.
        names = list(dict.fromkeys((versus, chosen)))
        spread = recorded_spread(record, chosen, versus, reference_cand.name)
    else:
        names = [chosen]
    fresh = {n: bring_back(by_name[n], record if n == chosen else None) for n in names}
    built = list(fresh.values())  # the probe's baseline first
    probe_run = attrs.evolve(
        run,
        policy=attrs.evolve(
            run.policy,
            measurement=probe_policy(run.policy.measurement, known_spread=spread is not None),
        ),
    )
    try:
        # The probe races the pick against its baseline; without a probe nothing races.
        # The probe's race is not reported: the allocator is settled as for the race,
        # without the calls that count its page faults for a report.
        raced = race_stages.prepare_and_race(
            built,
            model,
            context,
            truth,
            probe_run,
            racers={versus, chosen},
            reported=False,
            known_spreads={chosen: spread} if spread is not None else None,
        )
        outcome = _verdict(fresh[chosen], fresh[versus], raced, run.policy.constraints.min_speedup)
    except BaseException:
        state.close_all(built)
        raise
    state.close_all(built, keep=outcome.selected if outcome.reused else None)
    return outcome


def _verdict(
    selected: state.CandidateState,
    baseline: state.CandidateState,
    raced: measure.RaceOutcome | None,
    min_speedup: float,
) -> Recheck:
    """The prepared (and, with a probe, raced) cached pick, judged: it must have validated
    (and passed the race's checks) and, unless it is the reference itself or was not
    probed, kept its speedup over ``baseline`` (:func:`probe_keeps`), which must have
    survived its preparation."""
    chosen, versus = selected.name, baseline.name
    if not selected.alive:
        return Recheck(False, f"{chosen!r} {_why_not(selected)}")
    if selected is baseline:  # no probe, or the reference itself was served
        return Recheck(True, f"{chosen!r} validated on every case", selected)
    if raced is None:  # the baseline did not survive its preparation
        return Recheck(False, f"the probe's baseline {versus!r} {_why_not(baseline)}")
    interval = raced.result.candidate(chosen).speedup_vs_baseline
    shown = describe_ratio(interval)
    if not probe_keeps(interval, min_speedup):
        return Recheck(
            False,
            f"the revalidation probe says {chosen!r} no longer clears min_speedup "
            f"{min_speedup:g} over {versus!r} (speedup {shown})",
            None,
            versus,
            interval,
        )
    return Recheck(
        True,
        f"{chosen!r} validated on every case and the probe's speedup over {versus!r} "
        f"({shown}) does not fall below min_speedup {min_speedup:g}",
        selected,
        versus,
        interval,
    )


def program_saver(
    cand: state.CandidateState,
    context: ProviderContext,
    reference: ReferenceOutputs,
    record: CacheRecord | None = None,
) -> ProgramSaver:
    """Saves ``cand``'s built plan as a program when first asked, in its build context
    (its options and the prepared cases, copied only then); the program ``record``
    holds, if it holds one."""
    saved = _saved_program_of(record)
    provider = cand.info.provider
    if saved is not None or not callable(getattr(provider, "save_program", None)):
        return ProgramSaver(saved=saved)  # keeps no inputs alive

    def plan_context() -> ProviderContext:
        return attrs.evolve(context, options=cand.options, cases=prepare.prepared_cases(reference))

    return ProgramSaver(provider, cand.plan, plan_context)


def _saved_program_of(record: CacheRecord | None) -> SavedProgram | None:
    """The program a record holds, or ``None``."""
    if record is None or PROGRAM_ARTIFACT not in record.bundle.manifest.get("artifacts", {}):
        return None
    return SavedProgram(
        record.bundle.artifact_path(PROGRAM_ARTIFACT), "saved with the plan cache record"
    )


def _why_not(cand: state.CandidateState) -> str:
    if cand.error is not None:
        return f"failed at {cand.error.stage.value}: {cand.error.message}"
    if cand.status is not None and not cand.status.availability.available:
        return f"is unavailable here: {cand.status.availability.reason}"
    return "was not built"
