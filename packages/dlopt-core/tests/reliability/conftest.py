"""Fixtures shared by the reliability tests."""

from __future__ import annotations

import pytest
import torch

from dlopt.evidence.report import OptimizationReport
from dlopt.testing.fake_race import FakeRace
from dlopt.testing.models import StructuredMLP


@pytest.fixture(scope="session")
def finished_report() -> OptimizationReport:
    """A finished race's report (fake clock: instant) that selected ``fast`` over eager."""
    race = FakeRace()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(3))
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)
    ).select_signature(StructuredMLP(), x)
    decision.close()
    assert decision.selected_plan == "fast"
    return decision.report
