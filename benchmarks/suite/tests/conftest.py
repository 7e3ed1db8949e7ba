"""The suite's unit tests import it as ``benchmarks.suite`` from the repository root.

Fixtures: ``clock``, a fake clock whose seconds pass only when a fake plan runs, and
``one_call_bursts``, the oracle's settings with no settling and one timed call a burst.
"""

import functools
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.suite.timing import OracleSettings  # noqa: E402 (needs the path above)


class FakeClock:
    """Seconds that pass only when a fake plan runs."""

    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[tuple[str, str]] = []

    def __call__(self) -> float:
        return self.now

    def plan(self, name: str, case: str, latencies_ms) -> object:
        values = itertools.cycle(latencies_ms)

        def call() -> None:
            self.log.append((name, case))
            self.now += next(values) / 1e3

        return call


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def one_call_bursts() -> Callable[..., OracleSettings]:
    """``OracleSettings`` where every round sees each fake latency as it is: no settling,
    one timed call a burst (pass the rounds and caps)."""
    return functools.partial(OracleSettings, settle_calls=0, settle_time_s=0.0, timed_calls=1)
