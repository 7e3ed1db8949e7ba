"""What ``dlopt.plugin.Provider`` gives a build: its options with defaults, the probe's
answer or its reason, a refusal of a model in training mode, and the cases with their
reference outputs."""

from __future__ import annotations

import attrs
import pytest
import torch

from dlopt.plugin import (
    PreparedCase,
    Provider,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt.testing.models import SmallConvNet, StructuredMLP


@attrs.frozen
class KnobOptions:
    knob: int = attrs.field(default=3, metadata={"help": "a knob"})


class KnobPlan(Provider):
    name = "knob_plan"
    options_type = KnobOptions

    def __init__(self, available: bool = True) -> None:
        self.available = available
        self.probes = 0

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        self.probes += 1
        if self.available:
            return ProviderAvailability.ok()
        return ProviderAvailability.unavailable("the device is asleep", "wake it")


def test_plan_options_are_the_contexts_or_the_defaults_outside_a_race() -> None:
    plan = KnobPlan()
    assert plan.plan_options(ProviderContext()) == KnobOptions()
    given = KnobOptions(knob=7)
    assert plan.plan_options(ProviderContext(options=given)) is given


def test_options_of_another_type_say_how_to_pass_them() -> None:
    with pytest.raises(ProviderBuildError, match=r"knob_plan: its options must be a KnobOptions"):
        KnobPlan().plan_options(ProviderContext(options={"knob": 7}))


def test_a_provider_without_options_type_gets_the_context_options_as_they_are() -> None:
    plan = KnobPlan()
    plan.options_type = None
    assert plan.plan_options(ProviderContext()) is None


def test_require_available_takes_the_races_answer_without_probing_again() -> None:
    plan = KnobPlan(available=False)
    answer = ProviderAvailability.ok("seen by the race")
    assert plan.require_available(ProviderContext(availability=answer)) is answer
    assert plan.probes == 0


def test_require_available_probes_outside_a_race_and_raises_its_reason() -> None:
    plan = KnobPlan(available=False)
    with pytest.raises(ProviderBuildError, match="knob_plan is unavailable: the device is asleep"):
        plan.require_available(ProviderContext())
    assert plan.probes == 1


def test_a_model_in_training_mode_is_refused_naming_its_modules() -> None:
    model = SmallConvNet().train()
    with pytest.raises(ProviderBuildError, match=r"knob_plan: bn is in training mode.*eval\(\)"):
        KnobPlan().refuse_training_mode(model)
    KnobPlan().refuse_training_mode(model.eval())


def test_training_mode_of_modules_that_compute_alike_in_both_modes_is_allowed() -> None:
    KnobPlan().refuse_training_mode(StructuredMLP().train())  # Linear and ReLU only


def test_cases_with_reference_runs_the_model_for_a_workload_given_directly() -> None:
    model = StructuredMLP()
    x = torch.randn(2, 16)
    workload = WorkloadProfile(cases=(WorkloadCase("b2", args=(x,), weight=2.0),))
    (case,) = KnobPlan().cases_with_reference(model, ProviderContext(workload=workload))
    assert isinstance(case, PreparedCase) and case.name == "b2" and case.weight == 2.0
    torch.testing.assert_close(case.reference, model(x))
    assert not case.reference.requires_grad


def test_cases_with_reference_hands_the_races_prepared_cases_over_untouched() -> None:
    def never_called(*args: object) -> None:
        raise AssertionError("the race's reference is used, not the model")

    prepared = PreparedCase("b1", (torch.ones(1, 16),), {}, torch.zeros(1, 8))
    cases = KnobPlan().cases_with_reference(never_called, ProviderContext(cases=(prepared,)))
    assert cases == (prepared,)


def test_cases_with_reference_needs_cases_or_a_workload() -> None:
    with pytest.raises(ProviderBuildError, match=r"knob_plan builds .* needs context.cases"):
        KnobPlan().cases_with_reference(StructuredMLP(), ProviderContext())
