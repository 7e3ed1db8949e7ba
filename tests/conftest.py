"""Shared fixtures: end-to-end selections with fake providers on a fake clock (exact, instant)."""

from __future__ import annotations

import pytest
import torch

from dlopt.testing.race import FakeRace


@pytest.fixture
def race() -> FakeRace:
    return FakeRace()


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(3))
