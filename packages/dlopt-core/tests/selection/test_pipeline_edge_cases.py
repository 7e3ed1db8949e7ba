"""Edge cases of the pipeline: error boundaries, cleanup, messages, exact report round trip."""

from __future__ import annotations

import json

import attrs
import pytest
import torch

from dlopt.contract.provider import BuiltPlan, ProviderAvailability
from dlopt.engine.decision import OptimizationDecision
from dlopt.errors import ConfigurationError, ReferenceCheckError
from dlopt.evidence.report import load_report
from dlopt.precision import Precision
from dlopt.settings.policy import DeploymentConstraints
from dlopt.testing.models import StructuredMLP as SmallNet
from dlopt.validation import ModelMutatedError


class OddProvider:
    """A provider whose plan misbehaves in ways FakeProvider does not cover."""

    precision = Precision.FP32

    def __init__(self, name: str, *, build_returns=None, runner=None) -> None:
        self.name = name
        self._build_returns = build_returns
        self._runner = runner
        self.closes = 0

    def probe(self, context):
        return ProviderAvailability.ok()

    def build(self, model, context):
        if self._build_returns is not None:
            return self._build_returns

        def on_close() -> None:
            self.closes += 1

        return BuiltPlan(runner=self._runner or model, on_close=on_close)


def test_build_returning_something_else_than_a_plan_is_rejected_and_the_race_goes_on(race, x):
    odd = OddProvider("odd", build_returns=lambda *a, **k: None)
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), odd, race.fake("good", 1e-3)
    ).select_signature(SmallNet(), x)
    assert decision.selected_plan == "good"
    evidence = decision.report.candidate("odd")
    assert evidence.status == "rejected" and evidence.error.stage == "build"
    assert "expected BuiltPlan" in evidence.error.message


def test_validation_that_raises_rejects_only_that_candidate(race, x):
    # Outputs validation cannot read (a meta tensor has no data) must not end the race.
    odd = OddProvider("odd", runner=lambda inp: torch.empty(inp.shape[0], 4, device="meta"))
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), odd, race.fake("good", 1e-3)
    ).select_signature(torch.nn.Linear(16, 4).eval(), x)
    assert decision.selected_plan == "good"
    evidence = decision.report.candidate("odd")
    assert evidence.status == "rejected" and evidence.error.stage == "validation"
    assert odd.closes == 1


def test_eager_failing_while_measured_is_a_clear_error_and_every_plan_is_closed(race, x):
    eager = race.fake("eager_fp32", 2e-3, fail="measure", fail_after_calls=4)
    fast = race.fake("fast", 1e-3)
    with pytest.raises(ReferenceCheckError, match="eager_fp32"):
        race.optimizer(eager, fast).select_signature(SmallNet(), x)
    assert fast.closes == 1 and eager.closes == 1


def test_eager_plan_that_cannot_build_stops_before_any_other_build(race, x):
    eager = race.fake("eager_fp32", 2e-3, fail="build")
    fast = race.fake("fast", 1e-3)
    with pytest.raises(ReferenceCheckError, match="fake build failed"):
        race.optimizer(eager, fast).select_signature(SmallNet(), x)
    assert fast.builds == 0


def test_unavailable_eager_plan_says_why(race, x):
    eager = race.fake("eager_fp32", 2e-3, fail="probe")
    with pytest.raises(ReferenceCheckError, match="fake SDK missing"):
        race.optimizer(eager, race.fake("fast", 1e-3)).select_signature(SmallNet(), x)


class MutateThenFail(OddProvider):
    def build(self, model, context):
        with torch.no_grad():
            next(model.parameters()).mul_(2.0)
        raise RuntimeError("build gave up half way")


def test_a_build_that_changes_the_model_and_then_fails_is_undone(race, x):
    model = SmallNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), MutateThenFail("sloppy"), race.fake("good", 1e-3)
    ).select_signature(model, x)
    assert decision.selected_plan == "good"
    error = decision.report.candidate("sloppy").error
    assert error.stage == "build" and "build gave up half way" in error.message
    assert "mutated" in error.message
    for key, value in before.items():
        assert torch.equal(model.state_dict()[key], value), f"{key} changed"


def test_a_change_to_the_model_that_cannot_be_undone_stops_the_selection(race, x):
    good = race.fake("good", 1e-3)
    optimizer = race.optimizer(
        race.fake("eager_fp32", 2e-3), race.fake("vandal", 1e-3, fail="mutate_model"), good
    )
    optimizer.policy = attrs.evolve(
        optimizer.policy, quality=attrs.evolve(optimizer.policy.quality, snapshot_weights=False)
    )
    with pytest.raises(ModelMutatedError, match="vandal"):
        optimizer.select_signature(SmallNet(), x)
    assert good.builds == 0 or good.closes == 1


def test_unmeasured_challengers_are_not_described_as_failing_validation(race, x):
    # Warm-up may take the whole budget here: no round runs, so nothing can be compared.
    decision = race.optimizer(
        race.fake("eager_fp32", 0.2),
        race.fake("fast", 0.1),
        max_time_s=0.5,
        warmup_budget_share=1.0,
    ).select_signature(SmallNet(), x)
    assert decision.report.measurement.rounds == 0
    assert decision.selected_plan == "eager_fp32"
    assert "passed validation" not in decision.selection_reason
    assert "fast" in decision.selection_reason


def test_lifecycle_report_round_trips_exactly(race, x, tmp_path):
    # Integer-valued figures (break-even call counts, limits given as ints) must come back
    # as the same JSON text.
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("heavy", 1e-3, setup_time_s=100.0),
        objective="lifecycle_latency",
        constraints=DeploymentConstraints(expected_calls=1_000, max_setup_time_s=300),
        max_time_s=20,
    ).select_signature(SmallNet(), x)
    assert isinstance(decision.report.candidate("heavy").break_even_calls_vs_baseline, float | int)
    path = decision.save_report(tmp_path / "report.json")
    text = path.read_text()
    loaded = load_report(path)
    assert loaded == decision.report
    assert loaded.to_json() + "\n" == text


def test_lifecycle_with_a_zero_call_horizon_still_projects_totals(race, x):
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("heavy", 1e-3, setup_time_s=1.0),
        objective="lifecycle_latency",
        constraints=DeploymentConstraints(expected_calls=0),
    ).select_signature(SmallNet(), x)
    assert decision.selected_plan == "eager_fp32"
    assert decision.report.candidate("heavy").projected_total_ms is not None
    assert decision.report.candidate("heavy").selection_cost_ms is not None


def test_bundle_keeps_artifacts_that_share_a_file_name(race, x, tmp_path):
    first, second = tmp_path / "a" / "model.bin", tmp_path / "b" / "model.bin"
    for path, content in ((first, b"first"), (second, b"second")):
        path.parent.mkdir()
        path.write_bytes(content)

    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)
    ).select_signature(SmallNet(), x)
    plan = BuiltPlan(runner=decision.plan, artifacts={"encoder": first, "decoder": second})
    bundle = OptimizationDecision(plan, decision.report).save_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    paths = {name: manifest["artifacts"][name]["path"] for name in ("encoder", "decoder")}
    assert paths["encoder"] != paths["decoder"]
    assert (bundle / paths["encoder"]).read_bytes() == b"first"
    assert (bundle / paths["decoder"]).read_bytes() == b"second"


def test_a_call_horizon_too_large_for_floats_keeps_the_report_strict_json(race, x):
    decision = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("fast", 1e-3),
        objective="lifecycle_latency",
        constraints=DeploymentConstraints(expected_calls=10**308),
    ).select_signature(SmallNet(), x)
    json.loads(decision.report.to_json())  # strict: raises on NaN/Infinity
    assert decision.report.candidate("eager_fp32").selection_cost_ms is None


def test_two_explicit_providers_with_one_name_are_a_configuration_error(race, x):
    with pytest.raises(ConfigurationError, match="'fast'"):
        race.optimizer(
            race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3), race.fake("fast", 3e-3)
        ).select_signature(SmallNet(), x)


def test_a_plan_that_changes_the_model_while_measured_stops_the_selection(race, x):
    model = SmallNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sneaky = race.fake("sneaky", 1e-3, fail="mutate_when_measured", fail_after_calls=3)
    with pytest.raises(
        ModelMutatedError, match=r"a raced plan mutated .* during measurement.*restored"
    ):
        race.optimizer(race.fake("eager_fp32", 2e-3), sneaky).select_signature(model, x)
    for key, value in before.items():
        assert torch.equal(model.state_dict()[key], value), f"{key} was not restored"
    assert sneaky.closes == 1
