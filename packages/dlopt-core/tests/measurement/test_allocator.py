"""The heap allocator's regime: detected from page faults, settled for the race, advised."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from dlopt.measurement import FakeClock, MeasurementPolicy, run_race
from dlopt.measurement.allocator import ADVICE_ENV, COSTLY_FAULTS_PER_CALL, advice


class FakeAllocator:
    def __init__(self, method: str | None) -> None:
        self.method = method
        self.calls = 0

    def settle(self) -> str | None:
        self.calls += 1
        return self.method


def _race(allocator, **policy):
    clock = FakeClock()

    def call() -> None:
        clock.advance(1e-3)

    return run_race(
        {"a": [call], "b": [call]},
        [1],
        "a",
        1.5,
        MeasurementPolicy(seed=1, bootstrap_resamples=0, **policy),
        clock=clock,
        allocator=allocator,
    )


def test_the_race_settles_the_allocator_once_and_records_it() -> None:
    allocator = FakeAllocator("mallopt(test)")
    result = _race(allocator)
    assert allocator.calls == 1
    regime = result.allocator
    assert regime is not None and regime.settled and regime.method == "mallopt(test)"
    assert regime.latency_before_ms == pytest.approx(1.0)
    assert regime.advice is None or "faulted" in regime.advice


def test_a_platform_without_mallopt_is_recorded_as_not_settled() -> None:
    regime = _race(FakeAllocator(None)).allocator
    assert regime is not None and not regime.settled and "not settled" in regime.method


def test_the_policy_can_leave_the_allocator_alone() -> None:
    allocator = FakeAllocator("mallopt(test)")
    result = _race(allocator, settle_allocator=False)
    assert allocator.calls == 0 and result.allocator is None


def test_without_its_report_the_allocator_is_settled_with_no_calls_counted() -> None:
    # The revalidation probe's setting: the three counting calls per case are not made.
    def calls_of_a(report: bool):
        clock = FakeClock()
        calls = {"a": 0}

        def a() -> None:
            calls["a"] += 1
            clock.advance(1e-3)

        def b() -> None:
            clock.advance(1e-3)

        allocator = FakeAllocator("mallopt(test)")
        result = run_race(
            {"a": [a], "b": [b]},
            [1],
            "a",
            1.5,
            MeasurementPolicy(seed=1, bootstrap_resamples=0, max_rounds=3),
            clock=clock,
            allocator=allocator,
            allocator_report=report,
        )
        assert allocator.calls == 1
        return calls["a"], result.allocator

    counted, with_report = calls_of_a(report=True)
    uncounted, without = calls_of_a(report=False)
    assert with_report is not None and without is None
    assert counted - uncounted == 3


def test_advice_names_the_environment_a_server_needs() -> None:
    assert advice("eager_fp32", COSTLY_FAULTS_PER_CALL / 2, True) is None
    settled = advice("eager_fp32", 40_000, True)
    assert settled is not None and "40000 pages per call" in settled and ADVICE_ENV in settled
    unsettled = advice("eager_fp32", 40_000, False)
    assert unsettled is not None and "settle_allocator=True" in unsettled


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")
def test_settling_glibc_stops_buffers_being_faulted_back_on_every_call() -> None:
    # A fresh process: a conv net whose activations (12.8 MB) glibc hands back to the
    # system after every call under its default thresholds.
    script = textwrap.dedent(
        """
        import resource, torch
        from dlopt.measurement.allocator import GlibcAllocator
        torch.set_num_threads(1)
        layers = [torch.nn.Conv2d(32, 32, 3, padding=1) for _ in range(3)]
        model = torch.nn.Sequential(*layers).eval()
        x = torch.randn(8, 32, 112, 112)
        def faults_per_call():
            with torch.inference_mode():
                model(x)
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                for _ in range(3):
                    model(x)
                return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 3
        before = faults_per_call()
        method = GlibcAllocator().settle()
        faults_per_call()
        after = faults_per_call()
        print(before, after, method is not None)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    ).stdout.split()
    before, after, settled = float(out[0]), float(out[1]), out[2] == "True"
    if not settled:
        pytest.skip("this libc has no mallopt (not glibc)")
    assert before > COSTLY_FAULTS_PER_CALL
    assert after < before / 10
