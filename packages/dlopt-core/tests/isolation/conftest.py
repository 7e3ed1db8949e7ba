"""Isolated selections of a tiny model with plans that crash or hang (``faulty_plans``).

Every test bounds its own time (``faulty_plans.bounded``, SIGALRM) and the watchdogs are
set to seconds, so a supervisor that failed to kill a hung worker fails the test instead
of holding the suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import pytest

# The tests import ``faulty_plans`` by name, and so does every worker they start (it
# inherits the host's import path).
sys.path.insert(0, str(Path(__file__).parent))

import faulty_plans


@pytest.fixture
def plain_decision_plan() -> str:
    """The plan a race without any culprit serves (in process: no worker needed)."""
    model, workload = faulty_plans.tiny_model()
    policy = attrs.evolve(faulty_plans.isolated_policy(), isolation="in_process")
    with faulty_plans.optimizer_with(policy=policy).select(model, workload) as decision:
        return decision.selected_plan
