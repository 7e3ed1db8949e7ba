"""The race: interleaved rounds of settled bursts, paired with the baseline, adaptive stop.

See docs/measurement.md for the protocol and the statistics.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from attrs import field, frozen

from dlopt.errors import ConfigurationError
from dlopt.measurement.clock import Clock, CpuTimeSource, MonotonicClock, ProcessCpuTime
from dlopt.measurement.policy import MeasurementPolicy
from dlopt.measurement.stats import (
    LatencyStats,
    RatioInterval,
    alpha_for_look,
    bootstrap_mean_interval,
    ratio_from_log,
    summarize_latency,
    t_interval,
    t_quantile,
)
from dlopt.serialization import finite_or_none
from dlopt.vocabulary import StopReason, Verdict

try:  # POSIX only; page faults are simply not recorded elsewhere.
    import resource as _resource
except ImportError:  # pragma: no cover - Windows
    _resource = None  # type: ignore[assignment]

#: What waits for queued device work: one callable for all plans, or one per plan name.
Synchronize = Callable[[], None] | Mapping[str, Callable[[], None] | None] | None

#: A call taking at least this share of the time budget is said to overrun it.
OVERRUN_SHARE = 0.5


@frozen
class CandidateMeasurement:
    """Everything the race measured about one plan.

    ``verdict``: ``"baseline"`` for the baseline; for a challenger ``"faster"`` when the
    decision interval's low end clears ``min_speedup``, ``"not_faster"`` when its high end
    is below it, ``"unresolved"`` when the budget ran out first, ``"dropped"`` when it was
    clearly slower than the leading challenger (``dropped_at_round``), ``"failed"`` when a
    call raised (``error``).

    ``speedup_vs_baseline`` is the decision interval (simultaneous over looks, see
    ``RatioInterval.method``); ``speedup_fixed_sample`` a descriptive bootstrap interval of
    the same paired log-ratios, valid only as if the number of rounds had been fixed.
    ``weighted_mean_ms`` is the traffic-weighted mean latency (sum over cases of weight x
    mean), with a t-interval over rounds at the policy's confidence.
    """

    name: str
    verdict: Verdict
    cases: tuple[LatencyStats, ...]
    weighted_mean_ms: float | None
    weighted_mean_low_ms: float | None
    weighted_mean_high_ms: float | None
    speedup_vs_baseline: RatioInterval | None
    speedup_fixed_sample: RatioInterval | None
    rounds: int
    resolved_at_round: int | None
    dropped_at_round: int | None
    error: str | None
    noisy: bool
    warmup_calls: int
    timed_calls: int
    untimed_calls: int
    note: str = ""
    #: Traffic-weighted burst cost per round (index = round - 1); ``None`` for rounds this
    #: candidate did not run. Lets any two candidates be paired after the race.
    round_costs_ms: tuple[float | None, ...] = ()
    #: Bursts whose settling hit its cap (``settle_time_s``/``settle_max_calls``) before a
    #: call ran within ``settle_tolerance`` of the plan's recent latency: the plan was
    #: timed while still slower than usual (machine noise, or state left by the previous
    #: plan, such as spinning worker threads).
    unsettled_bursts: int = 0
    #: Seconds the race waited for the process to go quiet before this plan's warm-ups and
    #: settled bursts (``MeasurementPolicy.quiesce_max_s``); at least one window each when
    #: the guard is on. Counted in the race's total time.
    quiet_wait_s: float = 0.0
    #: Of those waits, how many hit ``quiesce_max_s``: the plan ran while other threads of
    #: the process were still busy.
    quiet_waits_capped: int = 0
    #: Seconds waited right after this plan's turns (before the next plan's): how long the
    #: process stayed busy after it, e.g. its own spinning worker threads.
    quiet_wait_after_s: float = 0.0
    #: The longest single call it made (warm-up, settling or timed); where calls are timed
    #: in blocks of back-to-back calls, the longest block, which bounds its slowest call.
    longest_call_s: float = 0.0


@frozen
class RaceResult:
    """The outcome of ``run_race``: every candidate's measurement plus how the race went."""

    baseline: str
    min_speedup: float
    confidence: float
    seed: int
    rounds: int
    stop_reason: StopReason
    total_time_s: float
    timed_calls: int
    untimed_calls: int
    case_names: tuple[str, ...]
    weights: tuple[float, ...]
    candidates: tuple[CandidateMeasurement, ...]
    policy: MeasurementPolicy = field(factory=MeasurementPolicy)
    final: bool = True
    #: Seconds spent waiting for the process to go quiet (all candidates), part of
    #: ``total_time_s``.
    quiet_wait_s: float = 0.0

    def candidate(self, name: str) -> CandidateMeasurement:
        """The measurement of candidate ``name``."""
        for cand in self.candidates:
            if cand.name == name:
                return cand
        raise KeyError(
            f"no candidate {name!r} in this race; known: {[c.name for c in self.candidates]}"
        )

    @property
    def faster(self) -> tuple[str, ...]:
        """Challengers whose decision interval clears ``min_speedup``."""
        return tuple(c.name for c in self.candidates if c.verdict == "faster")

    @property
    def unresolved(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.candidates if c.verdict == "unresolved")

    @property
    def longest_call(self) -> tuple[str | None, float]:
        """The plan that made the race's longest single call, and that call's seconds."""
        if not self.candidates:
            return None, 0.0
        slowest = max(self.candidates, key=lambda c: c.longest_call_s)
        return slowest.name, slowest.longest_call_s

    def budget_overrun(self) -> str | None:
        """Why the time budget ran out, when one call took a large share of it.

        A single call of at least half of ``policy.max_time_s`` leaves too little for the
        rounds: raising the budget is the wrong advice, the plan that stalled is the news.
        """
        name, seconds = self.longest_call
        budget = self.policy.max_time_s
        if name is None or seconds < OVERRUN_SHARE * budget:
            return None
        return (
            f"a single call of {name} took {seconds:.1f} s, which overran the {budget:g} s "
            "measurement budget (MeasurementPolicy.max_time_s); a plan that stalls like this "
            "would stall in serving too"
        )


class _Candidate:
    """Mutable bookkeeping of one plan during a race."""

    def __init__(
        self,
        name: str,
        fns: Sequence[Callable[[], object]],
        is_baseline: bool,
        sync: Callable[[], None] | None = None,
    ) -> None:
        n = len(fns)
        self.name = name
        self.sync = sync
        self.fns = list(fns)
        self.is_baseline = is_baseline
        self.status: str = "racing"  # racing | faster | not_faster | futile | dropped | failed
        self.block = [1] * n
        self.reference = [0.0] * n  # seconds per call, recent median: the settle target
        self.unsettled = [0] * n
        self.warmup_calls = [0] * n
        self.warmup_converged = [False] * n
        self.samples: list[list[float]] = [[] for _ in range(n)]
        self.burst_means: list[list[float]] = [[] for _ in range(n)]
        self.timed_calls = [0] * n
        self.untimed_calls = [0] * n
        self.page_faults: list[int | None] = [0] * n
        self.cost: dict[int, float] = {}  # round -> weighted mean latency (s)
        self.round_bursts: dict[int, float] = {}  # case -> burst mean, current round
        self.decision: tuple[float, float, float] | None = None  # log-ratio interval
        self.decision_alpha: float | None = None
        self.resolved_at: int | None = None
        self.dropped_at: int | None = None
        self.error: str | None = None
        self.note = ""
        self.quiet_wait_s = 0.0
        self.quiet_waits = 0
        self.quiet_capped = 0
        self.quiet_after_s = 0.0
        self.longest_call_s = 0.0


def _minflt() -> int | None:
    if _resource is None:
        return None
    return int(_resource.getrusage(_resource.RUSAGE_SELF).ru_minflt)


class _Race:
    def __init__(
        self,
        candidates: Mapping[str, Sequence[Callable[[], object]]],
        weights: Sequence[float],
        baseline: str,
        min_speedup: float,
        policy: MeasurementPolicy,
        clock: Clock,
        synchronize: Synchronize,
        case_names: Sequence[str] | None,
        cpu: CpuTimeSource | None = None,
    ) -> None:
        _validate(candidates, weights, baseline, min_speedup, case_names)
        total = float(sum(weights))
        self.weights = tuple(float(w) / total for w in weights)
        self.n_cases = len(self.weights)
        self.case_names = (
            tuple(case_names)
            if case_names is not None
            else tuple(f"case{i}" for i in range(self.n_cases))
        )
        self.baseline_name = baseline
        self.min_speedup = float(min_speedup)
        self.log_threshold = math.log(self.min_speedup)
        self.policy = policy
        self.clock = clock
        self.cpu = cpu if policy.quiesce_max_s > 0 else None
        self.seed = (
            policy.seed if policy.seed is not None else random.SystemRandom().randrange(2**32)
        )
        self.rng = random.Random(self.seed)
        syncs = (
            synchronize
            if isinstance(synchronize, Mapping)
            else dict.fromkeys(candidates, synchronize)
        )
        self.cands = [
            _Candidate(name, fns, name == baseline, syncs.get(name))
            for name, fns in candidates.items()
        ]
        self.by_name = {c.name: c for c in self.cands}
        self.base = next(c for c in self.cands if c.is_baseline)
        n_challengers = len(self.cands) - 1
        self.alpha_per_challenger = policy.alpha / (
            n_challengers if policy.family_wise and n_challengers else 1
        )
        tick_s = clock.resolution_ns / 1e9
        # A block must span at least 1000 clock ticks (0.1% quantisation) and the policy's floor.
        self.resolvable_s = max(policy.min_resolvable_time_s, 1000 * tick_s)
        self.record_faults = policy.record_page_faults and _resource is not None
        if not self.record_faults:
            for c in self.cands:
                c.page_faults = [None] * self.n_cases
        self.rounds = 0
        self.round_times_s: list[float] = []
        # (plan, case) of the last burst run: the next burst of the same plan and case
        # has nothing to flush and needs no settling.
        self.last_turn: tuple[str, int] | None = None
        self.stop_reason = StopReason.MAX_ROUNDS
        self.start_ns = clock.now_ns()

    # -- timing primitives -------------------------------------------------------------
    def _elapsed_s(self) -> float:
        return (self.clock.now_ns() - self.start_ns) / 1e9

    def _timed_block(self, cand: _Candidate, fn: Callable[[], object], k: int) -> float:
        """Seconds per call of ``k`` back-to-back calls, device work included."""
        sync = cand.sync
        if sync is not None:
            sync()
        t0 = self.clock.now_ns()
        for _ in range(k):
            fn()
        if sync is not None:
            sync()
        elapsed = (self.clock.now_ns() - t0) / 1e9
        cand.longest_call_s = max(cand.longest_call_s, elapsed)
        return elapsed / k

    def _quiesce(self, cand: _Candidate) -> None:
        """Wait until the process's threads are (nearly) idle, at most ``quiesce_max_s``.

        Sleeps in windows of ``quiesce_window_s``; the process is quiet once its threads
        used less than ``quiesce_cpu_fraction`` of one core during a window. Runs before
        ``cand``'s turn; the wait is also booked to the plan that ran just before.
        """
        src = self.cpu
        if src is None:
            return
        p = self.policy
        limit_ns = p.quiesce_max_s * 1e9
        # A clock that does not move while sleeping must not spin here forever.
        max_windows = math.ceil(p.quiesce_max_s / p.quiesce_window_s) + 1
        start = t0 = self.clock.now_ns()
        c0 = src.cpu_ns()
        capped = False
        for _ in range(max_windows):
            src.sleep(p.quiesce_window_s)
            c1, t1 = src.cpu_ns(), self.clock.now_ns()
            if c1 - c0 < p.quiesce_cpu_fraction * (t1 - t0) or (c1 == c0 and t1 == t0):
                break
            if t1 - start >= limit_ns:
                capped = True
                break
            c0, t0 = c1, t1
        else:
            capped = True
        waited = (self.clock.now_ns() - start) / 1e9
        cand.quiet_wait_s += waited
        cand.quiet_waits += 1
        cand.quiet_capped += capped
        if self.last_turn is not None:
            self.by_name[self.last_turn[0]].quiet_after_s += waited

    # -- warm-up -----------------------------------------------------------------------
    def _warmup(self, cand: _Candidate, i: int) -> None:
        """Run until the latency stops trending down (windows of medians), capped.

        Warm-up also picks the block size: a call shorter than the timer resolves well is
        re-measured in blocks of ``k`` calls, and the trend restarts at the new ``k``.
        """
        p = self.policy
        fn = cand.fns[i]
        k = 1
        history: list[float] = []
        steps = 0
        start = self.clock.now_ns()
        converged = False
        while True:
            per_call = self._timed_block(cand, fn, k)
            cand.warmup_calls[i] += k
            steps += 1
            if per_call * k < self.resolvable_s and k < p.max_block_size:
                # Too short to resolve: grow the block (x10 when the clock saw nothing).
                new_k = k * 10 if per_call <= 0 else math.ceil(self.resolvable_s / per_call)
                k = min(p.max_block_size, max(k + 1, new_k))
                history.clear()
            else:
                history.append(per_call)
            w = p.warmup_window
            if len(history) >= 2 * w:
                last = statistics.median(history[-w:])
                prev = statistics.median(history[-2 * w : -w])
                if last >= prev * (1.0 - p.warmup_tolerance):
                    converged = True
                    break
            if (
                steps >= p.warmup_max_calls
                or (self.clock.now_ns() - start) / 1e9 >= p.warmup_max_time_s
            ):
                break
        cand.block[i] = k
        tail = history[-p.warmup_window :] if history else [per_call]
        cand.reference[i] = statistics.median(tail)
        cand.warmup_converged[i] = converged

    # -- one turn ----------------------------------------------------------------------
    def _burst(self, cand: _Candidate, i: int) -> tuple[float, list[float]]:
        p = self.policy
        fn = cand.fns[i]
        k = cand.block[i]
        # Settle: untimed calls of this plan until it runs at its own latency again --
        # unless this plan and case ran the burst just before: nothing else ran since.
        start = self.clock.now_ns()
        calls = 0
        tol = p.settle_tolerance
        need = max(p.settle_min_calls, 1) if tol is not None else p.settle_min_calls
        settled = tol is None
        continuing = p.continue_same_plan and self.last_turn == (cand.name, i)
        if not continuing:
            # Threads still busy from the previous turn would slow this one's calls.
            self._quiesce(cand)
            start = self.clock.now_ns()
        self.last_turn = (cand.name, i)
        if continuing:
            settled = True
        while not continuing and calls < p.settle_max_calls:
            elapsed = (self.clock.now_ns() - start) / 1e9
            if calls >= need and elapsed >= p.settle_time_s:
                break
            if tol is None:
                self._timed_block(cand, fn, k)
                calls += k
                continue
            per_call = self._timed_block(cand, fn, k)
            calls += k
            if calls >= need and per_call <= cand.reference[i] * (1.0 + tol):
                settled = True
                break
        cand.untimed_calls[i] += calls
        if not settled:
            cand.unsettled[i] += 1
        # Timed samples.
        f0 = _minflt() if self.record_faults else None
        samples = [self._timed_block(cand, fn, k) for _ in range(p.timed_calls_per_burst)]
        if f0 is not None:
            f1 = _minflt()
            cand.page_faults[i] = (cand.page_faults[i] or 0) + (f1 or 0) - f0
        cand.timed_calls[i] += k * p.timed_calls_per_burst
        return math.fsum(samples) / len(samples), samples

    # -- the race ----------------------------------------------------------------------
    def racing(self) -> list[_Candidate]:
        """Candidates whose comparison with the baseline is still open."""
        return [c for c in self.cands if c.status == "racing"]

    def measured(self) -> list[_Candidate]:
        """Candidates that run in the next round: the open ones and, when the policy keeps
        measuring resolved winners, those already "faster". Their verdict is settled, but
        the selection may compare two winners (or a winner with a native baseline) on the
        rounds both ran, which needs them in the same rounds."""
        keep = ("racing", "faster") if self.policy.keep_measuring_winners else ("racing",)
        return [c for c in self.cands if c.status in keep]

    def _fail(self, cand: _Candidate, exc: BaseException, stage: str) -> None:
        if cand.is_baseline:
            raise exc
        cand.status = "failed"
        cand.error = f"{stage}: {type(exc).__name__}: {exc}"

    def warm_all(self) -> None:
        turns = [(c, i) for c in self.cands for i in range(self.n_cases)]
        self.rng.shuffle(turns)
        for cand, i in turns:
            if cand.status != "racing":
                continue
            self._quiesce(cand)
            self.last_turn = (cand.name, i)
            try:
                self._warmup(cand, i)
            except Exception as exc:
                self._fail(cand, exc, f"warm-up of case {self.case_names[i]!r}")

    def run_round(self) -> None:
        r = self.rounds + 1
        turns = [(c, i) for c in self.measured() for i in range(self.n_cases)]
        self.rng.shuffle(turns)
        if self.policy.continue_same_plan:
            # Start with the plan and case that ran last: its burst needs no settling.
            # With two plans the order then alternates, so each pays the switch into the
            # round equally often.
            for j, (c, i) in enumerate(turns):
                if (c.name, i) == self.last_turn:
                    turns.insert(0, turns.pop(j))
                    break
        burst_means: dict[str, list[float | None]] = {
            c.name: [None] * self.n_cases for c in self.measured()
        }
        pending: dict[str, list[tuple[int, list[float], float]]] = {
            c.name: [] for c in self.measured()
        }
        for cand, i in turns:
            if cand.status not in ("racing", "faster"):
                continue  # failed earlier in this round
            try:
                mean, samples = self._burst(cand, i)
            except Exception as exc:
                self._fail(cand, exc, f"round {r}, case {self.case_names[i]!r}")
                continue
            burst_means[cand.name][i] = mean
            pending[cand.name].append((i, samples, mean))
        p = self.policy
        for cand in self.measured():
            for i, samples, mean in pending[cand.name]:
                cand.samples[i].extend(samples)
                cand.burst_means[i].append(mean)
                # The settle target is the median of recent samples, not the last burst
                # alone: one burst's 2 samples swing by tens of percent on a busy CPU,
                # and a target that is low by chance keeps settling to its cap.
                recent = cand.samples[i][-p.settle_reference_samples :]
                cand.reference[i] = statistics.median(recent)
            means = [m for m in burst_means[cand.name] if m is not None]
            cand.cost[r] = math.fsum(w * m for w, m in zip(self.weights, means))
        self.rounds = r

    def _log_ratios(self, num: _Candidate, den: _Candidate) -> list[float]:
        """Per-round log(cost_num / cost_den) over the rounds both ran."""
        common = sorted(set(num.cost) & set(den.cost))
        return [
            math.log(num.cost[r] / den.cost[r])
            for r in common
            if num.cost[r] > 0 and den.cost[r] > 0
        ]

    def _final_rounds(self) -> int:
        """The last round the budget allows: ``max_rounds``, or fewer if time runs out."""
        p = self.policy
        final = p.max_rounds
        if self.round_times_s:
            per_round = statistics.median(self.round_times_s)
            left = p.max_time_s - self._elapsed_s()
            if per_round > 0:
                final = min(final, self.rounds + max(0, math.floor(left / per_round)))
        return max(final, self.rounds)

    def _final_half_width(self, diffs: list[float]) -> float:
        """Projected half-width of the decision interval at the last affordable look.

        Uses the spread of the paired log-ratios seen so far; only futility uses it, which
        can never turn a verdict into "faster", so a wrong projection costs power, not
        validity.
        """
        n = len(diffs)
        if n < 2:
            return 0.0
        p = self.policy
        final = max(self._final_rounds(), n)
        look = max(final - p.min_rounds + 1, 1)
        alpha = alpha_for_look(self.alpha_per_challenger, min(look, p.max_looks), p.max_looks)
        sd = statistics.stdev(diffs)
        return t_quantile(1.0 - alpha / 2.0, final - 1) * sd / math.sqrt(final)

    def look(self) -> None:
        """Resolve, drop and update the decision intervals after a round."""
        p = self.policy
        if self.rounds < p.min_rounds:
            return
        k = self.rounds - p.min_rounds + 1
        alpha_k = alpha_for_look(self.alpha_per_challenger, k, p.max_looks)
        for cand in self.racing():
            if cand.is_baseline:
                continue
            interval = t_interval(self._log_ratios(self.base, cand), alpha_k)
            cand.decision, cand.decision_alpha = interval, alpha_k
            if interval is None:
                continue
            _, low, high = interval
            if low >= self.log_threshold:
                cand.status, cand.resolved_at = "faster", self.rounds
            elif high < self.log_threshold:
                cand.status, cand.resolved_at = "not_faster", self.rounds
            elif p.futility_confidence is not None:
                # Non-binding futility stop: even the optimistic end of a loose interval
                # misses the threshold (after the half-width the decision interval will
                # still have when the budget ends). Stopping can only remove "faster"
                # verdicts, so the switch error stays controlled; the verdict stays
                # "unresolved".
                diffs = self._log_ratios(self.base, cand)
                loose = t_interval(diffs, 1.0 - p.futility_confidence)
                reach = self._final_half_width(diffs) if p.futility_uses_budget else 0.0
                if loose is not None and loose[2] - reach < self.log_threshold:
                    cand.status, cand.resolved_at = "futile", self.rounds
                    why = (
                        f"the upper end of its {p.futility_confidence:.0%} interval is below "
                        "min_speedup"
                    )
                    if reach > 0:
                        why = (
                            f"even the upper end of its {p.futility_confidence:.0%} interval "
                            f"could not clear min_speedup within the budget (about "
                            f"{self._final_rounds()} rounds) at the spread seen so far"
                        )
                    cand.note = f"stopped at round {self.rounds} for futility: {why}"
        if not p.drop_worse_than_leader:
            return
        contenders = [
            c for c in self.cands if not c.is_baseline and c.status in ("racing", "faster")
        ]
        if len(contenders) < 2:
            return
        leader = max(contenders, key=lambda c: c.decision[0] if c.decision else -math.inf)
        if leader.decision is None or leader.decision[0] <= 0:
            return  # no challenger ahead of the baseline: nothing to drop against
        for cand in self.racing():
            if cand.is_baseline or cand is leader:
                continue
            # log(cost_cand / cost_leader) per round: clearly worse when the low end is > 0.
            pair = t_interval(self._log_ratios(cand, leader), alpha_k)
            if pair is not None and pair[1] > 0:
                cand.status, cand.dropped_at = "dropped", self.rounds
                cand.note = (
                    f"clearly slower than {leader.name!r} (paired interval at round {self.rounds})"
                )

    # -- results -----------------------------------------------------------------------
    def result(self, final: bool) -> RaceResult:
        p = self.policy
        out = []
        for cand in self.cands:
            out.append(self._measurement(cand, final))
        timed = sum(sum(c.timed_calls) for c in self.cands)
        untimed = sum(sum(c.untimed_calls) + sum(c.warmup_calls) for c in self.cands)
        return RaceResult(
            baseline=self.baseline_name,
            min_speedup=self.min_speedup,
            confidence=p.confidence,
            seed=self.seed,
            rounds=self.rounds,
            stop_reason=StopReason(self.stop_reason),
            total_time_s=max(0.0, self._elapsed_s()),
            timed_calls=timed,
            untimed_calls=untimed,
            case_names=self.case_names,
            weights=self.weights,
            candidates=tuple(out),
            policy=p,
            final=final,
            quiet_wait_s=finite_or_none(math.fsum(c.quiet_wait_s for c in self.cands)) or 0.0,
        )

    def _measurement(self, cand: _Candidate, final: bool) -> CandidateMeasurement:
        p = self.policy
        cases = tuple(
            summarize_latency(
                case=self.case_names[i],
                samples_s=cand.samples[i],
                burst_means_s=cand.burst_means[i],
                block_size=cand.block[i],
                confidence=p.confidence,
                noise_threshold=p.noise_threshold,
                page_faults=cand.page_faults[i],
                warmup_calls=cand.warmup_calls[i],
                warmup_converged=cand.warmup_converged[i],
                timed_calls=cand.timed_calls[i],
                untimed_calls=cand.untimed_calls[i],
            )
            for i in range(self.n_cases)
        )
        costs = [cand.cost[r] * 1e3 for r in sorted(cand.cost)]
        w_mean = w_low = w_high = None
        if costs:
            w_mean = float(np.mean(costs))
            iv = t_interval(costs, p.alpha)
            if iv is not None:
                w_low, w_high = iv[1], iv[2]
        speedup = fixed = None
        if cand.is_baseline:
            verdict = Verdict.BASELINE
            speedup = RatioInterval(1.0, 1.0, 1.0, p.confidence, "baseline", len(costs), None)
        else:
            verdict = {
                "racing": Verdict.UNRESOLVED,
                "futile": Verdict.UNRESOLVED,
                "faster": Verdict.FASTER,
                "not_faster": Verdict.NOT_FASTER,
                "dropped": Verdict.DROPPED,
                "failed": Verdict.FAILED,
            }[cand.status]
            diffs = self._log_ratios(self.base, cand)
            decision, alpha_k = cand.decision, cand.decision_alpha
            if decision is None and len(diffs) >= 2 and cand.status == "racing":
                # No look yet (budget hit before min_rounds): report the first look's level.
                alpha_k = alpha_for_look(self.alpha_per_challenger, 1, p.max_looks)
                decision = t_interval(diffs, alpha_k)
            n_used = cand.resolved_at or cand.dropped_at or len(diffs)
            speedup = ratio_from_log(
                decision,
                confidence=p.confidence,
                method=_method_text(p, len(self.cands) - 1),
                rounds=min(n_used, len(diffs)),
                per_look_confidence=None if alpha_k is None else 1.0 - alpha_k,
            )
            if final and p.bootstrap_resamples > 0 and len(diffs) >= 3:
                boot = bootstrap_mean_interval(
                    diffs, p.confidence, p.bootstrap_resamples, self.seed
                )
                if boot is not None:
                    fixed = ratio_from_log(
                        boot[:3],
                        confidence=p.confidence,
                        method=f"scipy.stats.bootstrap ({boot[3]}) of the mean paired log-ratio; "
                        "descriptive, not adjusted for adaptive stopping",
                        rounds=len(diffs),
                    )
        return CandidateMeasurement(
            name=cand.name,
            verdict=verdict,
            cases=cases,
            weighted_mean_ms=finite_or_none(w_mean),
            weighted_mean_low_ms=finite_or_none(w_low),
            weighted_mean_high_ms=finite_or_none(w_high),
            speedup_vs_baseline=speedup,
            speedup_fixed_sample=fixed,
            rounds=len(costs),
            resolved_at_round=cand.resolved_at,
            dropped_at_round=cand.dropped_at,
            error=cand.error,
            noisy=any(c.noisy for c in cases),
            warmup_calls=sum(cand.warmup_calls),
            timed_calls=sum(cand.timed_calls),
            untimed_calls=sum(cand.untimed_calls),
            note=_with_quiet_note(
                _with_settle_note(cand.note, sum(cand.unsettled), len(cand.cost) * self.n_cases),
                cand.quiet_capped,
                cand.quiet_waits,
                p.quiesce_max_s,
            ),
            unsettled_bursts=sum(cand.unsettled),
            quiet_wait_s=finite_or_none(cand.quiet_wait_s) or 0.0,
            quiet_waits_capped=cand.quiet_capped,
            quiet_wait_after_s=finite_or_none(cand.quiet_after_s) or 0.0,
            longest_call_s=finite_or_none(cand.longest_call_s) or 0.0,
            round_costs_ms=tuple(
                finite_or_none(cand.cost[r] * 1e3) if r in cand.cost else None
                for r in range(1, self.rounds + 1)
            ),
        )


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


def _method_text(policy: MeasurementPolicy, n_challengers: int) -> str:
    family = (
        f", alpha split over {n_challengers} challengers"
        if policy.family_wise and n_challengers > 1
        else ""
    )
    return (
        "Student-t interval of the per-round paired log-ratio (scipy.stats.t.ppf), "
        f"alpha spent over at most {policy.max_looks} looks{family}; "
        "valid simultaneously over all looks"
    )


def _validate(
    candidates: Mapping[str, Sequence[Callable[[], object]]],
    weights: Sequence[float],
    baseline: str,
    min_speedup: float,
    case_names: Sequence[str] | None,
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


def run_race(
    candidates: Mapping[str, Sequence[Callable[[], object]]],
    weights: Sequence[float],
    baseline: str,
    min_speedup: float,
    policy: MeasurementPolicy | None = None,
    clock: Clock | None = None,
    synchronize: Synchronize = None,
    on_round: Callable[[int, RaceResult], None] | None = None,
    should_continue: Callable[[], bool] | None = None,
    case_names: Sequence[str] | None = None,
    cpu: CpuTimeSource | None = None,
) -> RaceResult:
    """Measure steady-state latency of every candidate and decide against the baseline.

    ``candidates`` maps each plan's name to one zero-argument callable per workload case
    (inputs already bound, same order as ``weights``). Each plan and case is warmed up,
    then measured in rounds of settled bursts in a per-round shuffled order; each
    challenger is compared to ``baseline`` on the per-round paired log-ratio of their
    traffic-weighted costs. The race stops when every challenger is resolved against
    ``min_speedup`` (``speedup_vs_baseline.low >= min_speedup`` → ``"faster"``; ``high <
    min_speedup`` → ``"not_faster"``), or when ``policy.max_rounds``/``policy.max_time_s``
    is spent (``"unresolved"``), or when ``should_continue()`` returns False.

    A challenger whose call raises is recorded as ``"failed"`` with its error and the race
    goes on; an exception from the baseline propagates. ``on_round(round, snapshot)`` gets
    a non-final ``RaceResult`` after every round. ``synchronize`` (e.g.
    ``torch.cuda.synchronize``) is called around every timed region: one callable for every
    plan, or a mapping from plan name to that plan's own (``None`` for none).

    ``cpu`` is the CPU-time source of the quiet-wait before each turn
    (``policy.quiesce_max_s``). ``None`` means ``ProcessCpuTime()`` with the real clock
    (``None`` or a ``MonotonicClock``) and no quiet-wait with any other clock: sleeping
    for real while a fake clock stands still would measure nothing. Tests inject a
    ``FakeCpuTime`` on their ``FakeClock``.
    """
    policy = policy if policy is not None else MeasurementPolicy()
    clock = clock if clock is not None else MonotonicClock()
    if cpu is None and isinstance(clock, MonotonicClock) and policy.quiesce_max_s > 0:
        cpu = ProcessCpuTime()
    race = _Race(
        candidates, weights, baseline, min_speedup, policy, clock, synchronize, case_names, cpu
    )
    if len(race.cands) == 1:
        race.stop_reason = StopReason.NO_CHALLENGERS
        return race.result(final=True)
    race.warm_all()
    last_round_s = 0.0
    while True:
        if not any(not c.is_baseline for c in race.racing()):
            statuses = {c.status for c in race.cands if not c.is_baseline}
            if "futile" in statuses:
                race.stop_reason = StopReason.FUTILITY
            elif statuses & {"faster", "not_faster", "dropped"}:
                race.stop_reason = StopReason.RESOLVED
            else:
                race.stop_reason = StopReason.NO_CHALLENGERS
            break
        if race.rounds >= policy.max_rounds:
            race.stop_reason = StopReason.MAX_ROUNDS
            break
        if race._elapsed_s() + last_round_s > policy.max_time_s:
            race.stop_reason = StopReason.TIME_BUDGET
            break
        if should_continue is not None and not should_continue():
            race.stop_reason = StopReason.CANCELLED
            break
        t0 = clock.now_ns()
        race.run_round()
        last_round_s = (clock.now_ns() - t0) / 1e9
        race.round_times_s.append(last_round_s)
        race.look()
        if on_round is not None:
            on_round(race.rounds, race.result(final=False))
    return race.result(final=True)
