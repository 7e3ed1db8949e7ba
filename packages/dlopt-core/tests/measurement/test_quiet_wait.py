"""The quiet-wait before each turn, driven by a fake CPU-time source on a fake clock."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from attrs import evolve

from dlopt.errors import ConfigurationError
from dlopt.measurement import (
    CpuTimeSource,
    FakeClock,
    FakeCpuTime,
    MeasurementPolicy,
    MonotonicClock,
    ProcessCpuTime,
    RaceResult,
    run_race,
)
from dlopt.platform.serialization import dumps, from_jsonable, parse_strict_json

WINDOW = 0.002


def _twins(call: Callable[[], object], policy: MeasurementPolicy, **kw: Any) -> RaceResult:
    """Race two plans that make the same ``call`` (``a`` the baseline, 1.5x to beat)."""
    return run_race({"a": [call], "b": [call]}, [1], "a", 1.5, policy, **kw)


def _policy(fast_policy: MeasurementPolicy, **kw: object) -> MeasurementPolicy:
    # Fixed rounds, no settling: every burst is one quiet-wait plus its timed calls.
    base = evolve(
        fast_policy,
        seed=3,
        min_rounds=4,
        max_rounds=4,
        settle_tolerance=None,
        settle_time_s=0.0,
        settle_min_calls=0,
        futility_confidence=None,
        quiesce_window_s=WINDOW,
    )
    return evolve(base, **kw)


def test_fake_cpu_time_integrates_spinning_over_the_clock() -> None:
    clock = FakeClock()
    cpu = FakeCpuTime(clock)
    assert isinstance(cpu, CpuTimeSource)
    cpu.spin(0.010, cores=2.0)
    clock.advance(0.004)
    assert cpu.cpu_ns() == 8_000_000 and cpu.spinning
    cpu.sleep(0.020)
    assert cpu.cpu_ns() == 20_000_000 and not cpu.spinning
    assert cpu.sleeps == 1


# Two plans, one case, 4 rounds: 2 warm-ups + 4 rounds x 2 bursts, every turn waits (a
# burst settles and waits even when the same plan ran just before).
N_WAITS = 10


@pytest.mark.parametrize("busy_windows", [0, 1, 7])
def test_waits_exactly_the_busy_windows_then_one_quiet_window(
    fast_policy: MeasurementPolicy, busy_windows: int
) -> None:
    clock = FakeClock()
    cpu = FakeCpuTime(clock)

    def call() -> None:
        clock.advance(1e-3)

    def spinner() -> None:
        # Busy for exactly `busy_windows` windows after each call.
        clock.advance(1e-3)
        cpu.spin(busy_windows * WINDOW)

    policy = _policy(fast_policy, quiesce_max_s=1.0)
    result = run_race({"a": [call], "b": [spinner]}, [1], "a", 1.5, policy, clock=clock, cpu=cpu)
    a, b = result.candidate("a"), result.candidate("b")
    # A wait after b lasts the busy windows plus the window that found the process quiet.
    after_b = b.quiet_wait_after_s / ((busy_windows + 1) * WINDOW)
    # b has 5 turns (a warm-up and 4 bursts); each is followed by a wait unless it ran last.
    assert after_b == pytest.approx(round(after_b), abs=1e-9) and round(after_b) in (4, 5)
    after_a = N_WAITS - 1 - round(after_b)  # the first warm-up follows nothing
    assert a.quiet_wait_after_s == pytest.approx(after_a * WINDOW, abs=1e-12)
    assert cpu.sleeps == N_WAITS + busy_windows * round(after_b)
    assert result.quiet_wait_s == pytest.approx(cpu.sleeps * WINDOW, abs=1e-12)
    assert result.quiet_wait_s == pytest.approx(a.quiet_wait_s + b.quiet_wait_s, abs=1e-12)
    assert a.quiet_waits_capped == b.quiet_waits_capped == 0


def test_one_wait_is_exactly_the_busy_time_plus_one_window(fast_policy) -> None:
    clock = FakeClock()
    cpu = FakeCpuTime(clock)

    def call() -> None:
        clock.advance(1e-3)

    # The process is busy for 5 windows before the race starts: only the first warm-up waits.
    cpu.spin(5 * WINDOW)
    policy = _policy(fast_policy, quiesce_max_s=1.0)
    result = _twins(call, policy, clock=clock, cpu=cpu)
    assert cpu.sleeps == N_WAITS + 5
    assert result.quiet_wait_s == pytest.approx((N_WAITS + 5) * WINDOW, abs=1e-12)
    first = max(result.candidates, key=lambda c: c.quiet_wait_s)
    other = min(result.candidates, key=lambda c: c.quiet_wait_s)
    assert first.quiet_wait_s - other.quiet_wait_s == pytest.approx(5 * WINDOW, abs=1e-12)


def test_cap_is_honoured_and_counted(fast_policy) -> None:
    clock = FakeClock()
    cpu = FakeCpuTime(clock)

    def call() -> None:
        clock.advance(1e-3)

    cap = 5 * WINDOW
    cpu.spin(1e9)  # background threads never stop
    policy = _policy(fast_policy, quiesce_max_s=cap)
    result = _twins(call, policy, clock=clock, cpu=cpu)
    assert sum(c.quiet_waits_capped for c in result.candidates) == N_WAITS
    assert result.quiet_wait_s == pytest.approx(N_WAITS * cap, abs=1e-12)
    assert all("quiet-wait hit its 10 ms cap" in c.note for c in result.candidates)
    # The wait is measurement time: the race's total includes it.
    assert result.total_time_s == pytest.approx(clock.elapsed_s, abs=1e-9)
    assert result.total_time_s >= result.quiet_wait_s + result.timed_calls * 1e-3 - 1e-9
    # The evidence round-trips as strict JSON.
    assert from_jsonable(parse_strict_json(dumps(result)), RaceResult) == result


def test_zero_cap_disables_the_wait(fast_policy) -> None:
    clock = FakeClock()
    cpu = FakeCpuTime(clock)
    cpu.spin(1e9)
    result = _twins(
        lambda: clock.advance(1e-3), _policy(fast_policy, quiesce_max_s=0.0), clock=clock, cpu=cpu
    )
    assert cpu.sleeps == 0 and result.quiet_wait_s == 0.0
    assert all(c.quiet_wait_s == 0.0 and c.quiet_waits_capped == 0 for c in result.candidates)


def test_fake_clock_without_cpu_source_never_waits(fast_policy) -> None:
    clock = FakeClock()
    result = _twins(lambda: clock.advance(1e-3), _policy(fast_policy), clock=clock)
    assert result.quiet_wait_s == 0.0
    # Only the calls moved the clock.
    n_calls = result.timed_calls + result.untimed_calls
    assert result.total_time_s == pytest.approx(n_calls * 1e-3, abs=1e-9)


def test_guard_removes_interference_from_a_spinning_neighbour(fast_policy) -> None:
    """A plan whose threads spin after its calls makes the other plan look 2x slower."""
    policy = _policy(fast_policy, min_rounds=6, max_rounds=6)

    def race(quiesce_max_s: float) -> RaceResult:
        clock = FakeClock()
        cpu = FakeCpuTime(clock)

        def victim() -> None:
            clock.advance(2e-3 if cpu.spinning else 1e-3)

        def spinner() -> None:
            clock.advance(1e-3)
            cpu.spin(0.05)

        return run_race(
            {"victim": [victim], "spinner": [spinner]},
            [1],
            "victim",
            1.02,
            evolve(policy, quiesce_max_s=quiesce_max_s),
            clock=clock,
            cpu=cpu,
        )

    off, on = race(0.0), race(0.1)
    assert off.candidate("spinner").speedup_vs_baseline.point > 1.3
    assert on.candidate("spinner").speedup_vs_baseline.point == pytest.approx(1.0, rel=1e-9)
    spinner = on.candidate("spinner")
    assert spinner.quiet_wait_after_s > on.candidate("victim").quiet_wait_after_s
    assert spinner.quiet_waits_capped == 0


def test_policy_validates_quiet_wait_fields() -> None:
    with pytest.raises(ConfigurationError, match="quiesce_max_s"):
        MeasurementPolicy(quiesce_max_s=-1)
    with pytest.raises(ConfigurationError, match="quiesce_window_s"):
        MeasurementPolicy(quiesce_window_s=0)
    with pytest.raises(ConfigurationError, match="quiesce_cpu_fraction"):
        MeasurementPolicy(quiesce_cpu_fraction=float("nan"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread clocks: Linux")
def test_process_cpu_time_sees_another_thread_and_never_decreases() -> None:
    cpu = ProcessCpuTime()
    assert cpu.per_thread
    stop = threading.Event()

    def burn() -> None:
        # time.sleep(0) keeps the GIL free for the reader; os.urandom runs without it.
        while not stop.is_set():
            os.urandom(1 << 16)

    before = cpu.cpu_ns()
    t = threading.Thread(target=burn)
    t.start()
    try:
        time.sleep(0.02)
        during = cpu.cpu_ns()
    finally:
        stop.set()
        t.join()
    after = cpu.cpu_ns()  # the thread has exited: its clock is gone, the total stays
    assert during > before
    assert after >= during


def test_real_clock_gets_the_process_source_by_default(fast_policy) -> None:
    result = _twins(lambda: None, _policy(fast_policy, quiesce_max_s=0.05), clock=MonotonicClock())
    assert result.quiet_wait_s > 0
    assert result.total_time_s >= result.quiet_wait_s
