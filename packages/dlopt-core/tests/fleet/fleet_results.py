"""A :class:`FleetResult` for tests that need one without a race."""

from __future__ import annotations

from typing import Any

import attrs

from dlopt.fleet.result_store import Failure, FleetResult

CRASH = Failure("bad", "measure", "crashed", "crashed at measure (SIGSEGV)")


def fleet_result(**changes: Any) -> FleetResult:
    """A decided race of job ``j`` on kind ``k`` (plan ``fast``, one crashed plan), with
    ``changes``."""
    base = FleetResult(
        spec="s",
        job="j",
        kind="k",
        status="done",
        node_id="n1",
        host="h",
        pid=7,
        started_at=1.0,
        ended_at=2.5,
        time_to_decision_s=1.5,
        selected_plan="fast",
        failures=(CRASH,),
    )
    return attrs.evolve(base, **changes)
