"""The race engine: setup, first-call and steady-state costs of every plan.

Steady state is measured in a race (``run_race``): rounds of settled bursts, each
challenger paired with the baseline round by round, decided by a group-sequential rule
that stays valid whenever the race stops. The modules: ``scheduler`` (timing, quiet-wait,
warm-up, bursts), ``sequential`` (boundaries, pooled variance, paired statistics),
``race`` (the race), ``results`` (what it returns), ``allocator`` (the heap regime),
``distributions`` (normal, Student t, F and binomial, in plain Python), ``clock``,
``memory``, ``stats``. Its policy is :mod:`dlopt.settings.measurement`. See
docs/measurement.md.
"""

from __future__ import annotations

from dlopt.measurement.clock import (
    Clock,
    CpuTimeSource,
    FakeClock,
    FakeCpuTime,
    MonotonicClock,
    ProcessCpuTime,
    time_call,
)
from dlopt.measurement.memory import MemoryProbe, PeakMemory, track_peak_memory
from dlopt.measurement.race import run_race
from dlopt.measurement.results import (
    AllocatorRegime,
    CandidateMeasurement,
    OpenComparison,
    RaceResult,
    RaceSummary,
)
from dlopt.measurement.stats import LatencyStats, RatioInterval
from dlopt.settings.measurement import MeasurementPolicy

__all__ = [
    "AllocatorRegime",
    "CandidateMeasurement",
    "Clock",
    "CpuTimeSource",
    "FakeClock",
    "FakeCpuTime",
    "LatencyStats",
    "MeasurementPolicy",
    "MemoryProbe",
    "MonotonicClock",
    "OpenComparison",
    "PeakMemory",
    "ProcessCpuTime",
    "RaceResult",
    "RaceSummary",
    "RatioInterval",
    "run_race",
    "time_call",
    "track_peak_memory",
]
