"""One selection, from a ``WorkloadProfile`` to an ``OptimizationDecision``: the whole flow.

Both ways of running a selection come here: :class:`~dlopt.api.optimizer.InferenceOptimizer`
in process, and the isolated worker (:mod:`dlopt.isolation.worker`) on the host's behalf.
The workload arrives as the public API made it (converted once, cut to the batch sizes
the objective races); the stages are :mod:`dlopt.pipeline`'s, in this order::

    ground truth -> [plan cache: a record of this key, rechecked, is the decision]
    -> time budget and priors (schedule)
    -> plans -> prepare (probe, build, first calls, validation, build limits; in the
       schedule's order, skipping what cannot win or has no time left)
    -> measure (the race) -> checks -> measured limits      [these four: race_stages]
    -> choose -> serving check
    -> report -> [plan cache: store] -> decision

:func:`decision_in_host` is the other end of an isolated selection: the worker's winner
brought back into the host and validated against the host's own reference, by the same
function that brings a cache hit's plan back (:func:`dlopt.cache.recheck.recheck_record`,
without the hit's probe: the worker raced it).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from dlopt.cache import lookup
from dlopt.cache.recheck import Recheck, program_saver, recheck_record
from dlopt.cache.record_store import CacheRecord
from dlopt.cache.user_priors import user_priors
from dlopt.contract.priors import OperatorMix
from dlopt.contract.provider import ProviderContext, ProviderProtocol
from dlopt.engine.decision import OptimizationDecision
from dlopt.errors import DloptError
from dlopt.events import Event, EventKind
from dlopt.evidence.assembly import build_report
from dlopt.evidence.machine_load import machine_load
from dlopt.evidence.report import (
    DecisionTimeEvidence,
    MachineLoadEvidence,
    OptimizationReport,
)
from dlopt.pipeline import checks, choose, ground_truth, plans, race_stages
from dlopt.pipeline.plan_priors import assign_priors, prior_of
from dlopt.pipeline.schedule import Schedule
from dlopt.pipeline.state import CandidateState, SelectionContext, close_all
from dlopt.platform.containment import Containment
from dlopt.platform.fileio import TemporaryArtifacts
from dlopt.platform.machine import cpu_sample, load_average, machine_class
from dlopt.plugins.registry import ProviderRegistry
from dlopt.selection.prior_table import UNKNOWN_SOURCE
from dlopt.serving.shadow import rounding_by_family
from dlopt.settings.policy import (
    AUTO_BUDGET_MAX_S,
    EXPLORING_BUDGET_FACTOR,
    OptimizationPolicy,
    budget_seconds,
)
from dlopt.settings.workload import WorkloadProfile
from dlopt.validation.reference import ReferenceOutputs


@attrs.frozen(eq=False)
class Selection:
    """What one selection runs: the model and its workload, the stages' context (policy,
    target, clock, event sink, cancel check), the installed providers and those passed
    in code, and where plans write (``None``: a temporary directory the decision owns)."""

    model: torch.nn.Module
    workload: WorkloadProfile
    context: SelectionContext
    #: ``None`` only in the host of an isolated selection until its race is over.
    registry: ProviderRegistry | None
    providers: Sequence[ProviderProtocol] = ()
    artifact_dir: Path | None = None
    #: Whether the plan cache record keeps the winner as a program too (where its provider
    #: saves programs). An isolated worker handing its winner to the host through a record
    #: of its own saves none: saving costs a compile, and the host needs the plan once.
    save_programs: bool = True


def select(selection: Selection) -> OptimizationDecision:
    """Run ``selection``'s stages and return its decision (see the module docstring)."""
    run, model, registry = selection.context, selection.model, selection.registry
    assert registry is not None, "a selection runs with the providers loaded"
    if run.started_ns is None:
        run = attrs.evolve(run, started_ns=run.clock.now_ns())
    load_before, cpu_start = load_average(), cpu_sample()
    policy = run.policy
    scratch, artifact_dir = _artifact_dir(selection.artifact_dir)
    candidates = plans.choose_plans(registry, selection.providers, policy)
    run.emit(
        Event(
            EventKind.RACE_STARTED,
            f"{len(candidates)} providers, {len(selection.workload.cases)} cases",
            data={"providers": [c.name for c in candidates]},
        )
    )
    try:
        truth = ground_truth.capture(model, selection.workload, run)
        workload, reference, guard = truth.workload, truth.reference, truth.guard
        context = ProviderContext(
            target=run.target, policy=policy, workload=workload, artifact_dir=artifact_dir
        )
        found, recheck, recheck_s = None, None, None
        if policy.plan_cache_dir is not None:
            found = lookup.look_up(
                policy.plan_cache_dir,
                model,
                workload,
                policy,
                run.target,
                candidates,
                guard.fingerprint,
            )
        # After the lookup: a record keeps the rounding it measured on these inputs.
        record = found.record if found is not None else None
        ground_truth.with_fp32_rounding(truth, model, run, lookup.known_rounding(record, reference))
        if found is not None:
            hit = _cache_hit(found, candidates, selection, context, truth, scratch)
            if isinstance(hit, OptimizationDecision):
                return hit
            recheck, recheck_s = hit
        # Plans will be built: where a reference call spends its time, and how long it
        # takes, is what their priors and the time budget read.
        truth = ground_truth.profiled(truth, model, run)
        context = attrs.evolve(context, operator_mix=truth.mix)
        run, schedule, timing = _plan_the_time(run, candidates, context, truth)
        raced = race_stages.prepare_and_race(
            candidates, model, context, truth, run, schedule=schedule
        )
        assert raced is not None, "the selection's own race always runs"
        expected_calls = _expected_calls(selection)
        outcome = choose.choose_served(
            candidates, raced.result, expected_calls, reference, run, workload.batch_sizes
        )
        served = next(c for c in candidates if c.name == outcome.selected)
        serving = checks.serving_check(served, model, reference, workload, run, raced.result)
        checks.check_model_after_race(model, guard)
        report = build_report(
            target=run.target,
            policy=policy,
            workload=workload,
            plugin_failures=registry.failures,
            candidates=candidates,
            race=raced.result,
            outcome=outcome,
            expected_calls=expected_calls,
            serving=serving,
            decision_time=timing.evidence(
                candidates,
                schedule,
                run,
                machine_load(load_before, cpu_start, timing.call_s, raced.result),
            ),
        )
        if found is not None:
            report = attrs.evolve(
                report,
                cache=lookup.miss_evidence(found, recheck, recheck_s, policy.reuse_cached_plan),
            )
    except BaseException:
        close_all(candidates)  # no decision will own any plan
        if scratch is not None:
            scratch.release()
        raise
    assert served.plan is not None
    program = program_saver(served, context, reference) if selection.save_programs else None
    if found is not None:
        report = lookup.store(found, report, served, program, context.artifact_dir, reference)
    close_all(candidates, keep=served)
    run.emit(Event(EventKind.DECISION_MADE, outcome.reason, candidate=outcome.selected))
    return OptimizationDecision(
        served.plan, report, scratch=scratch, program=program, fallback=model,
        **_guarded(policy, truth.reference),
    )  # fmt: skip


@attrs.frozen
class _Timing:
    """What the report's ``decision_time`` says, known before the builds."""

    budget_s: float | None
    rule: str
    machine: str
    mix: OperatorMix
    call_s: float

    def evidence(
        self,
        candidates: Sequence[CandidateState],
        schedule: Schedule,
        run: SelectionContext,
        load: MachineLoadEvidence | None = None,
    ) -> DecisionTimeEvidence:
        assert run.started_ns is not None
        return DecisionTimeEvidence(
            budget_s=self.budget_s,
            budget_rule=self.rule,
            spent_s=(run.clock.now_ns() - run.started_ns) / 1e9,
            exhaustive=run.policy.exhaustive,
            machine_class=self.machine,
            operator_mix=self.mix,
            mix_kind=self.mix.kind,
            reference_call_ms=self.call_s * 1e3,
            cost_scale=schedule.cost_scale(),
            not_built=tuple(c.name for c in schedule.order(candidates) if c.not_built),
            machine_load=load,
        )


def _plan_the_time(
    run: SelectionContext,
    candidates: Sequence[CandidateState],
    context: ProviderContext,
    truth: ground_truth.GroundTruth,
) -> tuple[SelectionContext, Schedule, _Timing]:
    """The time budget's deadline on ``run``, every plan's prior, and the build schedule."""
    policy = run.policy
    machine = machine_class(run.target.device)
    evidence = user_priors(policy.plan_cache_dir, machine, truth.mix.kind)
    assign_priors(candidates, context, machine, truth.mix, evidence)
    budget_s, rule = budget_seconds(policy, truth.round_call_s)
    if rule == "auto" and budget_s is not None and _no_prior_speaks(candidates):
        budget_s = min(budget_s * EXPLORING_BUDGET_FACTOR, AUTO_BUDGET_MAX_S)
    assert run.started_ns is not None
    if budget_s is not None:
        run = attrs.evolve(run, deadline_ns=run.started_ns + int(budget_s * 1e9))
    schedule = Schedule(run, truth.case_call_s, budget_s)
    return run, schedule, _Timing(budget_s, rule, machine, truth.mix, truth.call_s)


def _no_prior_speaks(candidates: Sequence[CandidateState]) -> bool:
    """Whether every plan but the reference has the unknown prior (and there is one)."""
    challengers = [c for c in candidates if not c.is_reference]
    return bool(challengers) and all(prior_of(c).source == UNKNOWN_SOURCE for c in challengers)


def _cache_hit(
    found: lookup.Lookup,
    candidates: list[CandidateState],
    selection: Selection,
    context: ProviderContext,
    truth: ground_truth.GroundTruth,
    scratch: TemporaryArtifacts | None,
) -> OptimizationDecision | tuple[Recheck | None, float | None]:
    """The decision a record of this key gives once rechecked, or what the recheck found
    (``(None, None)`` when there was nothing to recheck)."""
    run = selection.context
    if found.record is None or not run.policy.reuse_cached_plan:
        return None, None
    start = time.perf_counter()
    chosen = found.record.report.selected_plan
    containment = Containment()
    with containment.inside():
        recheck = recheck_record(
            found.record,
            chosen,
            candidates,
            selection.model,
            context,
            truth,
            run,
        )
    seconds = time.perf_counter() - start
    if not (recheck.reused and recheck.selected is not None):
        containment.release()
        _forget_reloaded_files(context, chosen)
        return recheck, seconds
    report = lookup.hit_report(found, recheck, seconds, run.policy)
    return _served_again(
        recheck,
        report,
        recheck.reason,
        found.record,
        selection,
        (context, truth),
        (scratch, containment),
    )


def _forget_reloaded_files(context: ProviderContext, plan: str) -> None:
    """Remove what bringing a record's plan back copied into the selection's artifact
    directory: a record that failed its recheck must give the race nothing to reuse (a
    tampered export whose manifest key still matched was built from again)."""
    from dlopt.platform.names import is_plain_name

    if is_plain_name(plan):
        shutil.rmtree(context.artifact_dir / plan, ignore_errors=True)


def _served_again(
    recheck: Recheck,
    report: OptimizationReport,
    reason: str,
    record: CacheRecord | None,
    selection: Selection,
    prepared: tuple[ProviderContext, ground_truth.GroundTruth],
    owned: tuple[TemporaryArtifacts | None, Containment],
) -> OptimizationDecision:
    """The decision serving a winner brought back and rechecked (a cache hit, or the host
    of an isolated selection); ``reason`` is what its ``decision_made`` event says. The
    decision owns ``owned``: the scratch artifact directory and what contained the plan
    as it was brought back (the processes it started, its temp directory)."""
    assert recheck.selected is not None and recheck.selected.plan is not None
    run = selection.context
    context, truth = prepared
    scratch, containment = owned
    run.emit(Event(EventKind.DECISION_MADE, reason, candidate=report.selected_plan))
    program = program_saver(recheck.selected, context, truth.reference, record)
    return OptimizationDecision(
        recheck.selected.plan,
        report,
        scratch=scratch,
        containment=containment,
        program=program,
        fallback=selection.model,
        **_guarded(run.policy, truth.reference),
    )


def _guarded(policy: OptimizationPolicy, reference: ReferenceOutputs) -> dict[str, Any]:
    """What a decision's production guard needs from its selection: the policy's guard,
    its quality policy, and the reference's fp32 rounding per shape family."""
    return {
        "guard": policy.guard,
        "quality": policy.quality,
        "rounding": rounding_by_family(reference.cases),
    }


def decision_in_host(
    selection: Selection, report: OptimizationReport, record: CacheRecord | None
) -> OptimizationDecision:
    """The decision of a selection raced elsewhere (an isolated worker): its winner brought
    back into this process (from ``record``, the cache record the worker wrote or reused,
    when there is one) and prepared against this process's own reference; raises
    :class:`WinnerNotServed` naming the plan when it does not pass here."""
    run, model, registry = selection.context, selection.model, selection.registry
    assert registry is not None, "a winner is brought back with the providers loaded"
    policy = attrs.evolve(run.policy, include=(report.selected_plan,), exclude=())
    run = attrs.evolve(run, policy=policy)
    selection = attrs.evolve(selection, context=run)
    candidates = plans.choose_plans(registry, selection.providers, policy)
    scratch, artifact_dir = _artifact_dir(selection.artifact_dir)
    containment = Containment()
    try:
        truth = ground_truth.capture(model, selection.workload, run)
        ground_truth.with_fp32_rounding(
            truth, model, run, lookup.known_rounding(record, truth.reference)
        )
        context = ProviderContext(
            target=run.target, policy=policy, workload=truth.workload, artifact_dir=artifact_dir
        )
        with containment.inside():
            recheck = recheck_record(
                record,
                report.selected_plan,
                candidates,
                model,
                context,
                truth,
                run,
                probe=False,
            )
        if not recheck.reused:
            raise WinnerNotServed(
                f"the selected plan {report.selected_plan!r} passed in the worker but not "
                f"when brought back into this process: {recheck.reason}"
            )
    except BaseException:
        containment.release()
        if scratch is not None:
            scratch.release()
        raise
    # The worker's race chose it: its reason is the decision's, as in process.
    return _served_again(
        recheck,
        report,
        report.selection_reason,
        record,
        selection,
        (context, truth),
        (scratch, containment),
    )


class WinnerNotServed(DloptError):
    """The plan a worker chose does not pass in the host (see :func:`decision_in_host`)."""


def _expected_calls(selection: Selection) -> int | None:
    constraints = selection.context.policy.constraints
    if constraints.expected_calls is not None:
        return constraints.expected_calls
    return selection.workload.expected_calls


def _artifact_dir(named: Path | None) -> tuple[TemporaryArtifacts | None, Path]:
    """A directory the caller named is theirs; otherwise the decision owns a temporary one."""
    if named is not None:
        return None, named
    scratch = TemporaryArtifacts()
    return scratch, scratch.path
