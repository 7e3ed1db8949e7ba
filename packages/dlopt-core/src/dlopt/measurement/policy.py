"""``MeasurementPolicy``: every knob of the measurement kernel, with defaults that work."""

from __future__ import annotations

from attrs import field, frozen

from dlopt.config_checks import boolean, integer, is_int, number
from dlopt.errors import ConfigurationError

_positive = number(minimum=0, low_open=True)
_non_negative = number(minimum=0)


@frozen
class MeasurementPolicy:
    """How the measurement kernel times candidates and when it stops.

    Statistics
        ``confidence``: the confidence of every reported interval. The intervals that decide
        (``CandidateMeasurement.speedup_vs_baseline``) hold at this level *simultaneously over
        every look* of the race (and over all challengers when ``family_wise`` is set); see
        docs/measurement.md. ``noise_threshold``: a latency whose interval half-width exceeds
        this fraction of its mean is flagged ``noisy``.

    Rounds and budget
        ``min_rounds`` rounds run before any candidate is dropped or resolved (a t-interval
        needs a few degrees of freedom); the race stops after ``max_rounds`` rounds or once
        ``max_time_s`` of measurement time is spent, whichever comes first; comparisons not
        resolved by then are reported ``"unresolved"``. A challenger stops early, also
        ``"unresolved"``, once even the upper end of a loose ``futility_confidence``
        interval (80% by default) is below ``min_speedup``: it will almost surely never be
        shown faster, and stopping it cannot cause a wrong switch (``None`` turns this off).
        With ``futility_uses_budget`` (default) that upper end is first reduced by the
        half-width the decision interval is projected to still have at the last round the
        budget allows (from the spread seen so far): a challenger that could not be shown
        faster even if its optimistic mean held until the end stops now.

    Bursts
        Each turn settles the plan with untimed calls, then takes ``timed_calls_per_burst``
        timed samples. Settling ends once an untimed call runs within ``settle_tolerance``
        of the plan's own recent latency (the median of its last ``settle_reference_samples``
        timed samples; after at least ``settle_min_calls`` calls), and never lasts more than
        ``settle_time_s`` or ``settle_max_calls`` calls. With ``continue_same_plan``
        (default) each round starts with the plan and case that ended the previous round (the
        rest of the order is shuffled); that burst follows its own calls and is not settled.
        ``settle_tolerance=None`` settles for the full ``settle_time_s`` every turn.

    Quiet-wait
        Before each settled burst and before each warm-up, the race waits until the
        process is quiet: it sleeps in windows of ``quiesce_window_s`` until the process's
        threads used less than ``quiesce_cpu_fraction`` of one core during a window, for
        at most ``quiesce_max_s`` (``0`` turns the wait off). Worker threads that keep
        spinning after a plan's call (ONNX Runtime with spinning on, OpenMP with a long
        blocktime) would otherwise slow the next plan's calls. The wait counts in the
        race's time; it needs a real CPU-time source (see ``run_race``'s ``cpu``).

    Warm-up
        After the first call, each plan and case is warmed until its latency stops trending
        down (median of the last ``warmup_window`` calls within ``warmup_tolerance`` of the
        window before), capped by ``warmup_max_calls`` and ``warmup_max_time_s``.

    Timer resolution
        A call shorter than ``min_resolvable_time_s`` (or 1000 ticks of the clock, if
        coarser) is timed in blocks of ``k`` back-to-back calls; ``k`` is recorded.

    ``keep_measuring_winners``: a challenger resolved "faster" keeps running in the rounds
    while other comparisons are open (its verdict is fixed), so two winners, or a winner
    and a native baseline, can be paired on the same rounds afterwards.

    ``seed``: the seed of the per-round shuffles; ``None`` draws one (always recorded).
    ``record_page_faults``: minor page faults around timed calls (POSIX only).
    ``bootstrap_resamples``: resamples for the descriptive final bootstrap interval of each
    paired ratio (0 turns it off).
    """

    confidence: float = field(
        default=0.95, validator=number(minimum=0.5, maximum=1, high_open=True, hint=", e.g. 0.95")
    )
    min_rounds: int = field(default=4, validator=integer(minimum=3))
    max_rounds: int = field(default=40)
    max_time_s: float = field(default=30.0, validator=_positive)
    settle_time_s: float = field(default=0.03, validator=_non_negative)
    settle_min_calls: int = field(default=1, validator=integer(minimum=0))
    settle_max_calls: int = field(default=1000, validator=integer(minimum=1))
    settle_tolerance: float | None = field(default=0.10, validator=number(minimum=0, optional=True))
    timed_calls_per_burst: int = field(default=2, validator=integer(minimum=1))
    warmup_window: int = field(default=2, validator=integer(minimum=1))
    warmup_tolerance: float = field(default=0.02, validator=_non_negative)
    warmup_max_calls: int = field(default=40, validator=integer(minimum=1))
    warmup_max_time_s: float = field(default=2.0, validator=_positive)
    min_resolvable_time_s: float = field(default=50e-6, validator=_non_negative)
    max_block_size: int = field(default=10_000, validator=integer(minimum=1))
    noise_threshold: float = field(default=0.05, validator=_positive)
    family_wise: bool = field(default=True, validator=boolean())
    drop_worse_than_leader: bool = field(default=True, validator=boolean())
    keep_measuring_winners: bool = field(default=True, validator=boolean())
    futility_confidence: float | None = field(
        default=0.8,
        validator=number(minimum=0, maximum=1, low_open=True, high_open=True, optional=True),
    )
    continue_same_plan: bool = field(default=True, validator=boolean())
    futility_uses_budget: bool = field(default=True, validator=boolean())
    settle_reference_samples: int = field(default=8, validator=integer(minimum=1))
    quiesce_max_s: float = field(default=0.1, validator=_non_negative)
    quiesce_window_s: float = field(default=0.002, validator=_positive)
    quiesce_cpu_fraction: float = field(default=0.2, validator=_positive)
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

    @property
    def alpha(self) -> float:
        """Total error budget, ``1 - confidence``."""
        return 1.0 - self.confidence

    @property
    def max_looks(self) -> int:
        """How many times the race may look at its intervals (rounds min_rounds..max_rounds)."""
        return self.max_rounds - self.min_rounds + 1
