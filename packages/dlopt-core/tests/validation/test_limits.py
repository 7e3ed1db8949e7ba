"""Per-precision limits, overrides, user metrics, and the aggregate reason."""

from __future__ import annotations

import math

import pytest
import torch

from dlopt.errors import ConfigurationError
from dlopt.precision import Precision
from dlopt.validation import (
    DEFAULT_LIMITS,
    LimitOverride,
    QualityLimits,
    QualityPolicy,
    UserMetric,
    ValidationResult,
    psnr,
    top1_agreement,
    validate_outputs,
)


def noisy(ref: torch.Tensor, rel: float, seed: int = 0) -> torch.Tensor:
    """``ref`` plus noise proportional to each element (as rounding error is), with
    relative L2 error exactly ``rel``."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(ref.shape, generator=g, dtype=torch.float64) * ref.double()
    noise *= rel * torch.linalg.vector_norm(ref.double()) / torch.linalg.vector_norm(noise)
    return (ref.double() + noise).to(ref.dtype)


REF = torch.randn(64, 100, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def test_every_precision_has_defaults_and_reduced_ones_are_looser():
    assert set(DEFAULT_LIMITS) == set(Precision)
    fp32 = DEFAULT_LIMITS[Precision.FP32]
    assert fp32.max_outside_fraction == 0.0 and fp32.max_mismatch_fraction == 0.0
    for p in Precision:
        if p.is_reduced:
            assert DEFAULT_LIMITS[p].max_rel_l2 > fp32.max_rel_l2
            assert DEFAULT_LIMITS[p].min_cosine < fp32.min_cosine
    assert DEFAULT_LIMITS[Precision.FP16].max_rel_l2 < DEFAULT_LIMITS[Precision.BF16].max_rel_l2
    assert DEFAULT_LIMITS[Precision.BF16].max_rel_l2 < DEFAULT_LIMITS[Precision.INT8].max_rel_l2


def test_bf16_error_passes_bf16_limits_and_fails_fp32_with_exact_reason():
    cand = {"logits": noisy(REF, 0.01)}
    ref = {"logits": REF}
    assert validate_outputs(cand, ref, precision="bf16", case_name="batch-8").passed
    fp32 = validate_outputs(cand, ref, precision=Precision.FP32, case_name="batch-8")
    assert not fp32.passed
    assert fp32.reason.startswith(
        "case 'batch-8', output out[\"logits\"]: rel_l2 0.01 > limit 1e-05"
    )
    assert "(fp32 limits)" in fp32.reason
    leaf = fp32.leaves[0]
    assert math.isclose(leaf.rel_l2, 0.01, rel_tol=1e-6)
    assert leaf.failures[0] == "rel_l2 0.01 > limit 1e-05"
    assert leaf.limits_label == "fp32 limits"


def test_error_above_class_limit_fails_with_class_named():
    bf16 = DEFAULT_LIMITS[Precision.BF16]
    case = validate_outputs(
        (noisy(REF, bf16.max_rel_l2 * 1.5),), (REF,), precision="bf16", case_name="c"
    )
    assert not case.passed
    assert (
        f"rel_l2 {bf16.max_rel_l2 * 1.5:.3g} > limit {bf16.max_rel_l2:.3g} (bf16 limits)"
        in case.reason
    )


def test_global_precision_and_path_overrides():
    cand = {"a": noisy(REF, 0.02), "b": {"x": noisy(REF, 0.02, seed=1)}}
    ref = {"a": REF, "b": {"x": REF}}
    # Defaults for bf16 let 2% through.
    assert validate_outputs(cand, ref, precision="bf16", case_name="c").passed
    tight = LimitOverride(max_rel_l2=0.01)
    for policy in (
        QualityPolicy(limits=tight),
        QualityPolicy(per_precision={"bf16": tight}),
        QualityPolicy(per_precision={Precision.BF16: tight}),
    ):
        case = validate_outputs(cand, ref, precision="bf16", policy=policy, case_name="c")
        assert not case.passed
        assert [leaf.passed for leaf in case.leaves] == [False, False]
    # A per-precision override for another class changes nothing.
    policy = QualityPolicy(per_precision={"fp16": tight})
    assert validate_outputs(cand, ref, precision="bf16", policy=policy, case_name="c").passed
    # A path override applies to its subtree only; the label says where limits came from.
    policy = QualityPolicy(per_output={'out["b"]': tight})
    case = validate_outputs(cand, ref, precision="bf16", policy=policy, case_name="c")
    assert [leaf.passed for leaf in case.leaves] == [True, False]
    assert case.leaves[1].limits_label == 'bf16 limits + override for out["b"]'
    assert 'output out["b"]["x"]: rel_l2 0.02 > limit 0.01' in case.reason
    # The most specific path wins, and overrides can loosen fp32 when a user asks.
    policy = QualityPolicy(
        limits=LimitOverride(max_rel_l2=0.5, min_cosine=0.9, max_outside_fraction=1.0),
        per_output={'out["b"]': tight, 'out["b"]["x"]': LimitOverride(max_rel_l2=0.03)},
    )
    case = validate_outputs(cand, ref, precision="fp32", policy=policy, case_name="c")
    assert case.passed, case.reason
    limits, label = policy.limits_for("fp32", 'out["b"]["x"]')
    assert limits.max_rel_l2 == 0.03
    assert (
        label == 'fp32 limits + global override, override for out["b"], override for out["b"]["x"]'
    )
    # Paths are matched on boundaries: out["b"] is not a prefix of out["bb"].
    assert policy.limits_for("fp32", 'out["bb"]')[0].max_rel_l2 == 0.5


def test_outside_fraction_and_max_abs_limits():
    ref = torch.zeros(100, dtype=torch.float64) + 1.0
    cand = ref.clone()
    cand[:3] += 0.5  # 3% of elements far off, small rel_l2 overall
    policy = QualityPolicy(limits=LimitOverride(max_rel_l2=1.0, min_cosine=0.0))
    case = validate_outputs(cand, ref, precision="bf16", policy=policy, case_name="c")
    assert not case.passed
    assert "3 of 100 elements (3%) outside atol=0.01, rtol=0.05 > limit 2%" in case.reason
    policy = QualityPolicy(
        limits=LimitOverride(
            max_rel_l2=1.0, min_cosine=0.0, max_outside_fraction=0.05, max_abs_error=0.1
        )
    )
    case = validate_outputs(cand, ref, precision="bf16", policy=policy, case_name="c")
    assert "max_abs_error 0.5 > limit 0.1" in case.reason


def test_nonfinite_candidate_always_fails():
    cand = REF.clone()
    cand[0, 0] = math.nan
    policy = QualityPolicy(limits=LimitOverride(max_outside_fraction=1.0))
    case = validate_outputs(cand, REF, precision="int4", policy=policy, case_name="c")
    assert not case.passed
    assert "1 non-finite value(s) not in the reference" in case.reason


def test_integer_leaf_mismatch_limits():
    ref = torch.arange(100)
    cand = ref.clone()
    cand[:2] = -1
    assert not validate_outputs(cand, ref, precision="fp32", case_name="c").passed
    case = validate_outputs(cand, ref, precision="bf16", case_name="c")
    assert case.passed  # 2% <= 3% for bf16
    strict = QualityPolicy(per_output={"out": LimitOverride(max_mismatch_fraction=0.01)})
    case = validate_outputs(cand, ref, precision="bf16", policy=strict, case_name="c")
    assert "2 of 100 integer elements differ (2%) > limit 1%" in case.reason


def test_limits_are_validated():
    with pytest.raises(ConfigurationError, match="max_rel_l2 must be >= 0"):
        LimitOverride(max_rel_l2=-1.0)
    with pytest.raises(ConfigurationError, match="finite"):
        QualityLimits(atol=math.nan, rtol=0, max_outside_fraction=0, max_rel_l2=0, min_cosine=1)
    with pytest.raises(ConfigurationError, match="fraction"):
        LimitOverride(max_outside_fraction=2.0)
    with pytest.raises(ConfigurationError, match="unknown precision"):
        QualityPolicy(per_precision={"fp12": LimitOverride()})
    with pytest.raises(ConfigurationError, match="starting at 'out'"):
        QualityPolicy(per_output={"logits": LimitOverride()})
    with pytest.raises(ConfigurationError, match="training_mode"):
        QualityPolicy(training_mode="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="direction"):
        UserMetric("m", lambda c, r: 0.0, 1.0, "up")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- user metrics


def test_user_metric_rejects_and_counts_like_builtin():
    calls = []

    def max_rel(c, r):
        calls.append(1)
        return float(((c - r).abs() / r.abs().clamp_min(1e-6)).max())

    policy = QualityPolicy(
        user_metrics=(UserMetric("max_rel", max_rel, limit=1e-3, direction="lower", path="out[0]"),)
    )
    cand = (noisy(REF, 0.001),)
    case = validate_outputs(cand, (REF,), precision="bf16", policy=policy, case_name="img")
    assert calls and not case.passed
    assert all(leaf.passed for leaf in case.leaves)  # only the user metric failed
    result = case.user_metrics[0]
    assert not result.passed and result.value > 1e-3 and result.path == "out[0]"
    assert case.reason.startswith("case 'img': user metric max_rel on out[0] ")
    assert case.reason.endswith("> limit 0.001")
    verdict = ValidationResult.from_cases([case])
    assert not verdict.passed and verdict.reason == case.reason


def test_user_metric_that_raises_or_returns_nan_fails():
    def boom(c, r):
        raise RuntimeError("bad metric")

    policy = QualityPolicy(
        user_metrics=(
            UserMetric("boom", boom, limit=0.0),
            UserMetric("nan", lambda c, r: math.nan, limit=0.0),
            UserMetric("missing", lambda c, r: 1.0, limit=0.0, path="out[5]"),
        )
    )
    case = validate_outputs((REF,), (REF,), precision="fp32", policy=policy, case_name="c")
    notes = [r.note for r in case.user_metrics]
    assert notes == [
        "raised RuntimeError: bad metric",
        "returned NaN",
        "no output leaf at path out[5]",
    ]
    assert not case.passed


def test_ready_made_top1_and_psnr():
    logits = torch.randn(200, 10, generator=torch.Generator().manual_seed(0))
    flipped = logits.clone()
    flipped[:10] = -flipped[:10]  # 10 of 200 rows change their argmax (5%)
    t1 = top1_agreement(limit=0.99)
    assert t1.fn(logits, logits) == 1.0
    assert math.isclose(t1.fn(flipped, logits), 0.95)
    policy = QualityPolicy(user_metrics=(t1, psnr(limit=30.0)))
    case = validate_outputs(flipped, logits, precision="int8", policy=policy, case_name="c")
    by_name = {r.name: r for r in case.user_metrics}
    assert not by_name["top1_agreement"].passed
    assert "user metric top1_agreement 0.95 < limit 0.99" in case.reason
    # PSNR: identical -> inf (passes, stored as None with a note); known MSE -> exact dB.
    same = validate_outputs(logits, logits, precision="fp32", policy=policy, case_name="c")
    assert same.passed
    assert same.user_metrics[1].value is None and same.user_metrics[1].note == "value is inf"
    img = torch.zeros(4, 4)
    img[0, 0] = 1.0
    noisy_img = img + 0.01
    expected = 10 * math.log10(1.0 / (0.01**2))
    assert math.isclose(psnr(data_range=1.0).fn(noisy_img, img), expected, rel_tol=1e-6)


def test_aggregate_reason_names_case_path_metric_value_limit():
    ok = validate_outputs((REF,), (REF,), precision="fp32", case_name="batch-1")
    bad = validate_outputs(
        (noisy(REF, 0.034),),
        (REF,),
        precision="bf16",
        case_name="batch-8",
        policy=QualityPolicy(limits=LimitOverride(max_rel_l2=0.01)),
    )
    result = ValidationResult.from_cases([ok, bad])
    assert not result.passed
    assert result.reason.startswith(
        "case 'batch-8', output out[0]: rel_l2 0.034 > limit 0.01 (bf16 limits + global override)"
    )
    assert ValidationResult.from_cases([ok]).passed
    assert not ValidationResult.from_cases([]).passed
