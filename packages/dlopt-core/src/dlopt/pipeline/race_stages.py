"""The stages between a selection's plans and its choice, in order: prepare -> measure (the
race) -> checks (model unchanged, revalidation) -> constraints (measured limits).

Both races a selection runs go through :func:`prepare_and_race`: the selection's own
(every plan, in its schedule's order) and a cache hit's revalidation probe (the record's
pick against its baseline, :mod:`dlopt.cache.recheck`); bringing an isolated race's winner
back into the host prepares it here too, without a race.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import torch

from dlopt.contract.provider import ProviderContext
from dlopt.events import Event, EventKind
from dlopt.measurement.sequential import KnownSpread
from dlopt.pipeline import checks, constraints, measure, prepare
from dlopt.pipeline.ground_truth import GroundTruth
from dlopt.pipeline.schedule import Schedule
from dlopt.pipeline.state import CandidateState, SelectionContext


def prepare_and_race(
    candidates: Sequence[CandidateState],
    model: torch.nn.Module,
    context: ProviderContext,
    truth: GroundTruth,
    run: SelectionContext,
    *,
    schedule: Schedule | None = None,
    racers: Collection[str] | None = None,
    reported: bool = True,
    known_spreads: Mapping[str, KnownSpread] | None = None,
) -> measure.RaceOutcome | None:
    """Prepare ``candidates`` (reference first) against ``truth``'s reference, then race
    the survivors and check them: the model is unchanged, each survivor's last raced
    outputs validate again, and the measured limits hold. Failures are recorded on the
    candidates.

    ``schedule``: build in its order, skipping what cannot win, and keep out of the race
    the plans its time has no room for. ``racers``: race only these plans (the first alive
    is the race's baseline), and only when two or more of them survived their preparation
    (the race of a lone plan decides nothing): ``None`` races every survivor, always (the
    selection's own race, whose report needs the reference's measurement even alone);
    ``()`` prepares only. ``reported=False``: a race whose measurement no report shows (a
    cached plan's revalidation probe) settles the allocator without counting its page
    faults; its ``known_spreads`` are the record's (:func:`dlopt.measurement.run_race`).
    Returns the race, or ``None`` where none was run.
    """
    reference, guard = truth.reference, truth.guard
    prepare.prepare_plans(candidates, model, context, reference, guard, run, schedule)
    if racers is None:
        racing = list(candidates)
    else:
        racing = [c for c in candidates if c.name in racers]
        if sum(c.alive for c in racing) < 2:
            return None
    floor_s = 0.0
    if schedule is not None:
        floor_s = schedule.price.race_floor_s()
        for cand in schedule.cut_the_race(racing):
            run.emit(
                Event(
                    EventKind.CANDIDATE_SKIPPED, f"not raced: {cand.not_raced}", candidate=cand.name
                )
            )
    raced = measure.race(
        racing,
        reference,
        run,
        race_floor_s=floor_s,
        allocator_report=reported,
        known_spreads=known_spreads,
    )
    checks.check_model_after_race(model, guard)
    checks.revalidate(racing, raced, reference, run)
    constraints.apply_measured_constraints(racing, raced.result, run)
    return raced
