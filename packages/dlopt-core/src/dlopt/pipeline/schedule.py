"""Stage 3's order and its cut: which plans are built, in what order, and which are not.

Every plan has its prior (:mod:`dlopt.pipeline.plan_priors`). The reference is built first,
the others by expected gain per second of cost; where no prior speaks, one plan of each
family before a second of any (:meth:`Schedule.order`). Before each build
:meth:`Schedule.skip_reason` says whether the plan can still matter: not when its prior's
optimistic bound cannot beat the confirmed leader by more than the indifference zone
(under the automatic budget, not when its prior, read for this model through the
leader's miss, expects it no faster than the leader: :meth:`Schedule._expected_slower`),
nor when the time budget has no room for its build beside the race's reserve
(:class:`dlopt.pipeline.measure.RacePrice`). A validated plan is screened
(:meth:`Schedule.screen`) before a build it could spare, when what it measures could
spare more build time than it costs: that confirms a leader. A plan is not built when a
plan of its rounding (bf16, fp16, static int8) already failed validation here by far
(:meth:`Schedule.rejected`). Under a budget the user set, a build starts only if it fits
with :data:`FIRM_BUDGET_COST_MARGIN`; ``exhaustive=True`` builds every plan. The rules
and their numbers: docs/selection.md, "Decision time"."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

import attrs

from dlopt.contract.priors import Prior
from dlopt.errors import PlanCall
from dlopt.pipeline.measure import FINISH_RESERVE_S, RacePrice, race_seconds, screening_race
from dlopt.pipeline.plan_priors import (
    STATIC_INT8,
    confirmed,
    declared_quantization,
    declared_rounding,
    leader_miss,
    plan_family,
    prior_of,
    promise_of,
    promise_text,
    rounding_of,
)
from dlopt.pipeline.state import CandidateState, SelectionContext, StageError
from dlopt.plugins.first_party import is_first_party
from dlopt.selection.prior_table import UNKNOWN_SOURCE
from dlopt.validation import ReferenceOutputs
from dlopt.vocabulary import Objective, Stage, Verdict

log = logging.getLogger(__name__)

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
#: How many times its limit a plan's relative L2 error must be before the plans of its
#: rounding not yet built are taken to fail too: on the suite's ImageNet models each
#: compiled bf16 plan measured 0.75-1.03x eager bf16's error (docs/selection.md); a near
#: miss says little (another plan's rounding may land under the limit).
PRECISION_FAILURE_MARGIN = 2.0
#: How a reason for not building a plan whose precision failed here begins.
PRECISION_FAILED = "its precision"


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
    #: How many plans but the reference were built so far.
    challengers_built: int = 0
    #: Per family explored (:meth:`explores`), the plan that explored it.
    explored: dict[tuple[str, str, str | None], str] = attrs.field(factory=dict)

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
        ties); as given when exhaustive.

        Where no prior speaks (a plan whose prior is the unknown one: a mix the table has
        no row for, a private provider's plan), the order explores by family
        (:func:`plan_family`): the most promising plan of each such family comes before
        the second of any. With every prior unknown, gain per second is the cost alone,
        and the cheapest family's variants would take the whole budget: on an LSTM
        tagger (AVX2) dlopt-fx's FX rewrite and Inductor compile did, and ONNX Runtime
        int8, 3.9x faster than eager, was never built."""
        if self.exhaustive:
            return list(candidates)
        position = {id(c): i for i, c in enumerate(candidates)}
        by_value = sorted(
            candidates,
            key=lambda c: (not c.is_reference, -prior_of(c).value, position[id(c)]),
        )
        turn: dict[int, int] = {}
        taken: Counter[tuple[str, str, str | None]] = Counter()
        for cand in by_value:
            if cand.is_reference or prior_of(cand).source != UNKNOWN_SOURCE:
                turn[id(cand)] = 0
                continue
            family = plan_family(cand)
            turn[id(cand)] = taken[family]
            taken[family] += 1
        return sorted(by_value, key=lambda c: (not c.is_reference, turn[id(c)]))

    def promise(self, cand: CandidateState) -> float:
        """What ``cand`` is expected to measure (:func:`promise_of`: where its prior is
        unknown, what its first calls ran against the reference's)."""
        return promise_of(cand, self.case_call_s)

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
        self.challengers_built += 1
        if cand.prior.source == UNKNOWN_SOURCE:
            # Its cost was a placeholder, not a prediction: what it took says nothing of
            # how far this machine is from the priors (an FX rewrite's 0.03 s against the
            # placeholder's 3 s scaled an LSTM's Inductor compile down to 1 s; it took 4.3).
            return
        self.costs.append((cand.prior.cost_s + import_s, cand.setup_s + sum(cand.first_calls_s)))

    def rejected(self, cand: CandidateState) -> None:
        """Note ``cand``'s validation failure when it condemns its rounding
        (:func:`rounding_of`): its relative L2 error on some output was at least
        :data:`PRECISION_FAILURE_MARGIN` times its limit."""
        precision = cand.plan.precision if cand.plan is not None else None
        rounding = rounding_of(precision, declared_quantization(cand))
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
        :meth:`cost_scale` (never below the unknown prior's placeholder cost), plus its
        SDK's import when no plan of its distribution was built yet."""
        prior = prior_of(cand)
        scale = self.cost_scale()
        if prior.source == UNKNOWN_SOURCE:
            scale = max(scale, 1.0)  # a placeholder cost is never read as a cheaper build
        return prior.cost_s * scale + self._import_s(cand)

    def _import_s(self, cand: CandidateState) -> float:
        return 0.0 if cand.info.plugin in self.imported else FIRST_OF_DISTRIBUTION_S

    @property
    def price(self) -> RacePrice:
        """What the race is expected to cost on this model (:class:`RacePrice`)."""
        return RacePrice(tuple(self.case_call_s), self.run.policy.measurement)

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
        prior = prior_of(cand)
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
            if self._expected_slower(prior, self.promise(leader), factor):
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
        if self.explores(cand):
            return None
        left = self.run.seconds_left()
        if left is None:
            return None
        # Until one challenger's build has shown what builds of this model take here,
        # the priors' costs (medians over models of every size) are not trusted to skip.
        need = self.expected_cost_s(cand) if self.challengers_built else 0.0
        margin = FIRM_BUDGET_COST_MARGIN if self.firm else 1.0
        reserve = self.race_reserve_s(cand, candidates)
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

    def race_reserve_s(self, cand: CandidateState, candidates: Sequence[CandidateState]) -> float:
        """What the race needs beside ``cand``'s build: never spent on building it.

        While no challenger in the race promises as much as ``cand``, the least race that
        can confirm it (the race is given that much in any case, and leaves the less
        promising plans out to make room: :meth:`cut_the_race`). After that, the race of
        ``cand``, the reference and the plans built so far that promise at least as much,
        so cheap plans built early do not crowd out a better one. Priced as the full race
        of two plans, a weak native plan validated first kept every compile out of a 20 s
        budget on resnet50 (AVX2, 89 ms a call): 14.4 s of race beside an OpenVINO int8
        build of 9 s, with 18.4 s left."""
        promise = self.promise(cand)
        ahead = sum(
            1 for c in candidates if c.alive and not c.is_reference and self.promise(c) >= promise
        )
        if ahead:
            return self.price.race_reserve_s(ahead + 2)
        return FINISH_RESERVE_S + self.price.race_floor_s(prior_of(cand).low)

    def build_deadline_ns(
        self, cand: CandidateState, candidates: Sequence[CandidateState]
    ) -> int | None:
        """When ``cand``'s build and first calls are abandoned (on the run's clock): the
        time budget's deadline less the race's reserve (:meth:`race_reserve_s`). ``None``
        where nothing is abandoned: no budget, ``exhaustive``, the reference, or a plan
        explored whatever the budget has left (:meth:`explores`)."""
        if (
            self.exhaustive
            or self.run.deadline_ns is None
            or cand.is_reference
            or cand.name in self.explored.values()
        ):
            return None
        return self.run.deadline_ns - int(self.race_reserve_s(cand, candidates) * 1e9)

    def explores(self, cand: CandidateState) -> bool:
        """Whether ``cand`` is built and raced whatever the automatic budget has left: a
        third-party plan (not dlopt's own distributions: no table row speaks for it) with
        no prior at all, the first of its family, where a plan cache keeps what it
        measures. Its record is then its prior on this machine class and mix kind (the
        user's own evidence), so it is explored once, not left unbuilt for want of time
        in every selection: a plan never built never gets a record, nor a prior."""
        if (
            not self.auto
            or self.run.policy.plan_cache_dir is None
            or cand.is_reference
            or prior_of(cand).source != UNKNOWN_SOURCE
            or is_first_party(cand.info.distribution)
        ):
            return False
        return self.explored.setdefault(plan_family(cand), cand.name) == cand.name

    def cut_the_race(self, candidates: Sequence[CandidateState]) -> list[CandidateState]:
        """Keep out of the race the plans its time has no room for, least promising first
        (by screened speedup, else by prior): a race of more plans than its seconds can
        run :attr:`MeasurementPolicy.min_rounds <dlopt.measurement.MeasurementPolicy>`
        rounds of decides nothing, and a confirmed leader would then lose to the
        reference. The reference and the most promising challenger always race. Each plan
        kept out gets ``not_raced`` (why); the plans kept out are returned."""
        if self.run.policy.objective not in PRUNED_OBJECTIVES:
            return []
        race_s = race_seconds(self.run, self.price.race_floor_s())  # None: no budget (exhaustive)
        alive = [c for c in candidates if c.alive]
        if race_s is None or len(alive) <= 2:
            return []
        room = 2
        while (
            room < len(alive) and self.price.race_reserve_s(room + 1) - FINISH_RESERVE_S <= race_s
        ):
            room += 1
        if room >= len(alive):
            return []
        reference, challengers = alive[0], alive[1:]
        ranked = sorted(challengers, key=lambda c: -self.promise(c))
        # An explored plan races beside the seats (see explores): its record is the point.
        explored = set(self.explored.values())
        left_out = [c for c in ranked[room - 1 :] if c.name not in explored]
        raced = ", ".join(c.name for c in [reference, *ranked[: room - 1]])
        extra = [c.name for c in ranked[room - 1 :] if c.name in explored]
        if extra:
            raced += f", and explored beside them: {', '.join(extra)}"
        for cand in left_out:
            cand.not_raced = (
                f"the race had {race_s:.1f} s left of the time budget, room for {room} plans "
                f"({raced}); {cand.name} was less promising "
                f"({promise_text(cand, self.case_call_s)})"
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
        expected = prior_of(screened).speedup
        return self._beyond_reach(prior_of(plan), expected) or self._expected_slower(
            prior_of(plan), expected
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
        fails = 1.0 - prior_of(cand).pass_rate
        if rounding is None or fails <= 0.0 or self.exhaustive:
            return False
        promise = self.promise(leader)
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
            and not (low is not None and self._beyond_reach(prior_of(other), low))
            and not self._expected_slower(prior_of(other), promise, factor)
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
        best = max(screeners, key=lambda built: prior_of(built).speedup)
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
        cap = max(self.screen_cost_s() * 3, 0.5)
        if self.budget_s is not None:
            cap = min(cap, max(SCREEN_BUDGET_SHARE * self.budget_s, 0.5))
        screening = PlanCall.of(
            lambda: screening_race(cand, reference_plan, reference, self.run, cap, SCREEN_ROUNDS)
        )
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
