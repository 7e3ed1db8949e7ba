from __future__ import annotations

import pytest

from dlopt.measurement import MeasurementPolicy


@pytest.fixture
def fast_policy() -> MeasurementPolicy:
    """Default statistics; no bootstrap or page-fault syscalls, for many simulated races."""
    return MeasurementPolicy(bootstrap_resamples=0, record_page_faults=False)
