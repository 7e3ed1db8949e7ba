"""Fault class: arguments of the wrong type handed to ``InferenceOptimizer``.

They are refused when the optimizer is made, with a message saying what to pass, never
accepted to fail later inside a race.
"""

from __future__ import annotations

import pytest

from dlopt import InferenceOptimizer, OptimizationPolicy
from dlopt.errors import ConfigurationError


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"policy": {"objective": "steady_state_latency"}}, "OptimizationPolicy"),
        ({"policy": "fast"}, "OptimizationPolicy"),
        ({"target": 3}, "ExecutionTarget"),
        ({"providers": "onnxruntime_cpu"}, "provider objects"),
        ({"providers": [object()]}, "provider objects"),
        ({"observers": [42]}, "callable"),
    ],
)
def test_wrong_types_are_refused_at_construction(kwargs, needle):
    with pytest.raises(ConfigurationError, match=needle):
        InferenceOptimizer(**kwargs)


def test_the_right_types_are_accepted():
    optimizer = InferenceOptimizer("cpu", OptimizationPolicy(), observers=[print])
    assert optimizer.policy == OptimizationPolicy()
