"""``MeasurementPolicy``: every knob of the race engine, with defaults that work."""

from __future__ import annotations

from attrs import field, frozen

from dlopt.errors import ConfigurationError
from dlopt.platform.config_checks import boolean, integer, is_int, number, one_of
from dlopt.platform.serialization import user_document

_positive = number(minimum=0, low_open=True)
_non_negative = number(minimum=0)

#: Burst statistics the race can decide on (docs/measurement.md compares them).
BURST_STATISTICS = ("min", "second_min", "median", "mean")


@user_document
@frozen
class MeasurementPolicy:
    """How the race engine times candidates and when it stops.

    docs/measurement.md explains every rule and the figures behind the defaults.

    Statistics
        ``confidence``: every reported interval's level. The gate intervals that decide
        (``CandidateMeasurement.speedup_vs_baseline``) hold at this level simultaneously over
        every look of the race and, with ``family_wise``, over every challenger (one-sided
        Pocock-type group-sequential boundary at ``alpha / C``). ``pool_variance``: estimate
        the per-round variance from every plan still measured (two-way residuals), falling
        back to a pair's own variance where its spread differs. ``noise_threshold``: a case
        whose per-round spread (standard deviation of the log burst statistic) exceeds this
        is flagged ``noisy``.

    Elimination and stopping
        ``indifference_zone`` (a ratio, default 1.02 = epsilon of log 1.02): a plan whose
        upper bound against the leading plan is below ``1 / indifference_zone`` leaves the
        rounds (``drop_worse_than_leader``); the race stops once the leader has passed the
        gate and no survivor can be more than the zone faster than it, or when no budget
        left could show that (epsilon-futility; the regret bound reached is reported). A
        challenger also stops, ``"unresolved"``, once even the upper end of its interval at
        ``futility_confidence`` (same boundary, over all looks), narrowed by what the
        remaining budget could add, misses ``min_speedup`` (``None`` turns this off).

    Rounds and budget
        Looks start at round ``min_rounds`` (3; at least 2, the fewest with a spread: a
        cache hit's probe looks at 2 where its record kept the spread); at most
        ``max_rounds`` rounds. The time budget is ``max_time_s`` when given; ``None``
        (default) scales it to the model: the warm-up plus ``auto_budget_rounds`` rounds
        (``min_rounds`` when more) at the first round's cost, between
        ``auto_budget_min_s`` and ``auto_budget_max_s`` (the ceiling). Warm-up may use at
        most ``warmup_budget_share`` of the budget (of ``auto_budget_min_s`` when scaled).
        A challenger leaves at warm-up, before the rounds, when even its fastest warm-up
        call (traffic-weighted over cases) is slower than ``warmup_leave_factor`` times the
        baseline's slowest settled warm-up call (divided by ``min_speedup`` when that is
        below 1): preemption only ever adds time, so such a plan cannot clear the gate, and
        the factor (20) is twice the worst sustained slowdown seen from a busy sibling
        core (10x). Native plans never leave this way. ``None`` turns the rule off.

    Bursts
        Each turn settles the plan with untimed calls until one runs within
        ``settle_tolerance`` of its recent latency (median of its last
        ``settle_reference_samples`` timed samples; at least ``settle_min_calls``, at most
        ``settle_time_s`` / ``settle_max_calls``), then times a burst of back-to-back calls:
        ``timed_calls_per_burst`` (at least 4), more for short calls so a burst lasts about
        ``burst_time_target_s`` (at most ``max_calls_per_burst``). The burst's
        ``burst_statistic`` (its minimum by default) is the per-round observation; means and
        percentiles are still reported from every timed call.

    Quiet-wait
        Before each settled burst and each warm-up, the race waits until the process's
        threads used less than ``quiesce_cpu_fraction`` of one core during a
        ``quiesce_window_s`` window, at most ``quiesce_max_s`` (``0`` turns it off).

    Warm-up
        Each plan and case runs until its latency stops trending down (median of the last
        ``warmup_window`` calls within ``warmup_tolerance`` of the window before), capped by
        ``warmup_max_calls``, ``warmup_max_time_s`` and its share of the warm-up budget.

    Timer resolution
        A call shorter than ``min_resolvable_time_s`` (or 1000 clock ticks) is timed in
        blocks of ``k`` back-to-back calls, at most ``max_block_size``.

    Allocator
        ``settle_allocator``: with the real clock on glibc, fix malloc's thresholds for the
        race (``mallopt``) so the baseline is not measured while glibc still returns and
        re-faults its buffers on every call; the page faults before and after, and advice
        for deployments, are recorded. The setting stays in the process.

    ``seed``: the seed of the per-round shuffles (``None`` draws one; always recorded).
    ``record_page_faults``: minor page faults around timed calls (POSIX only).
    ``bootstrap_resamples``: resamples for the descriptive final bootstrap interval.
    """

    confidence: float = field(
        default=0.95, validator=number(minimum=0.5, maximum=1, high_open=True, hint=", e.g. 0.95")
    )
    min_rounds: int = field(default=3, validator=integer(minimum=2))
    max_rounds: int = field(default=100)
    max_time_s: float | None = field(
        default=None, validator=number(minimum=0, low_open=True, optional=True)
    )
    auto_budget_rounds: int = field(default=15, validator=integer(minimum=1))
    auto_budget_min_s: float = field(default=30.0, validator=_positive)
    auto_budget_max_s: float = field(default=300.0, validator=_positive)
    warmup_budget_share: float = field(
        default=0.25, validator=number(minimum=0, maximum=1, low_open=True)
    )
    settle_time_s: float = field(default=0.03, validator=_non_negative)
    settle_min_calls: int = field(default=1, validator=integer(minimum=0))
    settle_max_calls: int = field(default=1000, validator=integer(minimum=1))
    settle_tolerance: float | None = field(default=0.02, validator=number(minimum=0, optional=True))
    settle_reference_samples: int = field(default=8, validator=integer(minimum=1))
    timed_calls_per_burst: int = field(default=6, validator=integer(minimum=4))
    burst_time_target_s: float = field(default=0.002, validator=_non_negative)
    max_calls_per_burst: int = field(default=32, validator=integer(minimum=4))
    burst_statistic: str = field(default="min", validator=one_of(BURST_STATISTICS))
    warmup_window: int = field(default=2, validator=integer(minimum=1))
    warmup_tolerance: float = field(default=0.02, validator=_non_negative)
    warmup_max_calls: int = field(default=40, validator=integer(minimum=1))
    warmup_max_time_s: float = field(default=2.0, validator=_positive)
    warmup_leave_factor: float | None = field(
        default=20.0, validator=number(minimum=1, low_open=True, optional=True)
    )
    min_resolvable_time_s: float = field(default=50e-6, validator=_non_negative)
    max_block_size: int = field(default=10_000, validator=integer(minimum=1))
    noise_threshold: float = field(default=0.05, validator=_positive)
    family_wise: bool = field(default=True, validator=boolean())
    pool_variance: bool = field(default=True, validator=boolean())
    indifference_zone: float = field(
        default=1.02, validator=number(minimum=1, low_open=True, hint=", e.g. 1.02")
    )
    drop_worse_than_leader: bool = field(default=True, validator=boolean())
    futility_confidence: float | None = field(
        default=0.95,
        validator=number(minimum=0, maximum=1, low_open=True, high_open=True, optional=True),
    )
    quiesce_max_s: float = field(default=0.1, validator=_non_negative)
    quiesce_window_s: float = field(default=0.002, validator=_positive)
    quiesce_cpu_fraction: float = field(default=0.2, validator=_positive)
    settle_allocator: bool = field(default=True, validator=boolean())
    seed: int | None = field(
        default=None, validator=integer(minimum=0, optional=True, hint=" (None draws one)")
    )
    record_page_faults: bool = field(default=True, validator=boolean())
    bootstrap_resamples: int = field(default=2000, validator=integer(minimum=0))

    @max_rounds.validator
    def _check_max_rounds(self, _attribute: object, value: int) -> None:
        if not is_int(value) or value < self.min_rounds:
            raise ConfigurationError(
                f"MeasurementPolicy.max_rounds must be an integer >= min_rounds ({self.min_rounds}), "
                f"got {value!r}"
            )

    @auto_budget_max_s.validator
    def _check_ceiling(self, _attribute: object, value: float) -> None:
        if value < self.auto_budget_min_s:
            raise ConfigurationError(
                f"MeasurementPolicy.auto_budget_max_s ({value!r}) must be >= auto_budget_min_s "
                f"({self.auto_budget_min_s!r}): the ceiling of the scaled budget is above its floor"
            )

    @property
    def alpha(self) -> float:
        """Total error budget, ``1 - confidence``."""
        return 1.0 - self.confidence
