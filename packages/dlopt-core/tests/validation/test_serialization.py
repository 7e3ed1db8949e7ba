"""Every evidence type round-trips through dlopt.platform.serialization as strict JSON."""

from __future__ import annotations

import math
import re

import torch

from dlopt.platform.serialization import dumps, from_jsonable, parse_strict_json
from dlopt.validation import (
    CaseValidation,
    LimitOverride,
    ModelFingerprint,
    QualityLimits,
    QualityPolicy,
    UserMetric,
    ValidationResult,
    default_limits,
    psnr,
    top1_agreement,
    validate_outputs,
)
from dlopt.validation.user_metrics import UnresolvedMetricFn


def test_validation_result_with_nan_metrics_round_trips_without_nan():
    ref = {"a": torch.randn(8, 3), "b": torch.zeros(4), "i": torch.arange(3)}
    cand = {"a": ref["a"].clone(), "b": torch.ones(4), "i": torch.arange(3)}
    cand["a"][0, 0] = math.nan
    policy = QualityPolicy(
        user_metrics=(psnr(limit=1.0, path='out["a"]'), top1_agreement(path='out["a"]'))
    )
    cases = [
        validate_outputs(cand, ref, precision="bf16", policy=policy, case_name="nan"),
        validate_outputs(ref, ref, precision="fp32", policy=policy, case_name="same"),
        CaseValidation.failed("crash", "fp16", "the plan raised RuntimeError: boom"),
    ]
    result = ValidationResult.from_cases(cases)
    text = dumps(result)
    assert re.search(r"[:\[,]\s*-?(NaN|Infinity)", text) is None
    back = from_jsonable(parse_strict_json(text), ValidationResult)
    assert back == result
    assert not back.passed and back.cases[0].leaves[1].rel_l2 is None  # zero-norm reference


def test_limits_policy_and_fingerprint_round_trip():
    for obj, cls in (
        (default_limits("int8"), QualityLimits),
        (ModelFingerprint.of(torch.nn.Linear(2, 2)), ModelFingerprint),
    ):
        assert from_jsonable(parse_strict_json(dumps(obj)), cls) == obj
    policy = QualityPolicy(
        limits=LimitOverride(atol=1e-3),
        per_precision={"bf16": LimitOverride(max_rel_l2=0.02)},
        per_output={'out["x"]': LimitOverride(min_cosine=0.9)},
        user_metrics=(
            top1_agreement(0.95, dim=1),
            psnr(30.0, data_range=2.0),
            UserMetric("l", lambda c, r: 1.0, 0.5),
        ),
        training_mode="warn",
    )
    back = from_jsonable(parse_strict_json(dumps(policy)), QualityPolicy)
    assert back == policy
    # Ready-made metrics come back working, with their parameters; lambdas cannot.
    assert back.user_metrics[0].fn == policy.user_metrics[0].fn
    assert back.user_metrics[1].fn.data_range == 2.0
    assert isinstance(back.user_metrics[2].fn, UnresolvedMetricFn)
    assert (
        from_jsonable(parse_strict_json(dumps(QualityPolicy())), QualityPolicy) == QualityPolicy()
    )


def test_parse_strict_json_refuses_nan_and_infinity():
    for constant in ("NaN", "Infinity", "-Infinity"):
        try:
            parse_strict_json(f'{{"rel_l2": {constant}}}')
        except ValueError as exc:
            assert constant.lstrip("-") in str(exc)
        else:
            raise AssertionError(f"{constant} was accepted")
    assert parse_strict_json('{"rel_l2": null}') == {"rel_l2": None}
