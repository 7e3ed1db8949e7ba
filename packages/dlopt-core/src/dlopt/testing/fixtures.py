"""pytest fixtures shared by dlopt's test suites: a fake race and a small input.

A ``conftest.py`` makes them available to the tests below it::

    from dlopt.testing.fixtures import race, x  # noqa: F401

This module imports pytest; :mod:`dlopt.testing` itself does not import this module.
"""

from __future__ import annotations

import pytest
import torch

from dlopt.testing.fake_race import FakeRace

__all__ = ["race", "x"]


@pytest.fixture
def race() -> FakeRace:
    """End-to-end selections with fake providers on a fake clock (exact, instant)."""
    return FakeRace()


@pytest.fixture
def x() -> torch.Tensor:
    """A seeded ``(4, 16)`` float32 input, the shape :class:`StructuredMLP` takes."""
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(3))
