"""Fault class: a plan that is right on its first call and wrong afterwards.

Stale caches, reused output buffers and CUDA-graph replays pass a first-call check and then
serve wrong numbers. Every survivor's last measured outputs are validated after the race,
and the selected plan runs every case once more and is validated before it is returned.
"""

from __future__ import annotations

import torch

from dlopt.contract.provider import BuiltPlan, ProviderAvailability
from dlopt.events import EventKind
from dlopt.precision import Precision
from dlopt.testing import FailingStage
from dlopt.testing.models import StructuredMLP as SmallNet


def test_a_plan_that_serves_zeros_after_its_first_call_is_rejected_after_the_race(race, x):
    stale = race.fake("stale", 1e-4, fail=FailingStage.STALE_OUTPUTS)
    decision = race.optimizer(
        race.fake("eager_fp32", 3e-3), stale, race.fake("honest", 1e-3)
    ).select_signature(SmallNet(), x)

    assert decision.selected_plan == "honest"
    evidence = decision.report.candidate("stale")
    assert evidence.status == "rejected"
    assert evidence.error.stage == "revalidation"
    # The evidence keeps the metrics of the failed check, next to the first-call parity.
    assert evidence.validation.first_calls.passed
    assert evidence.revalidation is not None and not evidence.revalidation.passed
    assert evidence.revalidation.cases[0].leaves[0].rel_l2 > 0.5
    # The winner's own re-checks are in its evidence too.
    honest = decision.report.candidate("honest")
    assert honest.revalidation.passed and honest.final_check.passed
    torch.testing.assert_close(decision(x), SmallNet()(x))


class FlipOnRaceEnd:
    """A plan that computes the model until told the race is over, then returns zeros."""

    precision = Precision.FP32

    def __init__(self, name: str, advance) -> None:
        self.name = name
        self.advance = advance
        self.broken = False

    def probe(self, context):
        return ProviderAvailability.ok()

    def build(self, model, context):
        def runner(*args, **kwargs):
            self.advance(1e-4)
            out = model(*args, **kwargs)
            return torch.zeros_like(out) if self.broken else out

        return BuiltPlan(runner=runner)

    def observe(self, event) -> None:
        if event.kind is EventKind.RACE_FINISHED:
            self.broken = True


def test_the_selected_plan_is_validated_on_fresh_calls_and_selection_goes_on_without_it(race, x):
    flip = FlipOnRaceEnd("flip", race.clock.advance)
    optimizer = race.optimizer(race.fake("eager_fp32", 3e-3), flip, race.fake("honest", 1e-3))
    optimizer.observers = (flip.observe,)
    decision = optimizer.select_signature(SmallNet(), x)

    assert decision.selected_plan == "honest"
    evidence = decision.report.candidate("flip")
    assert evidence.status == "rejected" and evidence.error.stage == "revalidation"
    assert "fresh call" in evidence.error.message
    # Its last measured calls were fine: the failure is the fresh call's.
    assert evidence.revalidation.passed
    assert not evidence.final_check.passed
    assert decision.report.candidate("honest").final_check.passed
