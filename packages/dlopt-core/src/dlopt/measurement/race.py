"""The race: interleaved rounds of settled bursts, paired comparisons, sequential stopping.

``run_race`` wires the scheduler (which runs and times calls) to the sequential rule
(which decides): gates against the baseline, the leader ranked on every round,
elimination within an indifference zone, and a budget that fits the model. See
docs/measurement.md for the protocol, the statistics and the figures behind the defaults.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import attrs
from attrs import define, field, frozen

from dlopt.errors import ConfigurationError, PlanCall
from dlopt.measurement.allocator import AllocatorControl, GlibcAllocator, advice, minor_faults
from dlopt.measurement.clock import Clock, CpuTimeSource, MonotonicClock, ProcessCpuTime
from dlopt.measurement.results import (
    AllocatorRegime,
    CandidateMeasurement,
    OpenComparison,
    RaceResult,
)
from dlopt.measurement.scheduler import CaseRecord, PlanRecord, Scheduler
from dlopt.measurement.sequential import (
    KnownSpread,
    PairStats,
    PooledVariance,
    boundary,
    look_confidence,
    pair_stats,
    pooled_variance,
    prepare_boundary,
    rounds_to_reach,
    scores_of,
    with_known_spread,
)
from dlopt.measurement.stats import (
    RatioInterval,
    bootstrap_mean_interval,
    ratio_from_log,
    summarize_latency,
    t_interval,
)
from dlopt.platform.serialization import finite_or_none
from dlopt.settings.measurement import MeasurementPolicy
from dlopt.vocabulary import Gate, StopReason, Verdict

#: What waits for queued device work: one callable for all plans, or one per plan name.
Synchronize = Callable[[], None] | Mapping[str, Callable[[], None] | None] | None
#: Inspects the outputs of one timed block's calls; raises to fail the plan.
OutputCheck = Callable[[Sequence[object]], None]

#: Calls of the baseline timed before the allocator is settled, per case.
_ALLOCATOR_PROBE_CALLS = 3


@define
class _Standing:
    """Where one challenger stands in the sequential rule."""

    gate: Gate = Gate.OPEN
    in_rounds: bool = True
    resolved_at: int | None = None
    dropped_at: int | None = None
    gate_low: float = -math.inf  # running intersection of the looks' intervals (log)
    gate_high: float = math.inf
    critical: float | None = None  # boundary of the latest look
    df: float | None = None
    note: str = ""
    # Who it was eliminated against and the interval (log, plan over that plan) that did it.
    eliminated_by: str | None = None
    elimination: RatioInterval | None = None


@frozen
class RaceEntrants:
    """What races: per plan, one zero-argument callable per workload case (inputs bound,
    in the order of ``weights``); the baseline every challenger is paired with, the bar it
    must clear, the cases' names and the native plans that may replace the baseline."""

    candidates: Mapping[str, Sequence[Callable[[], object]]]
    weights: Sequence[float]
    baseline: str
    min_speedup: float
    case_names: Sequence[str] | None = None
    natives: Sequence[str] = ()
    #: Per plan, one callable per case that inspects the outputs of every timed call
    #: (after the timer stopped) and raises to fail the plan; absent: not inspected.
    output_checks: Mapping[str, Sequence[OutputCheck]] = field(factory=dict)


@frozen
class RaceInstruments:
    """How the race measures: its policy and clock, what waits for a plan's queued work
    (one callable, or one per plan), the CPU-time source of the quiet-wait and the heap
    allocator's control (``None``: none)."""

    policy: MeasurementPolicy
    clock: Clock
    synchronize: Synchronize = None
    cpu: CpuTimeSource | None = None
    allocator: AllocatorControl | None = None


class _Race:
    def __init__(self, entrants: RaceEntrants, instruments: RaceInstruments) -> None:
        candidates, weights = entrants.candidates, entrants.weights
        baseline, min_speedup = entrants.baseline, entrants.min_speedup
        case_names, natives = entrants.case_names, entrants.natives
        policy, clock, synchronize = instruments.policy, instruments.clock, instruments.synchronize
        cpu, allocator = instruments.cpu, instruments.allocator
        _validate(candidates, weights, baseline, min_speedup, case_names, natives)
        total = float(sum(weights))
        self.weights = tuple(float(w) / total for w in weights)
        self.n_cases = len(self.weights)
        self.case_names = (
            tuple(case_names)
            if case_names is not None
            else tuple(f"case{i}" for i in range(self.n_cases))
        )
        self.baseline_name = baseline
        #: Keep timing the baseline when no challenger is in the rounds (``run_race``'s
        #: ``measure_alone``).
        self.measure_alone = False
        #: Count the allocator's page faults before settling it (``run_race``'s
        #: ``allocator_report``).
        self.allocator_report = True
        #: How long the rounds may run to reach ``min_rounds`` (``run_race``'s
        #: ``min_rounds_ceiling_s``).
        self.min_rounds_ceiling_s: float | None = None
        #: Spreads measured before, by challenger (``run_race``'s ``known_spreads``).
        self.known_spreads: Mapping[str, KnownSpread] = {}
        self.min_speedup = float(min_speedup)
        self.threshold = math.log(self.min_speedup)
        self.epsilon = math.log(policy.indifference_zone)
        self.policy = policy
        self.clock = clock
        self.allocator = allocator
        self.seed = (
            policy.seed if policy.seed is not None else random.SystemRandom().randrange(2**32)
        )
        record_faults = policy.record_page_faults and minor_faults() is not None
        self.sched = Scheduler(
            policy,
            clock,
            cpu if policy.quiesce_max_s > 0 else None,
            random.Random(self.seed),
            record_faults,
        )
        syncs = (
            synchronize
            if isinstance(synchronize, Mapping)
            else dict.fromkeys(candidates, synchronize)
        )

        def case_records(name: str, fns: Sequence[Callable[[], object]]) -> list[CaseRecord]:
            given = entrants.output_checks.get(name)
            checks: Sequence[OutputCheck | None] = given or [None] * len(fns)
            faults = 0 if record_faults else None
            return [CaseRecord(fn, check, page_faults=faults) for fn, check in zip(fns, checks)]

        self.plans = [
            PlanRecord(name, name == baseline, syncs.get(name), case_records(name, fns))
            for name, fns in candidates.items()
        ]
        self.sched.plans_by_name = {p.name: p for p in self.plans}
        self.base = next(p for p in self.plans if p.is_baseline)
        self.standing = {p.name: _Standing() for p in self.plans}
        self.natives = tuple(natives)
        self.rounds = 0
        self.round_times_s: list[float] = []
        self.stop_reason = StopReason.MAX_ROUNDS
        self.start_ns = clock.now_ns()
        self.warmup_s = 0.0
        self.budget_s = policy.max_time_s if policy.max_time_s is not None else math.inf
        self.leader: str | None = None
        self.regret_bound: float | None = None
        self.open: tuple[OpenComparison, ...] = ()
        self.allocator_regime: AllocatorRegime | None = None
        self.pooled: PooledVariance | None = None  # of the latest look
        self._scores: tuple[int, dict[str, dict[int, float]]] | None = None

    # -- state -------------------------------------------------------------------------
    def elapsed_s(self) -> float:
        return (self.clock.now_ns() - self.start_ns) / 1e9

    def challengers(self) -> list[PlanRecord]:
        return [p for p in self.plans if not p.is_baseline and p.failed is None]

    def in_rounds(self) -> list[PlanRecord]:
        """Plans the next round times: every challenger not yet decided against or
        eliminated, and the baseline while a gate is open or a native plan is still in
        the rounds (the best native, by its point against the baseline, may become the
        baseline: that point needs the rounds too)."""
        out = [p for p in self.challengers() if self.standing[p.name].in_rounds]
        if (
            self.gates_open()
            or any(p.name in self.natives for p in out)
            or (self.measure_alone and not out)
        ):
            out.insert(0, self.base)
        return out

    def gates_open(self) -> bool:
        return any(
            self.standing[p.name].gate is Gate.OPEN and self.standing[p.name].in_rounds
            for p in self.challengers()
        )

    def contenders(self) -> list[PlanRecord]:
        """Challengers still in the running for the pick: gate open or passed, in rounds."""
        return [
            p
            for p in self.challengers()
            if self.standing[p.name].in_rounds
            and self.standing[p.name].gate in (Gate.OPEN, Gate.FASTER)
        ]

    def family_size(self) -> int:
        """Comparisons that could switch the baseline: each challenger against the
        reference and against every native plan that may replace it (Bonferroni)."""
        if not self.policy.family_wise:
            return 1
        n = len(self.challengers())
        return max(1, n * (1 + len(self.natives)))

    def critical(self, df: float) -> float:
        p = self.policy
        return boundary(p.alpha / self.family_size(), p.min_rounds, p.max_rounds, df)

    def critical_at(self, pair: PairStats, rounds: int) -> float:
        """The boundary ``pair`` would face after ``rounds`` rounds: its degrees of
        freedom grow in proportion (per pair ``n - 1``; pooled ``(n - 1)(P - 1)``)."""
        per_round = pair.df / max(pair.rounds - 1, 1)
        return self.critical(max(pair.df, per_round * (rounds - 1)))

    def _fail(self, plan: PlanRecord, exc: BaseException, stage: str) -> None:
        if plan.is_baseline:
            raise exc
        plan.failed = f"{stage}: {type(exc).__name__}: {exc}"
        self.standing[plan.name].in_rounds = False

    # -- before the rounds -------------------------------------------------------------
    def settle_allocator(self) -> None:
        """Count the baseline's page faults per call in the current regime, then settle
        the allocator for the race (when the policy and the platform allow; without
        ``allocator_report`` only settle it: nothing is counted or recorded)."""
        if self.allocator is None:
            return
        if not self.allocator_report:
            self.allocator.settle()
            return
        before_faults: list[float] = []
        before_s: list[float] = []
        for case in self.base.cases:
            f0 = minor_faults()
            for _ in range(_ALLOCATOR_PROBE_CALLS):
                before_s.append(self.sched.timed_block(self.base, case, 1))
            f1 = minor_faults()
            if f0 is not None and f1 is not None:
                before_faults.append((f1 - f0) / _ALLOCATOR_PROBE_CALLS)
        method = self.allocator.settle()
        self.allocator_regime = AllocatorRegime(
            settled=method is not None,
            method=method or "not settled: no glibc mallopt on this platform",
            faults_per_call_before=finite_or_none(max(before_faults)) if before_faults else None,
            latency_before_ms=finite_or_none(statistics.median(before_s) * 1e3),
        )

    def warm_all(self, should_continue: Callable[[], bool] | None = None) -> bool:
        """Warm every plan and case; ``False`` when ``should_continue`` stopped it."""
        p = self.policy
        share_of = p.max_time_s if p.max_time_s is not None else p.auto_budget_min_s
        cap = p.warmup_budget_share * share_of / max(1, len(self.plans) * self.n_cases)
        turns = [(plan, i) for plan in self.plans for i in range(self.n_cases)]
        self.sched.rng.shuffle(turns)
        start = self.clock.now_ns()
        for plan, i in turns:
            if plan.failed is not None:
                continue
            if should_continue is not None and not should_continue():
                self.warmup_s = (self.clock.now_ns() - start) / 1e9
                return False
            failure = PlanCall.of(partial(self.sched.warmup, plan, plan.cases[i], cap)).error
            if failure is not None:
                self._fail(plan, failure, f"warm-up of case {self.case_names[i]!r}")
        self.warmup_s = (self.clock.now_ns() - start) / 1e9
        regime = self.allocator_regime
        if regime is not None:
            after = [
                c.warmup_faults / c.warmup_calls
                for c in self.base.cases
                if c.warmup_faults is not None and c.warmup_calls
            ]
            self.allocator_regime = attrs.evolve(
                regime,
                faults_per_call_after=finite_or_none(max(after)) if after else None,
                latency_after_ms=finite_or_none(
                    statistics.median(c.reference_s for c in self.base.cases) * 1e3
                ),
                advice=advice(self.base.name, regime.faults_per_call_before, regime.settled),
            )
        return True

    def leave_at_warmup(self) -> None:
        """Send hopeless challengers out before the rounds (``warmup_leave_factor``).

        A challenger leaves when even its fastest warm-up call, traffic-weighted over the
        cases, is slower than the factor times the baseline's slowest settled warm-up call.
        Preemption only ever adds time, so the plan's true cost is at least its fastest
        call and the baseline's at most about its slowest settled one: no noise that
        leaves a plan within the factor of the truth can make such a plan clear the gate.
        """
        factor = self.policy.warmup_leave_factor
        if factor is None:
            return
        factor *= max(1.0, 1.0 / self.min_speedup)
        base_worst = math.fsum(
            w * c.warmup_settled_slowest_s for w, c in zip(self.weights, self.base.cases)
        )
        if not base_worst > 0:
            return
        for plan in self.challengers():
            st = self.standing[plan.name]
            if plan.name in self.natives or not st.in_rounds:
                continue
            if any(math.isinf(c.warmup_fastest_s) for c in plan.cases):
                continue  # one warm-up call of some case: no evidence beyond a one-off cost
            best = math.fsum(w * c.warmup_fastest_s for w, c in zip(self.weights, plan.cases))
            if best > factor * base_worst:
                st.in_rounds, st.dropped_at = False, 0
                st.eliminated_by = self.base.name
                st.note = (
                    f"left at warm-up: its fastest warm-up call ({best * 1e3:.3g} ms, "
                    f"traffic-weighted) is {best / base_worst:.0f}x the baseline's slowest "
                    f"settled one ({base_worst * 1e3:.3g} ms), beyond the "
                    f"{factor:g}x warm-up rule: it cannot clear min_speedup"
                )

    def scale_budget(self, first_round_s: float) -> None:
        """With no fixed ``max_time_s``: warm-up plus ``auto_budget_rounds`` rounds at the
        first round's cost, between the floor and the ceiling (``min_rounds``, when more,
        are kept covered by :meth:`keep_budget_for_min_rounds`)."""
        p = self.policy
        if p.max_time_s is not None:
            return
        wanted = self.elapsed_s() + (p.auto_budget_rounds - 1) * first_round_s
        self.budget_s = min(p.auto_budget_max_s, max(p.auto_budget_min_s, wanted))

    def keep_budget_for_min_rounds(self) -> None:
        """Keep the budget wide enough for ``min_rounds`` at the slower of the rounds' mean
        cost and the last round's (the first round, which sized it, can be cheaper than
        those after it), never past :attr:`min_rounds_ceiling_s` (``None``: an automatic
        budget's ceiling; a fixed ``max_time_s`` is then kept)."""
        p = self.policy
        if self.rounds >= p.min_rounds or not self.round_times_s:
            return
        ceiling = self.min_rounds_ceiling_s
        if ceiling is None:
            if p.max_time_s is not None:
                return
            ceiling = p.auto_budget_max_s
        per_round = max(sum(self.round_times_s) / len(self.round_times_s), self.round_times_s[-1])
        wanted = self.elapsed_s() + (p.min_rounds - self.rounds) * per_round
        self.budget_s = max(self.budget_s, min(ceiling, wanted))

    # -- rounds ------------------------------------------------------------------------
    def run_round(self) -> None:
        r = self.rounds + 1
        plans = self.in_rounds()
        for j, i in self.sched.round_order(plans, self.n_cases):
            plan = plans[j]
            if plan.failed is not None:
                continue  # failed earlier in this round
            failure = PlanCall.of(partial(self.sched.burst, plan, plan.cases[i], r)).error
            if failure is not None:
                self._fail(plan, failure, f"round {r}, case {self.case_names[i]!r}")
        self.rounds = r

    def scores(self) -> dict[str, dict[int, float]]:
        """Every plan's score per round; computed once per round (the rule asks often)."""
        if self._scores is None or self._scores[0] != self.rounds:
            self._scores = (
                self.rounds,
                {
                    plan.name: scores_of([c.statistic for c in plan.cases], self.weights)
                    for plan in self.plans
                },
            )
        return self._scores[1]

    def _pair(
        self,
        scores: Mapping[str, Mapping[int, float]],
        a: str,
        b: str,
        pooled: PooledVariance | None,
    ) -> PairStats | None:
        use = pooled if pooled is not None and {a, b} <= pooled.plans else None
        return pair_stats(scores[a], scores[b], use)

    def look(self) -> None:
        """Gates, the leader, elimination and the stop rule after a round."""
        p = self.policy
        if self.rounds < p.min_rounds:
            return
        scores = self.scores()
        block = self.in_rounds()
        pooled = (
            pooled_variance({q.name: scores[q.name] for q in block}) if p.pool_variance else None
        )
        self.pooled = pooled
        base = self.base.name
        for plan in self.challengers():
            st = self.standing[plan.name]
            if st.gate not in (Gate.OPEN, Gate.FASTER) or not st.in_rounds:
                continue
            if base not in (q.name for q in block):
                continue  # the baseline left the rounds: nothing new to pair with
            pair = self._pair(scores, base, plan.name, pooled)
            pair = with_known_spread(pair, self.known_spreads.get(plan.name))
            if pair is None:
                continue
            st.critical, st.df = self.critical(pair.df), pair.df
            _, low, high = pair.interval(st.critical)
            if max(st.gate_low, low) > min(st.gate_high, high):
                # The looks disagree beyond their boundary: trust the latest one.
                st.gate_low, st.gate_high = low, high
            else:
                st.gate_low, st.gate_high = max(st.gate_low, low), min(st.gate_high, high)
            if st.gate is Gate.FASTER:
                continue  # the verdict stands; its interval keeps narrowing with the rounds
            if st.gate_low >= self.threshold:
                st.gate, st.resolved_at = Gate.FASTER, self.rounds
            elif st.gate_high < self.threshold:
                st.gate, st.resolved_at, st.in_rounds = Gate.NOT_FASTER, self.rounds, False
            elif p.futility_confidence is not None and self._futile(pair):
                st.gate, st.resolved_at, st.in_rounds = Gate.FUTILE, self.rounds, False
                st.note = (
                    f"stopped at round {self.rounds} for futility: even the upper end of its "
                    f"{p.futility_confidence:.0%} interval could not clear min_speedup within "
                    f"the budget (about {self._final_rounds()} rounds) at the spread seen so far"
                )
        self._rank_and_eliminate(scores, pooled)

    def _futile(self, pair: PairStats) -> bool:
        """Non-binding futility: the optimistic end of the pair's interval at the
        futility level (same boundary shape, so a true gain is stopped at most with that
        probability over all looks), narrowed by what the rounds the budget still allows
        could add, misses the threshold. Stopping can only remove "faster" verdicts, so
        the switch error stays controlled."""
        p = self.policy
        assert p.futility_confidence is not None
        level = 1.0 - p.futility_confidence
        optimistic = pair.mean + boundary(level, p.min_rounds, p.max_rounds, pair.df) * pair.se
        final = max(self._final_rounds(), pair.rounds)
        reach = self.critical_at(pair, final) * pair.sd / math.sqrt(final)
        return optimistic - reach < self.threshold

    def _rank_and_eliminate(
        self, scores: Mapping[str, Mapping[int, float]], pooled: PooledVariance | None
    ) -> None:
        contenders = self.contenders()
        if not contenders:
            self.leader = None
            return
        common = set.intersection(*(set(scores[c.name]) for c in contenders))
        if not common:
            return

        def mean_score(plan: PlanRecord) -> float:
            return math.fsum(scores[plan.name][r] for r in common) / len(common)

        leader = min(contenders, key=mean_score)
        self.leader = leader.name
        ahead = self._pair(scores, self.base.name, leader.name, None)
        if not self.policy.drop_worse_than_leader or ahead is None or ahead.mean <= 0:
            return  # no challenger ahead of the baseline: nothing to eliminate against
        for plan in contenders:
            if plan is leader or plan.name in self.natives:
                # A native plan may become the baseline after the race: every challenger
                # is then judged against it on the rounds both ran, so it stays in them.
                continue
            pair = self._pair(scores, leader.name, plan.name, pooled)
            if pair is None:
                continue
            # log(cost_leader / cost_plan): the plan's log speedup over the leader.
            _, _, high = pair.interval(self.critical(pair.df))
            if high < -self.epsilon:
                st = self.standing[plan.name]
                st.in_rounds, st.dropped_at = False, self.rounds
                st.eliminated_by = leader.name
                st.elimination = ratio_from_log(
                    pair.interval(self.critical(pair.df)),
                    confidence=self.policy.confidence,
                    method=_ELIMINATION_METHOD if pair.pooled else _ELIMINATION_METHOD_OWN,
                    rounds=pair.rounds,
                    per_look_confidence=look_confidence(self.critical(pair.df), pair.df),
                )
                why = (
                    f"eliminated at round {self.rounds}: slower than {leader.name!r} by more "
                    f"than the {self.policy.indifference_zone:g}x indifference zone"
                )
                st.note = f"{st.note}; {why}" if st.note else why

    def stop(self) -> StopReason | None:
        """Why the race should stop now, or ``None`` to run another round."""
        if self.rounds < self.policy.min_rounds and self.contenders():
            return None
        contenders = self.contenders()
        leader = self.standing.get(self.leader or "")
        natives_open = self.native_gates_open()
        if (
            self.leader is not None
            and leader is not None
            and leader.gate is Gate.FASTER
            and not natives_open
        ):
            scores = self.scores()
            final = self._final_rounds()
            worst = 0.0
            still_open = reachable = False
            for plan in contenders:
                if plan.name == self.leader:
                    continue
                pair = self._pair(scores, self.leader, plan.name, self.pooled)
                if pair is None:
                    return None
                # The plan's log speedup over the leader: open while it may exceed epsilon.
                crit = self.critical(pair.df)
                high = pair.interval(crit)[2]
                worst = max(worst, high)
                if high > self.epsilon:
                    still_open = True
                    # Reachable if a plausible truth (one standard error below the mean:
                    # the ranking at a few rounds is itself uncertain) would let the bound
                    # fall to epsilon by the last round the budget allows.
                    last = max(final, pair.rounds)
                    projected = (
                        pair.mean
                        - pair.se
                        + self.critical_at(pair, last) * pair.sd / math.sqrt(last)
                    )
                    reachable = reachable or (final > pair.rounds and projected <= self.epsilon)
            self.regret_bound = finite_or_none(math.exp(worst))
            if not still_open:
                return StopReason.RESOLVED
            if not reachable and not self.gates_open():
                # Nothing the budget could still settle: not the leader's pairs, and no
                # gate (open gates either resolve or stop for futility first).
                return StopReason.INDIFFERENCE_FUTILITY
            return None
        if contenders and (self.gates_open() or natives_open):
            return None
        gates = {self.standing[p.name].gate for p in self.challengers()}
        if not self.challengers():
            return StopReason.NO_CHALLENGERS
        if Gate.FUTILE in gates:
            return StopReason.FUTILITY
        return StopReason.RESOLVED

    def native_gates_open(self) -> list[str]:
        """Native plans that passed their own gate (one may become the baseline) against
        which the leader has not yet cleared ``min_speedup``: the selection will judge it
        against them, so the race is not done."""
        if self.leader is None or self.leader in self.natives:
            return []
        scores = self.scores()
        out = []
        for name in self.natives:
            if self.standing[name].gate is not Gate.FASTER:
                continue
            pair = self._pair(scores, name, self.leader, self.pooled)
            if pair is None or pair.interval(self.critical(pair.df))[1] < self.threshold:
                out.append(name)
        return out

    def _final_rounds(self) -> int:
        """The last round the budget allows: ``max_rounds``, or fewer if time runs out."""
        p = self.policy
        final = p.max_rounds
        if self.round_times_s and math.isfinite(self.budget_s):
            per_round = statistics.median(self.round_times_s[-5:])
            left = self.budget_s - self.elapsed_s()
            if per_round > 0:
                final = min(final, self.rounds + max(0, math.floor(left / per_round)))
        return max(final, self.rounds)

    # -- when the budget ends ----------------------------------------------------------
    def open_comparisons(self) -> tuple[OpenComparison, ...]:
        """Comparisons still open, with the rounds and budget that would close them."""
        scores = self.scores()
        per_round = statistics.median(self.round_times_s[-5:]) if self.round_times_s else 0.0
        out = []

        def need(pair: PairStats, margin: float) -> tuple[int | None, float | None]:
            rounds = rounds_to_reach(pair.sd, margin, self.critical_at(pair, self._final_rounds()))
            if not math.isfinite(rounds):
                return None, None
            n = max(math.ceil(rounds), pair.rounds + 1)
            return n, finite_or_none(self.elapsed_s() + (n - self.rounds) * per_round)

        for plan in self.challengers():
            st = self.standing[plan.name]
            if st.gate is not Gate.OPEN or not st.in_rounds:
                continue
            pair = self._pair(scores, self.base.name, plan.name, self.pooled)
            if pair is None:
                # Under two rounds there is no spread to size the rest by, however large
                # the effect: what decides it is the race's least rounds, not "no budget".
                done = len(set(scores[self.base.name]) & set(scores[plan.name]))
                least = max(self.policy.min_rounds, 2, done + 1)
                priced = (
                    finite_or_none(self.elapsed_s() + (least - self.rounds) * per_round)
                    if per_round > 0
                    else None
                )
                out.append(OpenComparison(plan.name, self.base.name, "gate", done, least, priced))
                continue
            n, budget = need(pair, abs(pair.mean - self.threshold))
            out.append(OpenComparison(plan.name, self.base.name, "gate", pair.rounds, n, budget))
        for name in self.native_gates_open():
            assert self.leader is not None
            pair = self._pair(scores, name, self.leader, self.pooled)
            if pair is None:
                continue
            n, budget = need(pair, abs(pair.mean - self.threshold))
            out.append(OpenComparison(self.leader, name, "gate", pair.rounds, n, budget))
        if self.leader is not None:
            for plan in self.contenders():
                if plan.name == self.leader:
                    continue
                pair = self._pair(scores, self.leader, plan.name, self.pooled)
                if pair is None:
                    continue
                if pair.interval(self.critical(pair.df))[2] <= self.epsilon:
                    continue
                n, budget = need(pair, self.epsilon - pair.mean)
                out.append(OpenComparison(plan.name, self.leader, "leader", pair.rounds, n, budget))
        return tuple(out)

    # -- results -----------------------------------------------------------------------
    def result(self, final: bool) -> RaceResult:
        p = self.policy
        elapsed = max(0.0, self.elapsed_s())  # the race's time, not this summary's
        scores = self.scores()
        out = [self._measurement(plan, scores, final) for plan in self.plans]
        timed = sum(c.timed_calls for plan in self.plans for c in plan.cases)
        untimed = sum(c.untimed_calls + c.warmup_calls for plan in self.plans for c in plan.cases)
        slowest = max(out, key=lambda c: c.longest_call_s, default=None)
        return RaceResult(
            baseline=self.baseline_name,
            min_speedup=self.min_speedup,
            confidence=p.confidence,
            seed=self.seed,
            rounds=self.rounds,
            stop_reason=StopReason(self.stop_reason),
            total_time_s=elapsed,
            timed_calls=timed,
            untimed_calls=untimed,
            longest_call_s=slowest.longest_call_s if slowest else None,
            longest_call_plan=slowest.name if slowest else None,
            case_names=self.case_names,
            weights=self.weights,
            candidates=tuple(out),
            policy=p,
            final=final,
            quiet_wait_s=finite_or_none(math.fsum(q.quiet_wait_s for q in self.plans)) or 0.0,
            budget_s=finite_or_none(self.budget_s) or 0.0,
            warmup_time_s=self.warmup_s,
            family_size=self.family_size(),
            leader=self.leader,
            regret_bound=self.regret_bound,
            open_comparisons=self.open if final else (),
            allocator=self.allocator_regime,
            pooled_plans=tuple(sorted(self.pooled.plans)) if self.pooled else (),
            pooled_rounds=self.pooled.rounds if self.pooled else (),
            pooled_variance=finite_or_none(self.pooled.variance) if self.pooled else None,
            pooled_df=self.pooled.df if self.pooled else None,
        )

    def _measurement(
        self, plan: PlanRecord, scores: Mapping[str, Mapping[int, float]], final: bool
    ) -> CandidateMeasurement:
        p = self.policy
        st = self.standing[plan.name]
        cases = tuple(
            summarize_latency(
                case=self.case_names[i],
                samples_s=c.samples,
                burst_means_s=[c.burst_mean[r] for r in sorted(c.burst_mean)],
                statistics_s=[c.statistic[r] for r in sorted(c.statistic)],
                burst_calls=c.burst_calls,
                block_size=c.block,
                confidence=p.confidence,
                noise_threshold=p.noise_threshold,
                page_faults=c.page_faults,
                warmup_calls=c.warmup_calls,
                warmup_converged=c.warmup_converged,
                timed_calls=c.timed_calls,
                untimed_calls=c.untimed_calls,
                keep_samples=final,
            )
            for i, c in enumerate(plan.cases)
        )
        w_mean = w_low = w_high = None
        means = [s.mean_ms for s in cases]
        if all(m is not None for m in means):
            w_mean = math.fsum(w * m for w, m in zip(self.weights, means))  # type: ignore[operator]
            rounds = set.intersection(*(set(c.burst_mean) for c in plan.cases))
            costs = [
                1e3 * math.fsum(w * c.burst_mean[r] for w, c in zip(self.weights, plan.cases))
                for r in sorted(rounds)
            ]
            iv = t_interval(costs, p.alpha)
            if iv is not None:
                w_low, w_high = iv[1], iv[2]
        speedup = fixed = None
        spread = None
        noisy = any(c.noisy for c in cases)
        if plan.is_baseline:
            verdict = Verdict.BASELINE
            n = len(scores[plan.name])
            speedup = RatioInterval(1.0, 1.0, 1.0, p.confidence, "baseline", n, None)
        else:
            verdict = self._verdict(plan, st)
            pair = pair_stats(scores[self.base.name], scores[plan.name])
            speedup = self._gate_interval(pair, st)
            if pair is not None:
                spread = finite_or_none(pair.sd)
                margin = max(abs(pair.mean - self.threshold), self.epsilon)
                needed = rounds_to_reach(
                    pair.sd, margin, self.critical_at(pair, self._final_rounds())
                )
                noisy = noisy or needed > max(self._final_rounds(), p.min_rounds)
            diffs = _diffs(scores[self.base.name], scores[plan.name])
            if final and p.bootstrap_resamples > 0 and len(diffs) >= 3:
                boot = bootstrap_mean_interval(
                    diffs, p.confidence, p.bootstrap_resamples, self.seed
                )
                if boot is not None:
                    fixed = ratio_from_log(
                        boot[:3],
                        confidence=p.confidence,
                        method=f"bootstrap ({boot[3]}) of the mean paired score "
                        "difference; descriptive, not adjusted for sequential stopping",
                        rounds=len(diffs),
                    )
        unsettled = sum(c.unsettled for c in plan.cases)
        bursts = sum(len(c.statistic) for c in plan.cases)
        return CandidateMeasurement(
            name=plan.name,
            verdict=verdict,
            cases=cases,
            weighted_mean_ms=finite_or_none(w_mean),
            weighted_mean_low_ms=finite_or_none(w_low),
            weighted_mean_high_ms=finite_or_none(w_high),
            speedup_vs_baseline=speedup,
            speedup_fixed_sample=fixed,
            rounds=len(scores[plan.name]),
            resolved_at_round=st.resolved_at,
            dropped_at_round=st.dropped_at,
            eliminated_by=st.eliminated_by,
            elimination_interval=st.elimination,
            error=plan.failed,
            noisy=bool(noisy),
            warmup_calls=sum(c.warmup_calls for c in plan.cases),
            timed_calls=sum(c.timed_calls for c in plan.cases),
            untimed_calls=sum(c.untimed_calls for c in plan.cases),
            note=_with_quiet_note(
                _with_settle_note(st.note, unsettled, bursts),
                plan.quiet_capped,
                plan.quiet_waits,
                p.quiesce_max_s,
            ),
            round_scores=tuple(
                finite_or_none(scores[plan.name].get(r)) if r in scores[plan.name] else None
                for r in range(1, self.rounds + 1)
            ),
            unsettled_bursts=unsettled,
            quiet_wait_s=finite_or_none(plan.quiet_wait_s) or 0.0,
            quiet_waits_capped=plan.quiet_capped,
            quiet_wait_after_s=finite_or_none(plan.quiet_after_s) or 0.0,
            longest_call_s=finite_or_none(plan.longest_call_s) or 0.0,
            round_spread=spread,
            case_round_scores=tuple(
                tuple(
                    finite_or_none(math.log(c.statistic[r]))
                    if c.statistic.get(r, 0.0) > 0
                    else None
                    for r in range(1, self.rounds + 1)
                )
                for c in plan.cases
            ),
            case_round_means_ms=tuple(
                tuple(
                    finite_or_none(1e3 * c.burst_mean[r]) if r in c.burst_mean else None
                    for r in range(1, self.rounds + 1)
                )
                for c in plan.cases
            ),
        )

    def _verdict(self, plan: PlanRecord, st: _Standing) -> Verdict:
        if plan.failed is not None:
            return Verdict.FAILED
        if st.gate is Gate.FASTER:
            return Verdict.FASTER
        if st.gate is Gate.NOT_FASTER:
            return Verdict.NOT_FASTER
        if st.dropped_at is not None:
            return Verdict.DROPPED
        return Verdict.UNRESOLVED

    def _gate_interval(self, pair: PairStats | None, st: _Standing) -> RatioInterval:
        """The gate interval: the running intersection over looks, its point the mean of
        every round (clipped into the interval, which it leaves only when the last rounds
        moved it outside what earlier looks allowed)."""
        p = self.policy
        if pair is None:
            return ratio_from_log(None, confidence=p.confidence, method=_METHOD, rounds=0)
        if st.critical is None:
            # No look yet (the budget ended before min_rounds): this look's boundary.
            crit = self.critical(pair.df)
            interval = pair.interval(crit)
            df = pair.df
        else:
            crit, df = st.critical, st.df or pair.df
            low, high = st.gate_low, st.gate_high
            interval = (min(max(pair.mean, low), high), low, high)
        return ratio_from_log(
            interval,
            confidence=p.confidence,
            method=_METHOD,
            rounds=pair.rounds,
            per_look_confidence=look_confidence(crit, df),
        )


_ELIMINATION_METHOD = (
    "paired Student-t of the per-round score difference against the leader with the "
    "pooled variance of the plans in the rounds, at the race's group-sequential boundary"
)
_ELIMINATION_METHOD_OWN = (
    "paired Student-t of the per-round score difference against the leader with the "
    "pair's own variance, at the race's group-sequential boundary"
)

_METHOD = (
    "paired Student-t of the per-round difference of log traffic-weighted burst "
    "statistics, one-sided Pocock group-sequential boundary at alpha / family per side, "
    "running intersection over looks; valid whenever the race stopped"
)


def _diffs(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    return [a[r] - b[r] for r in sorted(set(a) & set(b))]


def _with_settle_note(note: str, unsettled: int, bursts: int) -> str:
    if bursts == 0 or unsettled * 4 < bursts:
        return note
    extra = (
        f"{unsettled} of {bursts} bursts were timed before the plan settled (settling hit "
        "its cap): the machine was noisy or the previous plan left work behind, such as "
        "spinning threads"
    )
    return f"{note}; {extra}" if note else extra


def _with_quiet_note(note: str, capped: int, waits: int, cap_s: float) -> str:
    if waits == 0 or capped * 4 < waits:
        return note
    extra = (
        f"{capped} of {waits} turns started while other threads of the process were still "
        f"busy (the quiet-wait hit its {cap_s * 1e3:.0f} ms cap): a runtime's worker threads "
        "keep running between calls, and may slow whichever plan runs next"
    )
    return f"{note}; {extra}" if note else extra


def _validate(
    candidates: Mapping[str, Sequence[Callable[[], object]]],
    weights: Sequence[float],
    baseline: str,
    min_speedup: float,
    case_names: Sequence[str] | None,
    natives: Sequence[str],
) -> None:
    if baseline not in candidates:
        raise ConfigurationError(
            f"baseline {baseline!r} is not among the candidates {sorted(candidates)}; "
            "pass the key of the native plan"
        )
    if not weights:
        raise ConfigurationError("weights is empty: pass one traffic weight per workload case")
    for w in weights:
        if not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0):
            raise ConfigurationError(
                f"every case weight must be a finite number > 0, got {list(weights)}"
            )
    for name, fns in candidates.items():
        if len(fns) != len(weights):
            raise ConfigurationError(
                f"candidate {name!r} has {len(fns)} callables but there are {len(weights)} "
                "case weights: pass one zero-argument callable per workload case, in case order"
            )
    if not (
        isinstance(min_speedup, (int, float)) and math.isfinite(min_speedup) and min_speedup > 0
    ):
        raise ConfigurationError(
            f"min_speedup must be a finite number > 0 (e.g. 1.02), got {min_speedup!r}"
        )
    if case_names is not None and len(case_names) != len(weights):
        raise ConfigurationError(
            f"{len(case_names)} case names for {len(weights)} weights: give one name per case"
        )
    unknown = [n for n in natives if n not in candidates]
    if unknown:
        raise ConfigurationError(
            f"natives {unknown} are not among the candidates {sorted(candidates)}"
        )


#: Stops that leave comparisons open: the result says what budget would close them.
_BUDGET_STOPS = (
    StopReason.TIME_BUDGET,
    StopReason.MAX_ROUNDS,
    StopReason.CANCELLED,
    StopReason.INDIFFERENCE_FUTILITY,
)


def run_race(
    candidates: Mapping[str, Sequence[Callable[[], object]]],
    weights: Sequence[float],
    baseline: str,
    min_speedup: float,
    policy: MeasurementPolicy | None = None,
    *,
    clock: Clock | None = None,
    synchronize: Synchronize = None,
    on_round: Callable[[int, RaceResult], None] | None = None,
    should_continue: Callable[[], bool] | None = None,
    case_names: Sequence[str] | None = None,
    cpu: CpuTimeSource | None = None,
    natives: Sequence[str] = (),
    allocator: AllocatorControl | None = None,
    measure_alone: bool = False,
    output_checks: Mapping[str, Sequence[OutputCheck]] | None = None,
    allocator_report: bool = True,
    min_rounds_ceiling_s: float | None = None,
    known_spreads: Mapping[str, KnownSpread] | None = None,
) -> RaceResult:
    """Measure steady-state latency of every candidate and decide against the baseline.

    ``candidates`` maps each plan's name to one zero-argument callable per workload case
    (inputs already bound, same order as ``weights``). Each plan and case is warmed up,
    then measured in rounds of settled bursts; each challenger's gate compares it with
    ``baseline`` on the per-round paired score difference (``"faster"`` once the gate
    interval's low end clears ``min_speedup``, ``"not_faster"`` once its high end is below
    it). Plans clearly slower than the leading plan leave the rounds; the race stops when
    the leader has passed its gate and no survivor can beat it by more than the
    indifference zone, when every gate is closed, when the budget is spent (open
    comparisons are reported with the budget that would close them), or when
    ``should_continue()`` returns False.

    A challenger whose call raises is recorded as ``"failed"`` with its error and the race
    goes on; an exception from the baseline propagates. ``on_round(round, snapshot)`` gets
    a non-final ``RaceResult`` after every round. ``synchronize`` (e.g.
    ``torch.cuda.synchronize``) is called around every timed region: one callable for every
    plan, or a mapping from plan name to that plan's own. ``natives`` names plans that may
    replace the baseline after the race: they widen the error family. ``cpu`` is the
    CPU-time source of the quiet-wait (``None``: ``ProcessCpuTime()`` with the real clock,
    no quiet-wait with any other). ``allocator`` settles the heap allocator before warm-up
    (``None``: glibc's ``mallopt`` with the real clock when ``policy.settle_allocator``,
    nothing with any other clock). ``measure_alone``: run at least ``min_rounds`` rounds
    even when no challenger is left (or none entered): the throughput objective reads
    each case's latency, which it needs from a plan that races alone too.
    ``output_checks`` maps a plan to one callable per case that receives the outputs of
    every call of a timed block once its timer has stopped, and raises to fail the plan
    (the pipeline refuses non-finite outputs this way). ``allocator_report``: time the
    baseline's first calls (three per case) and count their page faults before settling
    the allocator, for the result's ``allocator`` regime and its advice; ``False`` settles
    it without them and records none (a race nobody reports: a screening, a cached plan's
    revalidation probe). ``min_rounds_ceiling_s``: how long the race may run, past its
    budget, to reach ``min_rounds`` when its rounds are slower than its budget was sized
    for (a busy machine); ``None``: an automatic budget's ceiling, a fixed one not.
    ``known_spreads``: per challenger, the spread of its per-round difference against
    ``baseline`` measured before (a cache hit's probe reads it from the record), pooled
    into its gate's where the rounds agree with it (:func:`with_known_spread`).
    """
    policy = policy if policy is not None else MeasurementPolicy()
    clock = clock if clock is not None else MonotonicClock()
    real = isinstance(clock, MonotonicClock)
    if cpu is None and real and policy.quiesce_max_s > 0:
        cpu = ProcessCpuTime()
    if allocator is None and real and policy.settle_allocator:
        allocator = GlibcAllocator()
    if not policy.settle_allocator:
        allocator = None
    prepare_boundary(policy.min_rounds, policy.max_rounds)  # before the race's clock starts
    race = _Race(
        RaceEntrants(
            candidates, weights, baseline, min_speedup, case_names, natives, output_checks or {}
        ),
        RaceInstruments(policy, clock, synchronize, cpu, allocator),
    )
    race.measure_alone = measure_alone
    race.allocator_report = allocator_report
    race.min_rounds_ceiling_s = min_rounds_ceiling_s
    race.known_spreads = dict(known_spreads or {})
    if len(race.plans) == 1 and not measure_alone:
        race.stop_reason = StopReason.NO_CHALLENGERS
        return race.result(final=True)
    race.settle_allocator()
    if not race.warm_all(should_continue):
        race.stop_reason = StopReason.CANCELLED
        race.open = race.open_comparisons()
        return race.result(final=True)
    race.leave_at_warmup()
    last_round_s = 0.0
    while True:
        reason = race.stop() if race.rounds else None
        if race.rounds and not race.challengers():
            reason = StopReason.NO_CHALLENGERS
        if measure_alone and not race.challengers() and race.rounds < policy.min_rounds:
            reason = None  # the cases' latencies are wanted, challengers or not
        if reason is not None:
            race.stop_reason = reason
            break
        if race.rounds >= policy.max_rounds:
            race.stop_reason = StopReason.MAX_ROUNDS
            break
        if race.elapsed_s() + last_round_s > race.budget_s:
            race.stop_reason = StopReason.TIME_BUDGET
            break
        if should_continue is not None and not should_continue():
            race.stop_reason = StopReason.CANCELLED
            break
        t0 = clock.now_ns()
        race.run_round()
        last_round_s = (clock.now_ns() - t0) / 1e9
        race.round_times_s.append(last_round_s)
        if race.rounds == 1:
            race.scale_budget(last_round_s)
        race.keep_budget_for_min_rounds()
        race.look()
        if on_round is not None:
            on_round(race.rounds, race.result(final=False))
    if race.stop_reason in _BUDGET_STOPS:
        race.open = race.open_comparisons()
    return race.result(final=True)


__all__ = ["CandidateMeasurement", "RaceResult", "Synchronize", "run_race"]
