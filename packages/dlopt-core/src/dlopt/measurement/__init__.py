"""The measurement kernel: setup, first-call and steady-state costs of every plan.

Steady state is measured in a race (``run_race``): rounds of settled bursts in a shuffled
order, each challenger paired with the baseline round by round, stopping adaptively with
intervals that stay valid at every look. See docs/measurement.md.
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
from dlopt.measurement.fixed import FixedProtocolResult, fixed_protocol
from dlopt.measurement.kernel import CandidateMeasurement, RaceResult, run_race
from dlopt.measurement.memory import MemoryProbe, PeakMemory, track_peak_memory
from dlopt.measurement.policy import MeasurementPolicy
from dlopt.measurement.stats import LatencyStats, RatioInterval, alpha_for_look

__all__ = [
    "CandidateMeasurement",
    "Clock",
    "CpuTimeSource",
    "FakeClock",
    "FakeCpuTime",
    "FixedProtocolResult",
    "LatencyStats",
    "MeasurementPolicy",
    "MemoryProbe",
    "MonotonicClock",
    "PeakMemory",
    "ProcessCpuTime",
    "RaceResult",
    "RatioInterval",
    "alpha_for_look",
    "fixed_protocol",
    "run_race",
    "time_call",
    "track_peak_memory",
]
