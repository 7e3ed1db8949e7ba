"""``PlanCall``: the one way the pipeline calls a plan's code and keeps what it raised."""

from __future__ import annotations

import subprocess

import pytest

from dlopt.errors import PlanCall, SelectionCancelled


def test_a_call_that_returns_keeps_its_value():
    called = PlanCall.of(lambda: [1, 2])
    assert called.value == [1, 2] and not called.failed and called.describe() == ""


@pytest.mark.parametrize(
    "error",
    [RuntimeError("no kernel for op"), SystemExit(3), subprocess.CalledProcessError(1, "x")],
)
def test_what_a_plan_raises_is_kept_as_its_outcome(error):
    def fails():
        raise error

    called = PlanCall.of(fails)
    assert called.failed and called.error is error and called.value is None
    assert called.describe() == f"{type(error).__name__}: {error}"


def test_dlopt_s_own_signals_and_ctrl_c_go_on():
    def cancelled():
        raise SelectionCancelled("stopped")

    with pytest.raises(SelectionCancelled):
        PlanCall.of(cancelled, passes=(SelectionCancelled,))

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        PlanCall.of(interrupted)
