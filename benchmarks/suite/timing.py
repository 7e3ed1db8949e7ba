"""The oracle's timing: interleaved rounds of per-plan bursts, and the median's interval.

Independent of dlopt's measurement kernel on purpose (the oracle judges it), and of torch:
a plan is any zero-argument callable per workload case, the clock and the random order
are injectable, so the schedule and the statistics are tested exactly on a fake clock.

Each round visits every plan in a fresh random order; a plan's visit runs every case as a
burst: untimed settling calls (a count and a time), then ``timed_calls`` timed ones, whose median is the
burst's latency (preemption only ever adds time; the median ignores a stray slow call).
A plan's round value is the traffic-weighted sum of its case latencies; its latency is the
median over rounds, with a distribution-free (order-statistic) interval.

Plans are compared with the leader (the lowest geometric mean round value) round by round: the ratio of a
plan's round value to the leader's in the same round, whose median has the same kind of
interval. Pairing cancels what a round shares (a slow spell of the machine slows every plan
timed in it), so a ranking settles in far fewer rounds than two unpaired intervals would
need. The rounds go on until the ranking is settled (every plan's ratio interval lies
above 1, or within ``tie_tolerance`` of 1: the order between them cannot move a regret by
more than that) or a round or time cap is reached. A plan leaves the rounds with the
estimate it has when it is clearly slower than the leader after a few rounds (every round
> ``drop_factor`` x the leader's slowest), unless it is a pick whose regret is wanted; and
after ``min_rounds`` when its ratio interval lies above ``1 + tie_tolerance``, picks too (its
place is settled and its regret known from ``min_rounds`` rounds or more).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Collection, Mapping

from attrs import field, frozen

Clock = Callable[[], float]


@frozen
class MedianInterval:
    """A sample's median and the order-statistic interval around it (same unit)."""

    median: float
    low: float
    high: float
    n: int
    #: The interval's exact coverage (at least the requested confidence where n allows).
    coverage: float


def median_interval(values: list[float], confidence: float = 0.95) -> MedianInterval:
    """The median of ``values`` with the distribution-free interval ``[x_(j), x_(n+1-j)]``.

    ``j`` is the largest rank with ``P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2``,
    so the interval covers the true median with probability at least ``confidence``
    whatever the distribution. Below 6 values no such rank exists at 95%: the interval is
    then the range, with its (lower) coverage said.
    """
    if not values:
        raise ValueError("median_interval needs at least one value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    xs = sorted(values)
    n = len(xs)
    tail = (1.0 - confidence) / 2.0
    rank = 1  # 1-based rank of the lower bound (1: the range, the widest there is)
    below = 0.0  # P(X < rank) for X ~ Binomial(n, 1/2)
    for k in range(n // 2):
        p_k = math.comb(n, k) / 2.0**n
        if below + p_k > tail:
            break
        below += p_k
        rank = k + 1  # P(X < k + 1) = below <= tail
    rank = min(rank, (n + 1) // 2)
    coverage = 1.0 - 2.0 * sum(math.comb(n, k) / 2.0**n for k in range(rank))
    return MedianInterval(statistics.median(xs), xs[rank - 1], xs[n - rank], n, coverage)


@frozen
class OracleSettings:
    """How long and how finely the oracle times (defaults: the real run)."""

    min_rounds: int = 15
    max_rounds: int = 150
    max_time_s: float = 150.0
    #: Untimed calls before a burst's timed calls: at least ``settle_calls`` and until
    #: ``settle_time_s`` has passed (at most ``settle_max_calls``). On a 2-core machine eager
    #: PyTorch ran up to ~10x slower for ~100 ms after ONNX Runtime's calls with spinning
    #: intra-op threads (benchmarks/_common.py), so a burst settles for that long.
    settle_calls: int = 1
    settle_time_s: float = 0.1
    settle_max_calls: int = 1000
    timed_calls: int = 5
    confidence: float = 0.95
    #: Two plans whose round-by-round ratio lies within this of 1 are tied: picking either
    #: costs less regret than this. 2%: the oracle resolves the regret targets (median
    #: <= 2%, max <= 5%) without chasing ties a 2-core machine cannot time apart.
    tie_tolerance: float = 0.02
    #: After this many rounds a plan (not one to keep) whose fastest round is slower than
    #: ``drop_factor`` x the leader's slowest round leaves the rounds: it cannot be the
    #: fastest, and a plan 100x slower than the rest would otherwise cost most of the time.
    drop_after_rounds: int = 3
    drop_factor: float = 2.0
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.min_rounds <= self.max_rounds:
            raise ValueError("need 1 <= min_rounds <= max_rounds")
        if self.timed_calls < 1 or self.settle_calls < 0:
            raise ValueError("need timed_calls >= 1 and settle_calls >= 0")


@frozen
class PlanTiming:
    """One plan's oracle latency (traffic-weighted, ms) with its interval and evidence."""

    name: str
    latency: MedianInterval
    #: Per case: the median over rounds of the burst latency (ms).
    case_median_ms: dict[str, float]
    #: The plan's round values in round order (ms).
    rounds_ms: tuple[float, ...] = field(converter=tuple)
    #: The round after which it left the rounds (None: timed to the end), and why.
    dropped_after: int | None = None
    left_because: str | None = None
    #: Its round values over the final leader's in the same rounds: the median ratio and
    #: its interval (None for the leader): the oracle's estimate of latency / leader's.
    vs_leader: MedianInterval | None = None


@frozen
class OracleTiming:
    plans: tuple[PlanTiming, ...]
    rounds: int
    time_s: float
    settled: bool
    #: Why the rounds stopped: "settled", "max_rounds", "max_time" or "left_unresolved"
    #: (settled among the plans still timed, not for one that left them earlier).
    stop_reason: str

    def ranking(self) -> list[PlanTiming]:
        """Fastest first by the ratio to the final leader (the leader first; ties by
        name, so the order is reproducible)."""
        return sorted(
            self.plans, key=lambda p: (p.vs_leader.median if p.vs_leader else 1.0, p.name)
        )


#: Why a plan left the rounds early (``PlanTiming.left_because``).
LEFT_FAR_BEHIND = "> 2x the leader"
LEFT_SETTLED_SLOWER = "settled slower than the leader"


def leader_of(per_round: Mapping[str, list[float]], active: Collection[str]) -> str:
    """The active plan with the lowest geometric mean round value (ties by name).

    Active plans share every round so far, so the ordering is that of their mean log
    ratios round by round: consistent with the paired comparisons, where the medians of
    two plans timed through different slow spells need not be."""
    return min(active, key=lambda n: (math.fsum(map(math.log, per_round[n])), n))


def ratios_to_leader(
    per_round: Mapping[str, list[float]],
    active: Collection[str],
    leader: str,
    confidence: float,
) -> dict[str, MedianInterval]:
    """Each plan of ``active`` but the leader: its round values over the leader's in the
    same rounds (a plan's rounds are the first ones, as plans only leave), the median of
    those ratios with its interval."""
    out = {}
    for name in active:
        if name == leader:
            continue
        ratios = [mine / theirs for mine, theirs in zip(per_round[name], per_round[leader])]
        out[name] = median_interval(ratios, confidence)
    return out


def is_settled(ratios: Mapping[str, MedianInterval], tie_tolerance: float) -> bool:
    """Whether the leader's place is decided: every other plan's ratio to the leader lies
    above 1 (slower), or within ``tie_tolerance`` of 1 either way (a tie whose order
    cannot change a regret by more than the tolerance)."""
    for ratio in ratios.values():
        if ratio.low > 1.0:
            continue
        if ratio.low >= 1.0 / (1.0 + tie_tolerance) and ratio.high <= 1.0 + tie_tolerance:
            continue
        return False
    return True


def clearly_slower(
    per_round: Mapping[str, list[float]],
    active: Collection[str],
    keep: Collection[str],
    factor: float,
) -> list[str]:
    """Active plans, not in ``keep``, whose fastest round is slower than ``factor`` x the
    slowest round of the leader (:func:`leader_of`)."""
    leader = leader_of(per_round, active)
    bar = factor * max(per_round[leader])
    return [n for n in active if n != leader and n not in keep and min(per_round[n]) > bar]


def time_interleaved(
    plans: Mapping[str, Mapping[str, Callable[[], object]]],
    weights: Mapping[str, float],
    settings: OracleSettings,
    clock: Clock = time.perf_counter,
    keep: Collection[str] = (),
) -> OracleTiming:
    """Time ``plans[name][case]()`` in interleaved rounds until the ranking is settled.

    ``weights`` are the cases' traffic weights (normalised here). Latencies are in ms of
    ``clock`` (which returns seconds). Plans in ``keep`` (the picks whose regret is wanted)
    are timed every round; others may leave early as clearly slower (``drop_after_rounds``).
    """
    if not plans:
        raise ValueError("the oracle needs at least one plan")
    total = float(sum(weights.values()))
    if total <= 0 or any(w < 0 for w in weights.values()):
        raise ValueError("case weights must be >= 0 with a positive sum")
    shares = {case: w / total for case, w in weights.items()}
    for name, cases in plans.items():
        if set(cases) != set(shares):
            raise ValueError(f"plan {name!r} has cases {sorted(cases)}, expected {sorted(shares)}")
    rng = random.Random(settings.seed)
    per_round: dict[str, list[float]] = {name: [] for name in plans}
    per_case: dict[str, dict[str, list[float]]] = {
        name: {case: [] for case in shares} for name in plans
    }
    started = clock()
    stop_reason = "max_rounds"
    active = list(plans)
    dropped: dict[str, tuple[int, str]] = {}
    case_order = list(shares)
    rounds = 0
    for rounds in range(1, settings.max_rounds + 1):
        order = list(active)
        rng.shuffle(order)
        for name in order:
            rng.shuffle(case_order)
            value = 0.0
            for case in case_order:
                call = plans[name][case]
                settle_from, settled_calls = clock(), 0
                while settled_calls < settings.settle_calls or (
                    clock() - settle_from < settings.settle_time_s
                    and settled_calls < settings.settle_max_calls
                ):
                    call()
                    settled_calls += 1
                samples = []
                for _ in range(settings.timed_calls):
                    t0 = clock()
                    call()
                    samples.append((clock() - t0) * 1e3)
                burst = statistics.median(samples)
                per_case[name][case].append(burst)
                value += shares[case] * burst
            per_round[name].append(value)
        if rounds == settings.drop_after_rounds:
            for name in clearly_slower(per_round, active, keep, settings.drop_factor):
                active.remove(name)
                dropped[name] = (rounds, LEFT_FAR_BEHIND)
        if rounds >= settings.min_rounds:
            leader = leader_of(per_round, active)
            ratios = ratios_to_leader(per_round, active, leader, settings.confidence)
            for name, ratio in ratios.items():
                if ratio.low > 1.0 + settings.tie_tolerance:
                    active.remove(name)
                    dropped[name] = (rounds, LEFT_SETTLED_SLOWER)
            if is_settled(ratios, settings.tie_tolerance):
                stop_reason = "settled"
                break
        # The time cap holds before min_rounds too: slow plans keep what they have.
        if clock() - started >= settings.max_time_s:
            stop_reason = "max_time"
            break
    # Every plan against the final leader, over the rounds both ran (the leader ran them
    # all: a plan only leaves when slower than a leader still in the rounds).
    final_leader = leader_of(per_round, active)
    vs_final = ratios_to_leader(per_round, list(per_round), final_leader, settings.confidence)
    if stop_reason == "settled" and not is_settled(vs_final, settings.tie_tolerance):
        # A plan left as slower than the leader of its time, and against the leader the
        # rounds ended with it is not settled: the ranking is not, either.
        stop_reason = "left_unresolved"
    timings = tuple(
        PlanTiming(
            name,
            median_interval(values, settings.confidence),
            {case: statistics.median(v) for case, v in per_case[name].items()},
            values,
            dropped[name][0] if name in dropped else None,
            dropped[name][1] if name in dropped else None,
            vs_final.get(name),
        )
        for name, values in per_round.items()
    )
    return OracleTiming(
        timings,
        rounds,
        clock() - started,
        settled=stop_reason == "settled",
        stop_reason=stop_reason,
    )
