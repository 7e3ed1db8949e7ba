"""The serving contract through a whole selection (fake plans on a fake clock).

What is judged is what serves: every call runs in the workload's grad mode on inputs made
in it; every raced call's outputs are checked; the chosen plan's promises about shapes are
checked on a held-out batch size; the report records how the decision serves.
"""

from __future__ import annotations

import warnings

import attrs
import pytest
import torch

from dlopt.contract.provider import EAGER_SERVING, BuiltPlan, ProviderAvailability, ServingTraits
from dlopt.errors import UnseenSignatureError
from dlopt.evidence.report import load_report
from dlopt.precision import Precision
from dlopt.settings.policy import OptimizationPolicy
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.testing.models import StructuredMLP as SmallNet
from dlopt.vocabulary import Concurrency, GradMode

#: (inference mode on, autograd on, inference-tensor input) each grad mode calls plans in.
JUDGED = {
    GradMode.INFERENCE_MODE: (True, False, True),
    GradMode.NO_GRAD: (False, False, False),
    GradMode.ENABLED: (False, True, False),
}


def _workload(x: torch.Tensor, grad_mode: GradMode = GradMode.INFERENCE_MODE) -> WorkloadProfile:
    return WorkloadProfile(
        cases=(WorkloadCase("b4", args=(x,)), WorkloadCase("b2", args=(x[:2],))),
        grad_mode=grad_mode,
    )


@pytest.mark.parametrize("grad_mode", list(GradMode))
def test_every_call_of_every_plan_runs_in_the_workloads_grad_mode(race, x, grad_mode):
    eager, fast = race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)
    decision = race.optimizer(eager, fast).select(SmallNet(), _workload(x, grad_mode))
    assert decision.selected_plan == "fast"
    assert decision.report.serving.grad_mode is grad_mode
    # First calls, warm-up, every round and the final check: all in the judged context.
    assert len(fast.contexts) > 10
    assert set(fast.contexts) == {JUDGED[grad_mode]}
    assert set(eager.contexts) == {JUDGED[grad_mode]}


def test_a_plan_that_turns_nan_on_a_later_call_is_rejected_naming_the_call(race, x):
    nan = race.fake("nan_later", 5e-4, fail="nonfinite", fail_after_calls=10)
    decision = race.optimizer(race.fake("eager_fp32", 2e-3), nan, race.fake("fast", 1e-3)).select(
        SmallNet(), _workload(x)
    )
    evidence = decision.report.candidate("nan_later")
    assert evidence.status == "rejected" and evidence.error.stage == "measure"
    # Ten calls in all were fine: its two first calls (one per case), then eight raced ones.
    message = evidence.error.message
    assert "raced call 5 on case" in message or "raced call 4 on case" in message, message
    assert "non-finite" in message and "where the reference has 0" in message
    assert decision.selected_plan == "fast"


class ShapeProvider:
    """A plan that declares dynamic shapes; ``wrong_elsewhere``: it is only right on the
    batch sizes it was first called with."""

    precision = Precision.FP32

    def __init__(self, name: str, advance, *, wrong_elsewhere: bool) -> None:
        self.name = name
        self.advance = advance
        self.wrong_elsewhere = wrong_elsewhere

    def probe(self, context):
        return ProviderAvailability.ok()

    def build(self, model, context):
        seen = {int(case.args[0].shape[0]) for case in context.cases}

        def runner(x):
            self.advance(1e-3)
            out = model(x)
            return out * 3 if self.wrong_elsewhere and int(x.shape[0]) not in seen else out

        return BuiltPlan(runner=runner, serving=attrs.evolve(EAGER_SERVING, differentiable=False))


def test_dynamic_shapes_checked_on_a_held_out_batch_are_served_by_the_plan(race, x):
    plan = ShapeProvider("dyn", race.clock.advance, wrong_elsewhere=False)
    decision = race.optimizer(race.fake("eager_fp32", 2e-3), plan).select(SmallNet(), _workload(x))
    serving = decision.report.serving
    assert decision.selected_plan == "dyn"
    assert serving.held_out_check.startswith("passed on batch 3 (raced: 2, 4)")
    assert serving.served_families == ("(float32[2d]@cpu,)",)
    assert serving.concurrency is Concurrency.CONCURRENT and serving.any_grad_mode
    with torch.inference_mode():
        out = decision(torch.randn(7, 16))
    assert out.shape[0] == 7 and decision.fallback_calls == 0


def test_dynamic_shapes_that_fail_the_held_out_check_fall_back_to_eager(race, x):
    plan = ShapeProvider("liar", race.clock.advance, wrong_elsewhere=True)
    model = SmallNet()
    decision = race.optimizer(race.fake("eager_fp32", 2e-3), plan).select(model, _workload(x))
    serving = decision.report.serving
    assert decision.selected_plan == "liar"  # right on every raced case
    assert serving.held_out_check.startswith("failed on batch 3")
    assert serving.served_families == ()
    x7 = torch.randn(7, 16)
    with pytest.warns(RuntimeWarning, match="eager fp32 serves it"):
        out = decision(x7)
    assert torch.allclose(out, model(x7)) and decision.fallback_calls == 1


def test_the_policy_can_refuse_unseen_signatures(race, x):
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
    optimizer = optimizer.with_policy(attrs.evolve(optimizer.policy, on_unseen_signature="raise"))
    decision = optimizer.select(SmallNet(), _workload(x))
    assert decision.report.serving.on_unseen_signature == "raise"
    assert "raises UnseenSignatureError" in decision.report.serving.unseen
    with pytest.raises(UnseenSignatureError, match=r"'fast'.*float32\[5, 16\]"):
        decision(torch.randn(5, 16))
    assert decision(x).shape == (4, 8)


def test_the_policy_refuses_an_unknown_word_for_unseen_signatures():
    from dlopt.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="on_unseen_signature must be one of"):
        OptimizationPolicy(on_unseen_signature="ignore")


def test_the_report_records_how_the_decision_serves_and_round_trips(race, x, tmp_path):
    decision = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)).select(
        SmallNet(), _workload(x, GradMode.NO_GRAD)
    )
    serving = decision.report.serving
    assert serving.grad_mode is GradMode.NO_GRAD
    assert serving.concurrency is Concurrency.SERIALIZED  # the fake declares nothing
    assert serving.raced_signatures == ("(float32[4, 16]@cpu,)", "(float32[2, 16]@cpu,)")
    assert serving.held_out_check is None and serving.served_families == ()
    path = decision.save_report(tmp_path / "report.json")
    assert load_report(path) == decision.report
    assert '"grad_mode": "no_grad"' in path.read_text()


def test_a_per_thread_plan_without_a_runner_factory_is_refused_at_build(race, x):
    traits = ServingTraits(concurrency=Concurrency.PER_THREAD)
    odd = race.fake("per_thread", 1e-3, serving=traits)
    decision = race.optimizer(race.fake("eager_fp32", 2e-3), odd).select(SmallNet(), _workload(x))
    evidence = decision.report.candidate("per_thread")
    assert evidence.status == "rejected" and "thread_runner" in evidence.error.message


def test_a_cache_hit_serves_under_the_current_policy(race, x, tmp_path):
    model = SmallNet()
    fast = race.fake("fast", 1e-3)
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), fast)
    policy = attrs.evolve(optimizer.policy, plan_cache_dir=str(tmp_path / "cache"))
    first = optimizer.with_policy(policy).select(model, _workload(x))
    assert first.report.cache.record_written is True
    raising = attrs.evolve(policy, on_unseen_signature="raise")
    hit = optimizer.with_policy(raising).select(model, _workload(x))
    assert hit.report.cache.cache_hit is True
    assert hit.report.serving.on_unseen_signature == "raise"
    with pytest.raises(UnseenSignatureError):
        hit(torch.randn(5, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.inference_mode():
            assert hit(x.clone()).shape == (4, 8)


def test_dlopt_select_judges_in_the_grad_mode_it_is_given(tmp_path, select_argv, monkeypatch):
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    from dlopt.cli.app import main

    report = tmp_path / "r.json"
    argv = select_argv(
        "b2=2x16",
        extra=[
            "--in-process",
            "--grad-mode",
            "no_grad",
            "--on-unseen-signature",
            "raise",
            "--report",
            str(report),
        ],
    )
    assert main(argv) == 0
    serving = load_report(report).serving
    assert serving.grad_mode is GradMode.NO_GRAD and serving.on_unseen_signature == "raise"
    assert serving.raced_signatures == ("(float32[2, 16]@cpu,)",)


def test_the_terminal_report_says_how_the_decision_serves(race, x, capsys):
    from dlopt.cli.cmd_report import print_report
    from dlopt.cli.console import Output

    decision = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)).select(
        SmallNet(), _workload(x)
    )
    print_report(decision.report, Output(plain=True))
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("serving:"))
    assert "judged under inference_mode; entering inference_mode around each call" in line
    assert "one thread at a time" in line and "eager fp32 serves it" in line
