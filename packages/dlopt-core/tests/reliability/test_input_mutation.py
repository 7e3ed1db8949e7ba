"""Fault class: a plan that writes into its inputs.

Each candidate's first calls run on its own copy of the inputs, fingerprinted around the
calls; a plan that changes them is rejected at ``first_call`` naming the input, and every
plan judged after it still sees the original inputs.
"""

from __future__ import annotations

import pytest
import torch

from dlopt.testing import FailingStage, FakeProvider
from dlopt.testing.models import StructuredMLP as SmallNet


def test_a_plan_that_zeroes_its_input_is_rejected_and_later_plans_still_validate(race, x):
    original = x.clone()
    decision = race.optimizer(
        race.fake("eager_fp32", 3e-3),
        race.fake("mutator", 1e-4, fail=FailingStage.MUTATE_INPUTS),
        race.fake("exact", 1e-3),
    ).select_signature(SmallNet(), x)

    mutator = decision.report.candidate("mutator")
    assert mutator.status == "rejected" and mutator.error.stage == "first_call"
    assert "args[0]" in mutator.error.message and "input" in mutator.error.message
    # The exact plan judged after it passes: it saw untouched inputs.
    assert decision.report.candidate("exact").validation.first_calls.passed
    assert decision.selected_plan == "exact"
    # The user's tensor is untouched.
    assert torch.equal(x, original)


def test_keyword_inputs_are_checked_too(race):
    class KwNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x, *, scale):
            return self.fc(x) * scale

    class ScaleMutator(FakeProvider):
        def build(self, model, context):
            from dlopt.contract.provider import BuiltPlan

            def runner(x, *, scale):
                out = model(x, scale=scale)
                scale.add_(1.0)
                return out

            return BuiltPlan(runner=runner)

    model = KwNet().eval()
    x = torch.randn(2, 8)
    scale = torch.ones(1)
    mutator = ScaleMutator("scale_mutator")
    decision = race.optimizer(race.fake("eager_fp32", 1e-3), mutator).select_signature(
        model, x, scale=scale
    )
    evidence = decision.report.candidate("scale_mutator")
    assert evidence.error.stage == "first_call"
    assert 'kwargs["scale"]' in evidence.error.message
    assert torch.equal(scale, torch.ones(1))


class _WritesIntoItsInput(torch.nn.Module):
    """A model whose own forward changes the caller's tensor (``x.add_(1)``)."""

    def __init__(self, kwarg: bool = False) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)
        self.kwarg = kwarg

    def forward(self, x, mask=None):
        (mask if self.kwarg else x).add_(1)
        return self.fc(x)


def test_a_model_that_writes_into_its_input_is_named_and_the_callers_tensor_is_untouched(race, x):
    from dlopt.errors import ReferenceCheckError

    original = x.clone()
    with pytest.raises(ReferenceCheckError) as caught:
        race.optimizer(race.fake("eager_fp32", 1e-3)).select_signature(
            _WritesIntoItsInput().eval(), x
        )
    message = str(caught.value)
    assert "the model writes into its inputs (args[0] changed" in message
    assert "x.add_(1)" in message and "not deterministic" not in message
    assert torch.equal(x, original)


def test_an_in_place_write_to_a_keyword_input_is_named_too(race, x):
    from dlopt.errors import ReferenceCheckError

    mask = torch.zeros(3)
    with pytest.raises(ReferenceCheckError, match=r"kwargs\['mask'\]|kwargs\[\"mask\"\]|mask"):
        race.optimizer(race.fake("eager_fp32", 1e-3)).select_signature(
            _WritesIntoItsInput(kwarg=True).eval(), x, mask=mask
        )
    assert torch.equal(mask, torch.zeros(3))


def test_the_reference_runs_on_a_copy_even_for_a_well_behaved_model(race, x):
    seen = []

    class Records(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(16, 4)

        def forward(self, t):
            seen.append(t)
            return self.fc(t)

    race.optimizer(race.fake("eager_fp32", 1e-3)).select_signature(Records().eval(), x).close()
    assert seen and all(t is not x and t.data_ptr() != x.data_ptr() for t in seen)
