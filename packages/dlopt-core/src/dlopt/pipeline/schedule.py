"""Stage 3's order and its cut: which plans are built, in what order, and which are not.

Every plan gets a prior before anything is built (:func:`assign_priors`; where priors
come from: :mod:`dlopt.selection.prior_table`). The reference is built first, the others in
descending order of expected gain per second of cost. Before each build
:meth:`Schedule.skip_reason` says whether the plan can still matter: not when its prior's
optimistic bound cannot beat the confirmed leader by more than the indifference zone
(under the automatic budget, not when its prior, read for this model through the
leader's own miss, expects it no faster than the leader by a margin:
:meth:`Schedule._expected_slower`), nor when the time budget has no room for its build
beside what the race needs. A validated
plan is screened (:meth:`Schedule.screen`: a few paired rounds against the reference)
before a build it could spare is next, when what it measures could spare more build time
than it costs (:meth:`Schedule.screen_before`): that is what confirms a leader. A plan is
not built either when a plan of its rounding (bf16, fp16, or int8 with static activation
scales) already failed validation here by far (:meth:`Schedule.rejected`): the error is
the format's rounding, which every plan computing in it shares. Under a time budget the
user set, a build is started only when its cost could run over the estimate by
:data:`FIRM_BUDGET_COST_MARGIN` and still fit. ``OptimizationPolicy(exhaustive=True)``
builds every plan, with no budget.

docs/selection.md, "Decision time", explains the rules and their numbers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import attrs

from dlopt.contract.priors import OperatorMix, Prior
from dlopt.contract.provider import ProviderContext
from dlopt.errors import PlanCall
from dlopt.measurement import MeasurementPolicy, RaceResult, run_race
from dlopt.pipeline.probe import declared_scheme
from dlopt.pipeline.raced_calls import checked_calls, output_checks
from dlopt.pipeline.state import CandidateState, SelectionContext, StageError
from dlopt.precision import Precision, Quantization
from dlopt.selection.prior_table import UNKNOWN_SOURCE, table_prior, unknown_prior
from dlopt.validation import ReferenceOutputs
from dlopt.vocabulary import Objective, Stage, Verdict

log = logging.getLogger(__name__)

#: The reference's own prior: it is the unit every speedup is measured in.
REFERENCE_PRIOR = Prior(1.0, 1.0, 1.0, 0.05, "the reference")
#: Seconds kept for what follows the race (checks, the serving check, the report).
FINISH_RESERVE_S = 1.0
#: The race as the schedule prices it (:meth:`Schedule.plan_race_s`): each plan warms
#: up, then races :data:`RACE_FIRST_ROUNDS` rounds (after which a plan clearly behind
#: leaves); the two leading plans then race :data:`RACE_DECIDING_ROUNDS` rounds more. A
#: round is, per plan and case, a settle (untimed calls) and a burst of the measurement
#: policy's ``timed_calls_per_burst`` (more for calls shorter than
#: ``burst_time_target_s``).
RACE_FIRST_ROUNDS = 3
RACE_DECIDING_ROUNDS = 6
#: Calls of a plan's warm-up a race is expected to take (it stops once latency stops
#: falling), at most the policy's ``warmup_max_time_s``.
RACE_WARMUP_CALLS = 10
#: Seconds a burst costs beside its calls (the quiet-wait, the bookkeeping).
RACE_BURST_OVERHEAD_S = 0.005
#: The screening: this many paired rounds, each a burst of four calls per case.
SCREEN_ROUNDS = 3
SCREEN_CALLS_PER_CASE = 3 * 6 + 6
#: What one screening may cost at most, as a share of the time budget.
SCREEN_BUDGET_SHARE = 0.1
#: Objectives whose winner is the fastest plan per call: a prior of speedup per call
#: prunes only for these (a slower plan may still win on throughput or lifecycle).
PRUNED_OBJECTIVES = (Objective.STEADY_STATE_LATENCY, Objective.MIN_LATENCY)
#: How a reason for not building a plan the automatic budget leaves out begins.
EXPECTED_SLOWER = "its prior expects"
#: How much of the leader's miss (its measured speedup over its prior's) the automatic
#: budget's rule reads as the model's, shared by the plans not yet built: their expected
#: speedups are scaled by ``(measured / prior) ** SHARED_MODEL_FACTOR``. A model that runs
#: one compiled plan faster than the table's models mostly runs the others faster too:
#: over the oracle's measurements of the nine AVX2 runs it was fitted on (in
#: docs/benchmarks/avx2-only/, up to 757ccd4), the slope of one plan's log miss on
#: another's on the same workload is 0.76 (7358 ordered pairs; conv 0.77, attention 0.70,
#: linear 0.37), and predicting with it cuts the root-mean-square log miss from 0.25 to
#: 0.16 (``python tools/tables.py shared-miss``).
SHARED_MODEL_FACTOR = 0.75
#: Under the automatic budget a plan is pruned as expected slower only when what its prior
#: expects here, times this, is no faster than the leader: a table of pooled models does
#: not order plans within a few percent of each other on one model. OpenVINO fp32's conv
#: prior is 3% below ONNX Runtime int8's; in the oracle's paired measurements of eight
#: AVX2 runs it ran 0.89-1.07x ONNX Runtime int8 per conv model, and 0.99-1.07x on
#: mobilenet_v2, where pruning it at the indifference zone (1.02) cost 7.3% of regret.
PRIOR_RESOLUTION = 1.05
#: The least share of the time budget the race gets, however long the builds took: enough
#: for its first rounds, so a fast plan built late can still be confirmed.
MIN_RACE_SHARE = 0.1
#: Bounds on how far this machine's builds may be from the priors' costs.
COST_SCALE_RANGE = (0.25, 4.0)
#: Seconds of builds taken to have cost what their priors said before any is measured:
#: builds totalling much less say little of this machine.
COST_SCALE_PSEUDO_S = 1.0
#: What the first plan of a distribution pays beside its prior's cost: importing its SDK
#: (about 1-1.5 s for torchao, ONNX Runtime's exporter or OpenVINO on a 2-core CPU).
FIRST_OF_DISTRIBUTION_S = 1.5
#: Under a time budget the user set (a promise, unlike ``"auto"``), a build is started
#: only if it still fits when it takes this much longer than expected: a build in progress
#: cannot be stopped. A cold PT2E compile of BERT took 1.5x its expected 8.6 s and ran a
#: 20 s budget to 22.2 s (docs/benchmarks/README.md).
FIRM_BUDGET_COST_MARGIN = 1.5
#: Reduced float formats whose error on a model is the format's own rounding, which every
#: plan computing in it shares: plans differ in fusion and operator order, not in the
#: format.
SHARED_ROUNDING = (Precision.BF16, Precision.FP16)
#: Int8 with static activation scales shares its rounding too: per-tensor activation
#: scales calibrated on the same cases put every such plan on the same coarse grid. On
#: the suite's eight workloads the three static int8 plans (PT2E, ONNX Runtime's, NNCF's)
#: passed together or failed together, at 1.9-3.1x the limit (docs/selection.md); dynamic
#: int8 (scales from each call) passed where they failed, so it is not grouped with them.
STATIC_INT8 = "static int8"
#: How many times its limit a plan's relative L2 error must be before the plans of its
#: rounding not yet built are taken to fail too: on the suite's ImageNet models each
#: compiled bf16 plan measured 0.75-1.03x eager bf16's error (docs/selection.md); a near
#: miss says little (another plan's rounding may land under the limit).
PRECISION_FAILURE_MARGIN = 2.0
#: How a reason for not building a plan whose precision failed here begins.
PRECISION_FAILED = "its precision"


def rounding_of(precision: Precision | str | None, quantization: str | None) -> str | None:
    """The rounding a plan shares with every plan declaring the same, by name (``"bf16"``,
    ``"fp16"``, :data:`STATIC_INT8`), or ``None`` where plans of its kind may differ."""
    if precision is None or precision == "":
        return None
    try:
        parsed = Precision.parse(precision)
    except ValueError:  # a probe record of a worker that failed says "unknown"
        return None
    if parsed in SHARED_ROUNDING:
        return parsed.value
    if parsed is Precision.INT8 and quantization == Quantization.STATIC.value:
        return STATIC_INT8
    return None


def _declared_quantization(cand: CandidateState) -> str | None:
    return cand.status.quantization if cand.status is not None else None


def declared_rounding(cand: CandidateState) -> str | None:
    """The rounding ``cand`` declares (:func:`rounding_of`): as its probe recorded it, or,
    before its probe, from the provider's ``precision`` and ``quantization`` (what the
    probe records)."""
    if cand.status is not None:
        return rounding_of(cand.status.precision, cand.status.quantization)
    return rounding_of(*declared_scheme(cand.info.provider))


def assign_priors(
    candidates: Sequence[CandidateState],
    context: ProviderContext,
    machine: str,
    mix: OperatorMix,
    evidence: Mapping[str, Prior],
) -> None:
    """Give every candidate its prior: the provider's own, else the user's ``evidence``,
    else the shipped table's for ``machine`` and ``mix``, else the unknown prior."""
    for cand in candidates:
        if cand.is_reference:
            cand.prior = REFERENCE_PRIOR
            continue
        cand.prior = (
            _declared(cand, attrs.evolve(context, options=cand.options))
            or evidence.get(cand.name)
            or table_prior(machine, mix, cand.name)
            or unknown_prior()
        )


def _declared(cand: CandidateState, context: ProviderContext) -> Prior | None:
    """The provider's own ``prior(context)``, when it declares one that is a Prior."""
    declare = getattr(cand.info.provider, "prior", None)
    if not callable(declare):
        return None
    declared = PlanCall.of(lambda: declare(context))
    if declared.error is not None:  # a plugin's bug must not stop the selection
        log.warning(
            "the prior of plan %r raised %s; using dlopt's own", cand.name, declared.describe()
        )
        return None
    prior = declared.value
    if prior is None or isinstance(prior, Prior):
        return prior
    log.warning(
        "the prior of plan %r is a %s, not a dlopt.plugin.Prior; using dlopt's own",
        cand.name,
        type(prior).__name__,
    )
    return None


@attrs.define
class Schedule:
    """The build order and the rules that cut it, for one selection."""

    run: SelectionContext
    #: The reference's seconds per call of each case (what the race's and a screening's
    #: calls are expected to take).
    case_call_s: tuple[float, ...]
    #: The whole budget in seconds (``None``: none), for the report's wording.
    budget_s: float | None = None
    #: (prior cost, actual cost) of every plan built so far but the reference.
    costs: list[tuple[float, float]] = attrs.field(factory=list)
    #: The distributions (plugins) a plan has been built from: their SDKs are imported.
    imported: set[str] = attrs.field(factory=set)
    #: Per rounding (:func:`rounding_of`: ``"bf16"``, ``"static int8"``...) that failed
    #: validation here by far: what showed it.
    failed_roundings: dict[str, str] = attrs.field(factory=dict)
    #: The plans screened so far (each at most once).
    screened: set[str] = attrs.field(factory=set)

    @property
    def exhaustive(self) -> bool:
        return self.run.policy.exhaustive

    @property
    def round_call_s(self) -> float:
        """The reference's seconds for one call of every case (unweighted: a race calls
        each case alike)."""
        return sum(self.case_call_s)

    @property
    def auto(self) -> bool:
        """The budget is dlopt's own (``"auto"``): a plan is built only if it is expected
        to win (:meth:`_expected_slower`), not merely able to."""
        return not self.exhaustive and self.run.policy.time_budget_s == "auto"

    @property
    def firm(self) -> bool:
        """The budget is the user's (``time_budget_s`` seconds, not ``"auto"``): a promise."""
        budget = self.run.policy.time_budget_s
        return not self.exhaustive and budget is not None and budget != "auto"

    def order(self, candidates: Sequence[CandidateState]) -> list[CandidateState]:
        """The reference first, then by expected gain per second (the given order breaks
        ties); as given when exhaustive."""
        if self.exhaustive:
            return list(candidates)
        position = {id(c): i for i, c in enumerate(candidates)}
        return sorted(
            candidates,
            key=lambda c: (not c.is_reference, -_prior(c).value, position[id(c)]),
        )

    def cost_scale(self) -> float:
        """How much longer this machine's builds take than their priors say, bounded:
        later costs are read through it. The ratio of the builds' total to their priors'
        total, each with :data:`COST_SCALE_PSEUDO_S` of builds as the priors say added,
        so the costly builds weigh most and a few hundredths of a second weigh little: a
        native plan's near-free build (0.0 s against a 0.05 s prior) says nothing of what
        a compile takes here, and as one ratio in a mean it scaled every later compile
        down to the bound."""
        expected = COST_SCALE_PSEUDO_S + sum(prior for prior, _ in self.costs)
        actual = COST_SCALE_PSEUDO_S + sum(spent for _, spent in self.costs)
        low, high = COST_SCALE_RANGE
        return min(max(actual / expected, low), high)

    def built(self, cand: CandidateState) -> None:
        """Record what ``cand``'s build and first calls took against its prior (and its
        distribution's first import)."""
        if cand.setup_s is None:
            return
        import_s = self._import_s(cand)
        # The reference's plugin too: the plans beside it (dlopt's own) import nothing more.
        self.imported.add(cand.info.plugin)
        if cand.is_reference or cand.prior is None:
            return
        self.costs.append((cand.prior.cost_s + import_s, cand.setup_s + sum(cand.first_calls_s)))

    def rejected(self, cand: CandidateState) -> None:
        """Note ``cand``'s validation failure when it condemns its rounding
        (:func:`rounding_of`): its relative L2 error on some output was at least
        :data:`PRECISION_FAILURE_MARGIN` times its limit."""
        precision = cand.plan.precision if cand.plan is not None else None
        rounding = rounding_of(precision, _declared_quantization(cand))
        if (
            precision is None
            or rounding is None
            or rounding in self.failed_roundings
            or cand.error is None
            or cand.error.stage is not Stage.VALIDATION
            or cand.validation is None
        ):
            return
        worst: tuple[float, str] | None = None
        for case in cand.validation.cases:
            for leaf in case.leaves:
                if leaf.passed or leaf.rel_l2 is None:
                    continue
                limits, label = self.run.policy.quality.limits_for(precision, leaf.path)
                if limits.max_rel_l2 <= 0:
                    continue
                over = leaf.rel_l2 / limits.max_rel_l2
                if worst is None or over > worst[0]:
                    text = (
                        f"{cand.name} measured rel_l2 {leaf.rel_l2:.3g} on output {leaf.path} "
                        f"of case {case.case!r} against the limit {limits.max_rel_l2:g} "
                        f"({label}), {over:.1f}x"
                    )
                    worst = (over, text)
        if worst is not None and worst[0] >= PRECISION_FAILURE_MARGIN:
            self.failed_roundings[rounding] = worst[1]

    def expected_cost_s(self, cand: CandidateState) -> float:
        """``cand``'s build and first calls as expected here: its prior's cost read through
        :meth:`cost_scale`, plus its SDK's import when no plan of its distribution was
        built yet."""
        return _prior(cand).cost_s * self.cost_scale() + self._import_s(cand)

    def _import_s(self, cand: CandidateState) -> float:
        return 0.0 if cand.info.plugin in self.imported else FIRST_OF_DISTRIBUTION_S

    def plan_race_s(
        self, rounds: int, speedup: float = 1.0, *, warm_up: bool = True, at_most: bool = False
    ) -> float:
        """Seconds one plan running ``speedup`` times the reference's speed is expected
        to spend in ``rounds`` rounds of the race (and its warm-up): per case and round, a
        settling call and a burst of ``timed_calls_per_burst`` calls (more for short
        calls, to last ``burst_time_target_s``), each with :data:`RACE_BURST_OVERHEAD_S`,
        and :data:`RACE_WARMUP_CALLS` of warm-up. ``at_most``: the longest the policy
        lets them run instead (a settle up to ``settle_time_s``, a warm-up up to
        ``warmup_max_calls``), each warm-up at most ``warmup_max_time_s``.

        Counted in calls of the model's own length, and bounded in time where the policy
        bounds them, so a slow model's race is not priced as a fast one's times its call:
        on mobilenet_v2 (AVX2) a 20 s budget built nothing but eager fp32 when its least
        race, priced at 31 calls of 238 ms per plan with a 1.5x margin, came to 23 s."""
        policy = self.run.policy.measurement
        warmup_calls = policy.warmup_max_calls if at_most else RACE_WARMUP_CALLS
        seconds = 0.0
        for reference_s in self.case_call_s:
            call_s = reference_s / speedup
            short = math.ceil(policy.burst_time_target_s / call_s) if call_s > 0 else 0
            burst = min(max(policy.timed_calls_per_burst, short), policy.max_calls_per_burst)
            settle_s = max(call_s, policy.settle_time_s) if at_most else call_s
            seconds += rounds * (settle_s + burst * call_s + RACE_BURST_OVERHEAD_S)
            if warm_up:
                seconds += min(warmup_calls * call_s, policy.warmup_max_time_s)
        return seconds

    def race_reserve_s(self, plans: int) -> float:
        """Seconds the race of ``plans`` plans (each at the reference's speed) and what
        follows it are expected to need."""
        first = plans * self.plan_race_s(RACE_FIRST_ROUNDS)
        deciding = 2 * self.plan_race_s(RACE_DECIDING_ROUNDS, warm_up=False)
        return FINISH_RESERVE_S + first + deciding

    def race_floor_s(self, speedup: float = 1.0) -> float:
        """The least the race gets, however long the builds took: what the reference and
        one challenger (``speedup`` times as fast: its prior's low bound, where one plan is
        asked about) may take at most through their warm-up and the race's first three
        rounds, which decide a clear gap (a close one needs more, and without them the
        baseline is kept). A leader confirmed in screening is confirmed again in the race
        rather than lost to it; the budget is overrun by at most this much."""
        first = RACE_FIRST_ROUNDS
        reference = self.plan_race_s(first, at_most=True)
        return reference + self.plan_race_s(first, max(speedup, 1.0), at_most=True)

    def leader(self, candidates: Sequence[CandidateState]) -> CandidateState | None:
        """The alive plan with the best confirmed speedup (the highest screened lower
        bound; the reference's is exactly 1)."""
        best: CandidateState | None = None
        for cand in candidates:
            if not cand.alive or confirmed(cand) is None:
                continue
            if best is None or confirmed(cand) > confirmed(best):  # type: ignore[operator]
                best = cand
        return best

    def skip_reason(self, cand: CandidateState, candidates: Sequence[CandidateState]) -> str | None:
        """Why ``cand`` is not built (``None``: build it)."""
        if self.exhaustive or cand.is_reference:
            return None
        # What the provider declares (before the build).
        rounding = declared_rounding(cand)
        shown = self.failed_roundings.get(rounding) if rounding is not None else None
        if shown is not None:
            sharing = (
                "plans computing in int8 with activation scales calibrated ahead of time"
                if rounding == STATIC_INT8
                else f"plans computing in {rounding}"
            )
            return (
                f"{PRECISION_FAILED} ({rounding}) fails validation on this model: "
                f"{shown}; {sharing} share its rounding"
            )
        prior = _prior(cand)
        leader = self.leader(candidates)
        low = confirmed(leader) if leader is not None else None
        if leader is not None and low is not None and not self.scouts(cand, candidates, leader):
            at = (
                f"is confirmed at {leader.screening.describe()}"
                if leader.screening is not None
                else "is the reference (1x)"
            )
            if self._beyond_reach(prior, low):
                return (
                    f"its prior is at most {prior.high:.2f}x ({prior.source}), "
                    f"and {leader.name} {at}"
                )
            miss = leader_miss(leader)
            factor = miss**SHARED_MODEL_FACTOR
            if self._expected_slower(prior, _promise(leader), factor):
                here = (
                    f", {prior.speedup * factor:.2f}x on this model ({leader.name} measures "
                    f"{miss:.2f}x its prior)"
                    if miss != 1.0
                    else ""
                )
                return (
                    f"{EXPECTED_SLOWER} {prior.describe()} ({prior.source}){here}, no faster "
                    f"than {leader.name}, which {at}; the automatic time budget builds only "
                    f"the plans expected to beat the leader (set a time budget, or "
                    f"exhaustive, to build every plan that could)"
                )
        left = self.run.seconds_left()
        if left is None:
            return None
        # Until one challenger's build has shown what builds of this model take here,
        # the priors' costs (medians over models of every size) are not trusted to skip.
        need = self.expected_cost_s(cand) if self.costs else 0.0
        margin = FIRM_BUDGET_COST_MARGIN if self.firm else 1.0
        # While no challenger in the race promises as much as this plan, what must fit
        # beside its build is the least race that can confirm it (the race is given that
        # much in any case, and leaves the less promising plans out to make room:
        # cut_the_race). After that, the race of this plan, the reference and the plans
        # built so far that promise at least as much, so cheap plans built early do not
        # crowd out a better one. Priced as the full race of two plans, a weak native plan
        # validated first kept every compile out of a 20 s budget on resnet50 (AVX2, 89 ms
        # a call): 14.4 s of race beside an OpenVINO int8 build of 9 s, with 18.4 s left.
        promise = _promise(cand)
        ahead = sum(
            1 for c in candidates if c.alive and not c.is_reference and _promise(c) >= promise
        )
        if ahead:
            reserve = self.race_reserve_s(ahead + 2)
        else:
            reserve = FINISH_RESERVE_S + self.race_floor_s(prior.low)
        if need * margin + reserve > left:
            budget = f" of the {self.budget_s:.0f} s budget" if self.budget_s else ""
            overrun = (
                f" (up to {self.expected_cost_s(cand) * margin:.1f} s: the budget is firm)"
                if self.firm
                else ""
            )
            return (
                f"no time left: its build and first calls are expected to take "
                f"{self.expected_cost_s(cand):.1f} s{overrun} "
                f"and the race about {reserve:.1f} s, with {max(left, 0.0):.1f} s{budget} left "
                f"(its prior: {prior.describe()}, {prior.source})"
            )
        return None

    def cut_the_race(self, candidates: Sequence[CandidateState]) -> list[CandidateState]:
        """Keep out of the race the plans its time has no room for, least promising first
        (by screened speedup, else by prior): a race of more plans than its seconds can
        run :attr:`MeasurementPolicy.min_rounds <dlopt.measurement.MeasurementPolicy>`
        rounds of decides nothing, and a confirmed leader would then lose to the
        reference. The reference and the most promising challenger always race. Each plan
        kept out gets ``not_raced`` (why); the plans kept out are returned."""
        if self.run.policy.objective not in PRUNED_OBJECTIVES:
            return []
        race_s = race_seconds(self.run, self.race_floor_s())  # None: no budget (exhaustive)
        alive = [c for c in candidates if c.alive]
        if race_s is None or len(alive) <= 2:
            return []
        room = 2
        while room < len(alive) and self.race_reserve_s(room + 1) - FINISH_RESERVE_S <= race_s:
            room += 1
        if room >= len(alive):
            return []
        reference, challengers = alive[0], alive[1:]
        ranked = sorted(challengers, key=lambda c: -_promise(c))
        left_out = ranked[room - 1 :]
        raced = ", ".join(c.name for c in [reference, *ranked[: room - 1]])
        for cand in left_out:
            cand.not_raced = (
                f"the race had {race_s:.1f} s left of the time budget, room for {room} plans "
                f"({raced}); {cand.name} was less promising ({_promise_text(cand)})"
            )
        return left_out

    def worth_screening(self, cand: CandidateState, waiting: Sequence[CandidateState]) -> bool:
        """Whether a screening of ``cand`` could spare more build time than it costs: some
        plan still ``waiting`` would be pruned if ``cand`` measured what its prior says."""
        if self.exhaustive or not cand.alive or cand.is_reference:
            return False
        spared = sum(
            self.expected_cost_s(other) for other in waiting if self.could_spare(cand, other)
        )
        return spared > self.screen_cost_s()

    def could_spare(self, screened: CandidateState, plan: CandidateState) -> bool:
        """Whether ``plan`` would be pruned if ``screened`` measured what its prior says."""
        expected = _prior(screened).speedup
        return self._beyond_reach(_prior(plan), expected) or self._expected_slower(
            _prior(plan), expected
        )

    def scouts(
        self, cand: CandidateState, candidates: Sequence[CandidateState], leader: CandidateState
    ) -> bool:
        """Whether ``cand``, though its prior says it cannot win against ``leader``, is
        worth building for its validation: plans not yet built that share its rounding
        (:func:`declared_rounding`) and could win cost more to build, times the chance
        that ``cand`` fails (its prior's ``pass_rate``), than ``cand`` does. Failing far
        over its limits, it spares them all (:meth:`rejected`).

        On efficientnet_b0 and mobilenet_v2 (AVX2) ONNX Runtime's static int8 plan,
        expected at 1.94x behind a leader confirmed at 2.0-2.5x, was not built, and
        OpenVINO's static int8 plan, expected at 2.56x, was built in 4.9-8.0 s and failed
        validation (rel_l2 0.21-0.23 against 0.08), as ONNX Runtime's did where it was
        built (0.19, in 3.1-3.2 s)."""
        rounding = declared_rounding(cand)
        fails = 1.0 - _prior(cand).pass_rate
        if rounding is None or fails <= 0.0 or self.exhaustive:
            return False
        promise = _promise(leader)
        factor = leader_miss(leader) ** SHARED_MODEL_FACTOR
        low = confirmed(leader)
        spared = [
            other
            for other in candidates
            if other is not cand
            and not other.is_reference
            and other.plan is None
            and other.error is None
            and other.not_built is None
            and (other.status is None or other.status.availability.available)
            and declared_rounding(other) == rounding
            and not (low is not None and self._beyond_reach(_prior(other), low))
            and not self._expected_slower(_prior(other), promise, factor)
        ]
        spared_s = sum(self.expected_cost_s(other) for other in spared)
        own_s = self.expected_cost_s(cand)
        if fails * spared_s <= own_s:
            return False
        cand.built_to_test = (
            f"its rounding ({rounding}), shared by {', '.join(o.name for o in spared)}: "
            f"its failure ({fails:.0%} likely) would spare their builds (~{spared_s:.1f} s) "
            f"for its own (~{own_s:.1f} s)"
        )
        log.info("%s is built to test %s", cand.name, cand.built_to_test)
        return True

    def _beyond_reach(self, prior: Prior, leader_low: float) -> bool:
        """Whether a plan of this prior cannot win: its optimistic bound does not beat the
        leader's confirmed speedup (``leader_low``) by more than the indifference zone."""
        zone = self.run.policy.measurement.indifference_zone
        return self.run.policy.objective in PRUNED_OBJECTIVES and prior.high <= leader_low * zone

    def _expected_slower(self, prior: Prior, leader_speedup: float, factor: float = 1.0) -> bool:
        """Under the automatic budget only: whether a plan of this prior is expected to
        lose to a leader measured at ``leader_speedup``: its prior's speedup, read for this
        model (times ``factor``: :func:`leader_miss` to the power
        :data:`SHARED_MODEL_FACTOR`), times :data:`PRIOR_RESOLUTION` (at least the
        indifference zone), is no more. Only the prior's optimistic tail could win there,
        and the automatic budget is for a decision in about the time a quick pass takes:
        on the demo conv net (AVX2) a torchao compile took 4.1-8.4 s of decisions of
        11.0-13.4 s, expected at 1.50x against OpenVINO fp32 screened at
        1.36-1.49x, and lost (docs/selection.md, "Pruning")."""
        margin = max(self.run.policy.measurement.indifference_zone, PRIOR_RESOLUTION)
        return (
            self.auto
            and self.run.policy.objective in PRUNED_OBJECTIVES
            # A plan nothing is known of (a private provider's, with no prior) expects
            # nothing: it is built as before, when its turn comes.
            and prior.source != UNKNOWN_SOURCE
            and prior.speedup * factor * margin <= leader_speedup
        )

    def screen_before(
        self, index: int, order: Sequence[CandidateState], reference: ReferenceOutputs
    ) -> bool:
        """Before ``order[index]`` is built: screen the plan built earlier that could spare
        it if it measured what its prior says (the most promising such plan), when that
        could spare more build time than the screening costs. True when it screened one.

        Screening waits until a build it could spare is next: a plan screened right after
        its validation cost its rounds even where a more promising plan built after it
        spared the same builds (BertModel: eager bf16's screening, about 1 s of a 9 s
        decision, spared nothing that OpenVINO int8's did not)."""
        cand = order[index]
        if self.exhaustive or cand.is_reference:
            return False
        screeners = [
            built
            for built in order[:index]
            if built.alive
            and not built.is_reference
            and built.plan is not None
            and built.name not in self.screened
            and self.could_spare(built, cand)
        ]
        if not screeners:
            return False
        best = max(screeners, key=lambda built: _prior(built).speedup)
        if not self.worth_screening(best, order[index:]):
            return False
        self.screened.add(best.name)
        self.screen(best, order[0], reference)
        return True

    def screen_cost_s(self) -> float:
        """What one screening is expected to take (the reference and the plan)."""
        return 2 * SCREEN_CALLS_PER_CASE * self.round_call_s

    def screen(
        self, cand: CandidateState, reference_plan: CandidateState, reference: ReferenceOutputs
    ) -> None:
        """A few paired rounds of ``cand`` against the reference: its screened speedup.

        A plan that fails here is left to the race (which judges it with its error)."""
        assert cand.plan is not None and reference_plan.plan is not None
        measurement = self.run.policy.measurement
        cap = max(self.screen_cost_s() * 3, 0.5)
        if self.budget_s is not None:
            cap = min(cap, max(SCREEN_BUDGET_SHARE * self.budget_s, 0.5))
        policy = MeasurementPolicy(
            confidence=measurement.confidence,
            min_rounds=SCREEN_ROUNDS,
            max_rounds=SCREEN_ROUNDS,
            max_time_s=cap,
            warmup_max_calls=10,
            warmup_max_time_s=min(measurement.warmup_max_time_s, 0.5),
            warmup_leave_factor=None,
            timed_calls_per_burst=4,
            family_wise=False,
            drop_worse_than_leader=False,
            futility_confidence=None,
            bootstrap_resamples=0,
            record_page_faults=False,
            seed=measurement.seed,
            settle_allocator=measurement.settle_allocator,
            quiesce_max_s=measurement.quiesce_max_s,
        )
        calls = checked_calls((reference_plan, cand), reference)

        def screen() -> RaceResult:
            with reference.calling_context():
                return run_race(
                    calls,
                    weights=[case.weight for case in reference.cases],
                    baseline=reference_plan.name,
                    min_speedup=1.0,
                    policy=policy,
                    clock=self.run.clock,
                    synchronize={
                        c.name: self.run.synchronize(c.plan) for c in (reference_plan, cand)
                    },
                    should_continue=self.run.should_continue,
                    output_checks=output_checks(calls),
                    allocator_report=False,  # a screening's race is not reported
                )

        screening = PlanCall.of(screen)
        if screening.error is not None:
            log.info("screening %r raised %s", cand.name, screening.describe())
            return
        result = screening.value
        assert result is not None
        screened = result.candidate(cand.name)
        if screened.verdict == Verdict.FAILED:
            # NaN on a screening call (or any failure there) rejects the plan as a raced
            # call would: it never races on a speedup measured from wrong answers.
            self.run.reject(
                cand, StageError(Stage.MEASURE, f"screening: {screened.error or 'failed'}")
            )
            return
        measured = screened.speedup_vs_baseline
        if measured is not None and measured.low is not None and measured.point is not None:
            cand.screening = measured


def race_seconds(run: SelectionContext, floor_s: float = 0.0) -> float | None:
    """What the race may take of the time budget: what is left of it less what follows
    the race, never under :data:`MIN_RACE_SHARE` of it nor under ``floor_s`` (``None``:
    no budget)."""
    left = run.seconds_left()
    if left is None or run.deadline_ns is None or run.started_ns is None:
        return None
    budget_s = (run.deadline_ns - run.started_ns) / 1e9
    return max(left - FINISH_RESERVE_S, MIN_RACE_SHARE * budget_s, floor_s)


def race_within_budget(
    measurement: MeasurementPolicy, run: SelectionContext, floor_s: float = 0.0
) -> MeasurementPolicy:
    """``measurement`` with its race budget no longer than :func:`race_seconds`."""
    cap = race_seconds(run, floor_s)
    if cap is None:
        return measurement
    if measurement.max_time_s is not None:
        return attrs.evolve(measurement, max_time_s=min(measurement.max_time_s, cap))
    ceiling = min(measurement.auto_budget_max_s, cap)
    return attrs.evolve(
        measurement,
        auto_budget_min_s=min(measurement.auto_budget_min_s, ceiling),
        auto_budget_max_s=ceiling,
    )


def confirmed(cand: CandidateState) -> float | None:
    """The speedup ``cand`` is confirmed at: its screened lower bound (1 for the
    reference; ``None``: not screened)."""
    if cand.is_reference:
        return 1.0
    if cand.screening is None:
        return None
    return cand.screening.low


def leader_miss(leader: CandidateState) -> float:
    """How far the leader's screening landed from its prior on this model: ``screened
    point / prior speedup`` (the plans not yet built read their priors through it to the
    power :data:`SHARED_MODEL_FACTOR`); 1 when it was not screened or its prior is unknown
    (the reference, a private provider's plan with no prior)."""
    prior = _prior(leader)
    if (
        leader.is_reference
        or leader.screening is None
        or leader.screening.point is None
        or prior.source == UNKNOWN_SOURCE
    ):
        return 1.0
    return float(leader.screening.point / prior.speedup)


def _promise(cand: CandidateState) -> float:
    """What ``cand`` is expected to measure: its screened speedup, else its prior's."""
    if cand.screening is not None and cand.screening.point is not None:
        return cand.screening.point
    return _prior(cand).speedup


def _promise_text(cand: CandidateState) -> str:
    if cand.screening is not None and cand.screening.point is not None:
        return f"screened at {cand.screening.describe()}"
    prior = _prior(cand)
    return f"its prior: {prior.describe()}, {prior.source}"


def _prior(cand: CandidateState) -> Prior:
    return cand.prior if cand.prior is not None else unknown_prior()
