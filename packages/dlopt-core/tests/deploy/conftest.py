"""What a served answer is checked against: the limits the plan was validated to."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from dlopt.precision import Precision
from dlopt.validation.result import validate_outputs


def _assert_answers_as_validated(served: np.ndarray, expected: np.ndarray, precision: str) -> None:
    """An fp32 plan answers as eager to 1e-3; a lower-precision plan (the race may pick an
    int8 one) within the built-in limits of its precision, as its validation held it."""
    if Precision.parse(precision) is Precision.FP32:
        np.testing.assert_allclose(served, expected, rtol=1e-3, atol=1e-3)
        return
    result = validate_outputs(
        torch.from_numpy(served),
        torch.from_numpy(expected),
        precision=precision,
        case_name="served answer",
    )
    assert result.passed, result.reason


@pytest.fixture
def assert_answers_as_validated() -> Callable[[np.ndarray, np.ndarray, str], None]:
    """``check(served, expected, precision)``: the served answer is within the limits
    the plan of ``precision`` was validated to."""
    return _assert_answers_as_validated
