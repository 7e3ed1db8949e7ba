"""fp32 limits widened to the reference's own fp32 rounding, measured against float64."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlopt.errors import ConfigurationError
from dlopt.testing.models import StructuredMLP
from dlopt.validation import (
    LimitOverride,
    QualityPolicy,
    capture_reference,
    default_limits,
    validate_outputs,
)
from dlopt.validation.rounding import LeafRounding, measure_fp32_rounding


class Cancelling(nn.Module):
    """Rounds badly in fp32 on purpose: adding then removing 256 keeps ~16 bits of the
    linear layer's outputs, a relative error of ~2e-5 that float64 does not make (the
    kind of rounding a deep network accumulates, in one layer)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(16, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.linear(x) + 256.0) - 256.0


class Float32Only(nn.Module):
    """Builds an fp32 tensor inside forward: it cannot run in float64."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(x.shape[-1], 4, dtype=torch.float32)


class BranchesOnDtype(nn.Module):
    """Computes something else in float64: that is not rounding."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.dtype == torch.float64 else x


def _input(rows: int = 32) -> torch.Tensor:
    return torch.randn(rows, 16, generator=torch.Generator().manual_seed(5))


def _float64_result(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    import copy

    with torch.inference_mode():
        return copy.deepcopy(model).double()(x.double())


def test_measured_rounding_is_the_distance_from_a_float64_run():
    model, x = Cancelling().eval(), _input()
    reference = capture_reference(model, [((x,), {})])
    case = reference.cases[0]
    rounding = case.fp32_rounding["out"]
    exact = _float64_result(model, x)
    diff = case.outputs.double() - exact
    assert rounding.rel_l2 == pytest.approx(float(diff.norm() / exact.norm()))
    assert rounding.max_abs_error == pytest.approx(float(diff.abs().max()))
    # The fixture really rounds beyond the fixed fp32 limit, and within plausibility.
    assert 1e-5 < rounding.rel_l2 < 1e-4
    assert reference.fp32_rounding_note is None


def test_a_plan_within_the_references_own_rounding_passes_and_a_real_error_fails():
    model, x = Cancelling().eval(), _input()
    case = capture_reference(model, [((x,), {})]).cases[0]
    with torch.inference_mode():
        # The same function rounded differently: the linear layer alone, no cancellation.
        other_rounding = model.linear(x)
    fixed = validate_outputs(other_rounding, case.outputs, precision="fp32", case_name="c")
    assert not fixed.passed and "(fp32 limits)" in fixed.reason
    widened = validate_outputs(other_rounding, case, precision="fp32", case_name="c")
    assert widened.passed, widened.reason
    assert "widened to 10x the reference's own fp32 rounding" in widened.leaves[0].limits_label
    # A semantic error (a 1% shift) is far above any rounding and still fails.
    wrong = validate_outputs(other_rounding * 1.01, case, precision="fp32", case_name="c")
    assert not wrong.passed and "rel_l2" in wrong.reason


def test_small_networks_keep_the_fixed_fp32_limits():
    model, x = StructuredMLP().eval(), torch.randn(4, 16)
    case = capture_reference(model, [((x,), {})]).cases[0]
    assert case.fp32_rounding["out"].rel_l2 < 1e-6  # measured, and far below 1e-5
    with torch.inference_mode():
        out = model(x)
    result = validate_outputs(out, case, precision="fp32", case_name="c")
    assert result.leaves[0].limits_label == "fp32 limits"


def test_widening_loosens_fp32_only_and_never_tightens():
    policy = QualityPolicy()
    rounding = LeafRounding(rel_l2=3e-5, max_abs_error=6e-5)
    limits, label = policy.limits_for("fp32", "out", rounding)
    assert limits.max_rel_l2 == pytest.approx(3e-4) and limits.atol == pytest.approx(6e-4)
    assert limits.min_cosine <= default_limits("fp32").min_cosine
    assert "rel_l2 3e-05, max abs 6e-05 from float64" in label
    # Lower-precision classes are already far looser: untouched.
    assert policy.limits_for("bf16", "out", rounding) == (default_limits("bf16"), "bf16 limits")
    # Rounding below the fixed limits leaves them as they are.
    tiny = LeafRounding(rel_l2=1e-8, max_abs_error=1e-8)
    assert policy.limits_for("fp32", "out", tiny) == (default_limits("fp32"), "fp32 limits")


def test_a_users_override_still_wins_over_the_widening():
    policy = QualityPolicy(per_precision={"fp32": LimitOverride(max_rel_l2=2e-5)})
    limits, label = policy.limits_for("fp32", "out", LeafRounding(3e-5, 6e-5))
    assert limits.max_rel_l2 == 2e-5
    assert label.endswith("fp32 override")


def test_factor_zero_skips_the_float64_run():
    model, x = Cancelling().eval(), _input()
    reference = capture_reference(model, [((x,), {})], QualityPolicy(fp32_rounding_factor=0))
    assert reference.cases[0].fp32_rounding == {}
    with pytest.raises(ConfigurationError, match="fp32_rounding_factor"):
        QualityPolicy(fp32_rounding_factor=-1)


def test_a_model_that_cannot_run_in_float64_keeps_the_fixed_limits_and_says_why():
    reference = capture_reference(Float32Only().eval(), [((_input(),), {})])
    assert reference.cases[0].fp32_rounding == {}
    assert "did not run in float64" in reference.fp32_rounding_note


def test_a_float64_run_that_computes_something_else_is_not_taken_for_rounding():
    per_case, note = measure_fp32_rounding(BranchesOnDtype(), [((_input(),), {}, _input())])
    assert note is None and per_case == [{}]


def test_outputs_without_float_leaves_are_skipped():
    class Mixed(nn.Module):
        def forward(self, x: torch.Tensor) -> dict:
            return {"logits": x * 3, "count": x.shape[0], "label": None}

    x = _input()
    (measured,), note = measure_fp32_rounding(Mixed(), [((x,), {}, Mixed()(x))])
    assert note is None and set(measured) == {'out["logits"]'}


@pytest.mark.parametrize("factor, passes", [(10.0, True), (0.0, False)])
def test_a_race_validates_fp32_plans_against_the_measured_rounding(race, factor, passes):
    # Off by 5e-5 of the mean output everywhere: ~4e-5 relative, more than the fixed
    # fp32 limits allow, within 10x this model's own rounding (~2e-5).
    near = race.fake("near", 1e-3, fail="validation", error_scale=5e-5)
    optimizer = race.optimizer(
        race.fake("eager_fp32", 2e-3), near, quality=QualityPolicy(fp32_rounding_factor=factor)
    )
    decision = optimizer.select_signature(Cancelling().eval(), _input())
    evidence = decision.report.candidate("near")
    assert (evidence.error is None) is passes, evidence.error
