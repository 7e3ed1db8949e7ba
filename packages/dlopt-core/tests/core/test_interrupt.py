"""A deadline abandons the armed block of code that runs past it, and nothing else."""

from __future__ import annotations

import time

import pytest

from dlopt.platform.interrupt import Deadline, PastDeadline


def spin(seconds: float) -> None:
    """Python code that keeps running (no native wait)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def deadline_in(seconds: float) -> Deadline:
    return Deadline(time.perf_counter_ns, time.perf_counter_ns() + int(seconds * 1e9))


def test_armed_code_running_past_the_deadline_is_abandoned_soon_after_it():
    started = time.perf_counter()
    with pytest.raises(PastDeadline), deadline_in(0.2) as watch, watch.armed():
        spin(10.0)
    assert time.perf_counter() - started < 3.0
    assert watch.passed


def test_code_that_swallows_the_raise_gets_it_again_until_it_stops():
    swallowed = 0
    with pytest.raises(PastDeadline), deadline_in(0.1) as watch, watch.armed():
        for _ in range(1000):
            try:
                spin(10.0)
            except BaseException:
                swallowed += 1
                if swallowed == 3:
                    break
        spin(10.0)
    assert swallowed == 3


def test_code_outside_the_armed_block_is_never_interrupted_and_the_next_armed_block_is():
    with deadline_in(0.1) as watch:
        spin(0.5)  # the caller's own work, past the deadline: left alone
        with pytest.raises(PastDeadline), watch.armed():
            spin(10.0)
        spin(0.5)


def test_a_native_call_past_the_deadline_is_abandoned_as_it_returns():
    with pytest.raises(PastDeadline), deadline_in(0.1) as watch, watch.armed():
        time.sleep(0.5)
    assert watch.passed


def test_a_block_done_in_time_leaves_no_raise_pending():
    with deadline_in(0.3) as watch, watch.armed():
        spin(0.25)
    spin(0.6)  # past the deadline, outside it: nothing lands here
    assert not watch.passed


def test_a_fake_clock_drives_the_deadline():
    from dlopt.measurement import FakeClock

    clock = FakeClock()
    watch = Deadline(clock.now_ns, clock.now_ns() + 10**9)
    with pytest.raises(PastDeadline), watch, watch.armed():
        for _ in range(1000):
            clock.advance(0.1)
            time.sleep(0.005)
    assert clock.now_ns() < 5 * 10**9


def test_a_shielded_block_inside_armed_code_is_not_torn_and_the_raise_comes_after_it():
    from dlopt.platform.interrupt import shielded

    finished = False
    watch = deadline_in(0.1)
    with pytest.raises(PastDeadline), watch, watch.armed():
        with shielded():
            spin(0.5)  # bookkeeping past the deadline: left whole
            finished = True
        spin(10.0)
    assert finished


def test_a_wait_on_a_process_the_block_started_ends_when_the_deadline_ends_that_process():
    # No raise reaches a thread blocked in a wait (a compile waiting on its compiler):
    # on_passed ends what the block started, the wait returns, and the raise lands.
    import subprocess

    from dlopt.platform.processes import boot_ticks, end_processes, started_since

    since = boot_ticks()
    started = time.perf_counter()
    watch = Deadline(
        time.perf_counter_ns,
        time.perf_counter_ns() + int(0.3e9),
        on_passed=lambda: end_processes(started_since(since), grace_s=0.2),
    )
    with pytest.raises(PastDeadline), watch, watch.armed():
        subprocess.run(["sleep", "30"], check=False)
    assert time.perf_counter() - started < 5.0


def test_only_processes_started_since_are_ended():
    import subprocess

    from dlopt.platform.processes import boot_ticks, started_since

    before = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.05)
        since = boot_ticks()
        time.sleep(0.05)
        after = subprocess.Popen(["sleep", "30"])
        try:
            found = {info.pid for info in started_since(since)}
            assert after.pid in found and before.pid not in found
        finally:
            after.kill()
            after.wait()
    finally:
        before.kill()
        before.wait()
