"""Fault class: a plan that writes into its inputs.

Each candidate's first calls run on its own copy of the inputs, fingerprinted around the
calls; a plan that changes them is rejected at ``first_call`` naming the input, and every
plan judged after it still sees the original inputs.
"""

from __future__ import annotations

import torch

from dlopt.testing import FailingStage
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
    assert decision.report.candidate("exact").parity.passed
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

    class ScaleMutator:
        precision = "fp32"
        name = "scale_mutator"

        def probe(self, context):
            from dlopt.plugins.contract import ProviderAvailability

            return ProviderAvailability.ok()

        def build(self, model, context):
            from dlopt.plugins.contract import BuiltPlan

            def runner(x, *, scale):
                out = model(x, scale=scale)
                scale.add_(1.0)
                return out

            return BuiltPlan(runner=runner)

    model = KwNet().eval()
    x = torch.randn(2, 8)
    scale = torch.ones(1)
    decision = race.optimizer(race.fake("eager_fp32", 1e-3), ScaleMutator()).select_signature(
        model, x, scale=scale
    )
    evidence = decision.report.candidate("scale_mutator")
    assert evidence.error.stage == "first_call"
    assert 'kwargs["scale"]' in evidence.error.message
    assert torch.equal(scale, torch.ones(1))
