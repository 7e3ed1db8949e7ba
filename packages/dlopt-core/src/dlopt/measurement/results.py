"""What a race returns: one record per plan, the race's own figures, the open comparisons.

Plain attrs value types (strict-JSON through ``dlopt.platform.serialization``); the race engine fills
them, the report copies them. ``RaceResult.paired_speedup`` compares any two plans after
the race on the rounds both ran, with the race's own boundary.
"""

from __future__ import annotations

import math

import attrs
from attrs import field, frozen

from dlopt.measurement.sequential import (
    PairStats,
    PooledVariance,
    boundary,
    look_confidence,
    pair_stats,
)
from dlopt.measurement.stats import LatencyStats, RatioInterval, ratio_from_log
from dlopt.platform.serialization import finite_or_none
from dlopt.settings.measurement import MeasurementPolicy
from dlopt.vocabulary import StopReason, Verdict

#: A call taking at least this share of the time budget is said to overrun it.
OVERRUN_SHARE = 0.5


@frozen
class OpenComparison:
    """A comparison the budget ended before it was decided, and what would decide it.

    ``kind``: ``"gate"`` (``candidate`` against the baseline and ``min_speedup``) or
    ``"leader"`` (whether ``candidate`` is within the indifference zone of ``against``,
    the leading plan). ``rounds_needed``: rounds after which the interval would be narrow
    enough at the spread seen, or the race's least rounds where under two rounds showed
    no spread (``None``: not within any budget, the point sits on the bar);
    ``budget_s_needed``: the measurement budget that would give them (``None``: no round
    was timed to price them).
    """

    candidate: str
    against: str
    kind: str
    rounds: int
    rounds_needed: int | None
    budget_s_needed: float | None


@frozen
class AllocatorRegime:
    """The heap allocator's state during the race, and what it means for serving.

    ``faults_per_call_before``: minor page faults per call of the baseline's first calls,
    before the race settled the allocator (``None`` where not measured). ``settled``:
    whether the race fixed glibc's thresholds (``method`` says how); ``advice``: what a
    deployment should do when the default regime cost the baseline page faults on every
    call.
    """

    settled: bool
    method: str
    faults_per_call_before: float | None = None
    faults_per_call_after: float | None = None
    latency_before_ms: float | None = None
    latency_after_ms: float | None = None
    advice: str | None = None


@frozen
class CandidateMeasurement:
    """Everything the race measured about one plan.

    ``verdict``: ``"baseline"`` for the baseline; for a challenger ``"faster"`` when its
    gate interval's low end clears ``min_speedup``, ``"not_faster"`` when its high end is
    below it, ``"unresolved"`` when the race stopped first (budget, futility, or the
    leader was identified while this plan stayed within the indifference zone),
    ``"dropped"`` when it was eliminated as slower than the leading plan by more than the
    indifference zone (``dropped_at_round``; ``eliminated_by`` names that plan and
    ``elimination_interval`` is its speedup over it, the interval that decided), or left
    at warm-up as hopeless against the baseline (``dropped_at_round`` 0, ``note`` says
    why), ``"failed"`` when a call raised
    (``error``). A plan already ``"faster"`` that is eliminated keeps its verdict and
    records ``dropped_at_round``.

    ``speedup_vs_baseline`` is the gate interval: the intersection of the looks'
    intervals, each at the race's group-sequential boundary, so it is valid whenever the
    race stopped; its point is the mean over *every* round both plans ran (a winner is
    ranked on all the evidence, not on the look where it cleared the gate).
    ``speedup_fixed_sample``: a descriptive bootstrap interval of the same paired
    differences, as if the number of rounds had been fixed. ``weighted_mean_ms``: the
    traffic-weighted mean latency over all timed calls, with a t-interval over rounds.
    ``round_scores``: per round (index = round - 1) the plan's score, the log of its
    traffic-weighted sum of burst statistics (``None``: did not run that round).
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
    round_scores: tuple[float | None, ...] = ()
    #: Bursts whose settling hit its cap before a call ran within ``settle_tolerance``.
    unsettled_bursts: int = 0
    #: Seconds the race waited for the process to go quiet before this plan's turns.
    quiet_wait_s: float = 0.0
    #: Of those waits, how many hit ``quiesce_max_s``.
    quiet_waits_capped: int = 0
    #: Seconds waited right after this plan's turns: how long it left the process busy.
    quiet_wait_after_s: float = 0.0
    #: The longest single call (or block of back-to-back calls) it made.
    longest_call_s: float = 0.0
    #: Per-round standard deviation of its paired log difference with the baseline.
    round_spread: float | None = None
    #: The plan it was eliminated against (the leader, or the baseline at warm-up).
    eliminated_by: str | None = None
    #: Its speedup over ``eliminated_by`` at elimination: the interval that decided.
    elimination_interval: RatioInterval | None = None
    #: Per case, per round (index = round - 1): the log of the case's burst statistic
    #: (seconds; ``None``: not run that round). Pairs one case of two plans after the race
    #: (the throughput objective compares plans at different batch sizes).
    case_round_scores: tuple[tuple[float | None, ...], ...] = ()
    #: Per case, per round: the burst's mean milliseconds per call (``None``: not run).
    case_round_means_ms: tuple[tuple[float | None, ...], ...] = ()


@frozen
class RaceSummary:
    """How a race went, in the figures a report keeps (its ``measurement`` field).

    ``longest_call_s``: the longest single call of the race, by ``longest_call_plan``.
    ``budget_s``: the measurement budget the race had (fixed, or scaled to the model's
    call cost). ``family_size``: comparisons in the error family the boundary was set for.
    ``leader``: the plan ranked first on all rounds among those in contention;
    ``regret_bound``: an upper confidence bound of how much faster (as a ratio) any other
    surviving plan may be than the leader (1.0 when the leader is identified within the
    indifference zone's resolution). ``open_comparisons``: those the race left open, with
    the budget that would close them; ``allocator``: the heap allocator's regime during
    the race, and advice for deployments.

    Fields a report written before they existed lacks read as ``None``.
    """

    seed: int
    rounds: int
    stop_reason: StopReason
    total_time_s: float
    timed_calls: int
    untimed_calls: int
    confidence: float
    policy: MeasurementPolicy
    longest_call_s: float | None = None
    longest_call_plan: str | None = None
    budget_s: float | None = None
    warmup_time_s: float | None = None
    family_size: int | None = None
    leader: str | None = None
    regret_bound: float | None = None
    open_comparisons: tuple[OpenComparison, ...] = ()
    allocator: AllocatorRegime | None = None


@frozen(kw_only=True)
class RaceResult(RaceSummary):
    """The outcome of ``run_race``: the race's summary plus every plan's measurement.

    ``final``: ``False`` for a snapshot taken while the race runs.
    """

    baseline: str
    min_speedup: float
    case_names: tuple[str, ...]
    weights: tuple[float, ...]
    candidates: tuple[CandidateMeasurement, ...]
    policy: MeasurementPolicy = field(factory=MeasurementPolicy)
    final: bool = True
    quiet_wait_s: float = 0.0
    # A race always knows these (a summary read from an older report may not).
    budget_s: float = 0.0
    warmup_time_s: float = 0.0
    family_size: int = 1
    #: The pooled residual variance of the last look (plans, rounds, value, degrees of
    #: freedom): pairs inside the pool are compared with it after the race too.
    pooled_plans: tuple[str, ...] = ()
    pooled_rounds: tuple[int, ...] = ()
    pooled_variance: float | None = None
    pooled_df: int | None = None

    def summary(self) -> RaceSummary:
        """The race-wide figures alone, as the report keeps them."""
        return RaceSummary(**{a.name: getattr(self, a.name) for a in attrs.fields(RaceSummary)})

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
        """Challengers whose gate interval clears ``min_speedup``."""
        return tuple(c.name for c in self.candidates if c.verdict == Verdict.FASTER)

    @property
    def unresolved(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.candidates if c.verdict == "unresolved")

    @property
    def longest_call(self) -> tuple[str | None, float]:
        """The plan that made the race's longest single call, and that call's seconds."""
        return self.longest_call_plan, self.longest_call_s or 0.0

    def budget_overrun(self) -> str | None:
        """Why the time budget ran out, when one call took a large share of it."""
        name, seconds = self.longest_call
        budget = self.budget_s or (self.policy.max_time_s or 0.0)
        if name is None or budget <= 0 or seconds < OVERRUN_SHARE * budget:
            return None
        return (
            f"a single call of {name} took {seconds:.1f} s, which overran the {budget:g} s "
            "measurement budget; a plan that stalls like this would stall in serving too"
        )

    def case_speedup(
        self,
        candidate: tuple[str, int],
        reference: tuple[str, int],
        *,
        family: int = 1,
    ) -> RatioInterval:
        """Latency speedup of one plan's case over another plan's (or the same plan's)
        case, ``(plan, case index)`` each, paired over the rounds both ran.

        The boundary is the race's for its error family, further split over ``family``
        comparisons (Bonferroni: the caller chose the pair among that many).
        """
        cand = self.candidate(candidate[0])
        ref = self.candidate(reference[0])
        stats = pair_stats(
            _by_round(_case_scores(ref, reference[1])), _by_round(_case_scores(cand, candidate[1]))
        )
        split = f"{self.family_size}x{max(1, family)}"
        return self._at_boundary(
            stats,
            self.family_size * max(1, family),
            f"paired t over {0 if stats is None else stats.rounds} common rounds of "
            f"{candidate[0]!r} case {candidate[1]} vs {reference[0]!r} case {reference[1]}",
            split,
        )

    def paired_speedup(self, candidate: str, reference: str) -> RatioInterval:
        """Speedup of ``candidate`` over ``reference`` (> 1: candidate faster).

        Paired over the rounds both ran, at the race's boundary for its error family (a
        native plan that becomes the baseline is one of the references the family was
        sized for), so the interval is as strict as the gate's.
        """
        cand = self.candidate(candidate)
        ref = self.candidate(reference)
        pooled = None
        if (
            self.pooled_variance is not None
            and self.pooled_df
            and {candidate, reference} <= set(self.pooled_plans)
        ):
            pooled = PooledVariance(
                frozenset(self.pooled_plans),
                self.pooled_rounds,
                self.pooled_variance,
                self.pooled_df,
            )
        stats = pair_stats(_by_round(ref.round_scores), _by_round(cand.round_scores), pooled)
        return self._at_boundary(
            stats,
            self.family_size,
            f"paired t over {0 if stats is None else stats.rounds} common rounds of the "
            f"score difference vs {reference!r}"
            f"{' (pooled variance)' if stats is not None and stats.pooled else ''}",
            str(self.family_size),
        )

    def round_spread(self, candidate: str, reference: str) -> float | None:
        """The standard deviation of ``candidate``'s per-round score difference against
        ``reference`` over the rounds both ran (the pair's own, not pooled; ``None`` under
        two rounds)."""
        stats = pair_stats(
            _by_round(self.candidate(reference).round_scores),
            _by_round(self.candidate(candidate).round_scores),
        )
        return finite_or_none(stats.sd) if stats is not None else None

    def _at_boundary(
        self, stats: PairStats | None, family: int, what: str, split: str
    ) -> RatioInterval:
        """The ratio interval of ``stats`` at the race's group-sequential boundary for
        alpha split over ``family`` comparisons (``split`` writes that division)."""
        policy = self.policy
        critical = (
            None
            if stats is None
            else boundary(policy.alpha / family, policy.min_rounds, policy.max_rounds, stats.df)
        )
        return ratio_from_log(
            None if stats is None or critical is None else stats.interval(critical),
            confidence=policy.confidence,
            method=(
                f"{what}, at the race's group-sequential boundary "
                f"(one-sided alpha {policy.alpha:g}/{split} per side)"
            ),
            rounds=0 if stats is None else stats.rounds,
            per_look_confidence=None
            if critical is None or stats is None
            else look_confidence(critical, stats.df),
        )


def _case_scores(measured: CandidateMeasurement, case: int) -> tuple[float | None, ...]:
    rounds = measured.case_round_scores
    return rounds[case] if case < len(rounds) else ()


def _by_round(scores: tuple[float | None, ...]) -> dict[int, float]:
    return {r + 1: s for r, s in enumerate(scores) if s is not None and math.isfinite(s)}
