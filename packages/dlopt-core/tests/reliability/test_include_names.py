"""Fault class: include/exclude names that match no registered plan (typos).

A name that matches nothing is an error with the closest registered names; a registered
plan that is unavailable on this machine stays allowed, so configs stay portable.
"""

from __future__ import annotations

import pytest

from dlopt.errors import ConfigurationError
from dlopt.settings.policy import OptimizationPolicy, check_plan_names

REGISTERED = [
    "eager_fp32",
    "native_bf16",
    "onnxruntime_cpu",
    "onnxruntime_cpu_int8",
    "tensorrt_fp16",
]


def test_a_typo_in_include_names_the_closest_plans():
    policy = OptimizationPolicy(include=["onnxruntime_cpu_int", "native_bf16"])
    with pytest.raises(ConfigurationError) as info:
        check_plan_names(policy, REGISTERED)
    message = str(info.value)
    assert "include" in message and "'onnxruntime_cpu_int'" in message
    assert "onnxruntime_cpu_int8" in message


def test_a_typo_in_exclude_is_an_error_too():
    with pytest.raises(ConfigurationError, match=r"exclude.*'tensort_fp16'.*tensorrt_fp16"):
        check_plan_names(OptimizationPolicy(exclude="tensort_fp16"), REGISTERED)


def test_a_name_with_no_close_match_lists_the_registered_plans():
    with pytest.raises(ConfigurationError, match="registered plans: eager_fp32"):
        check_plan_names(OptimizationPolicy(include=["zzzz"]), REGISTERED)


def test_registered_names_pass_even_when_unavailable_here():
    # tensorrt_fp16 is registered (dlopt-tensorrt installed) even on a CPU-only box.
    check_plan_names(OptimizationPolicy(include=["tensorrt_fp16"]), REGISTERED)
    check_plan_names(OptimizationPolicy(), REGISTERED)
    check_plan_names(OptimizationPolicy(exclude=["eager_fp32"]), REGISTERED)


def test_the_optimizer_refuses_an_include_typo_before_building_anything(race, x):
    from dlopt.testing.models import StructuredMLP

    fast = race.fake("fast", 1e-3)
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), fast, include=["fsat"])
    with pytest.raises(ConfigurationError, match=r"'fsat'.*did you mean 'fast'"):
        optimizer.select_signature(StructuredMLP(), x)
    assert fast.builds == 0


def test_the_cli_reports_an_include_typo_as_a_usage_error(capsys):
    from dlopt.cli import main

    code = main(["select", "--demo", "--include", "onnxruntime_cpuu", "--max-measure-time", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "'onnxruntime_cpuu'" in err and "Traceback" not in err
