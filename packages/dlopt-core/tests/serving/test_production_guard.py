"""The production guard: non-finite inputs, a plan that fails, shadow checks, the latency
watch and the health record, on fake plans (docs/serving.md, "In production")."""

from __future__ import annotations

import json
import threading
import warnings

import pytest
import torch

from dlopt.contract.provider import EAGER_SERVING, BuiltPlan, ServingTraits
from dlopt.errors import NonFiniteInputError, UnseenSignatureError
from dlopt.precision import Precision
from dlopt.serving.evidence import RacedLatency
from dlopt.serving.health import DRIFT_MIN_CALLS
from dlopt.serving.production import ProductionGuard
from dlopt.serving.served import ServedPlan, has_nonfinite_input
from dlopt.serving.shadow import ShadowChecker, ShadowJudge
from dlopt.serving.signature import describe, signature_key
from dlopt.settings.guard import GuardPolicy
from dlopt.settings.quality import QualityPolicy
from dlopt.vocabulary import GradMode

X = torch.ones(4, 3)
RACED = describe(signature_key((X,), {}))


def eager(x: torch.Tensor) -> torch.Tensor:
    """The fallback: eager fp32 of the "model" the plans reproduce."""
    return x * 2 + 1


class CountingPlan:
    """A runner that computes what ``eager`` does, counting its calls; ``fail_after``
    calls later it raises, ``zeros_every`` call returns zeros, ``step_s`` advances the
    fake clock on each call."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.calls = 0
        self.fail_from: int | None = None
        self.fail_until: int | None = None
        self.zeros_every: int | None = None
        self.step_s = 0.001
        self.clock = clock

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.step_s
        failing = self.fail_from is not None and self.calls >= self.fail_from
        if failing and (self.fail_until is None or self.calls < self.fail_until):
            raise RuntimeError(f"device lost on call {self.calls}")
        if self.zeros_every is not None and self.calls % self.zeros_every == 0:
            return torch.zeros_like(x)
        return eager(x)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def judge(precision: Precision = Precision.INT8) -> ShadowJudge:
    return ShadowJudge(
        precision=precision,
        output_dtype=None,
        quality=QualityPolicy(),
        grad_mode=GradMode.INFERENCE_MODE,
    )


def served(runner, *, fallback=eager, guard=None, traits=EAGER_SERVING, **kwargs) -> ServedPlan:
    kwargs.setdefault("raced", (RACED,))
    return ServedPlan(
        BuiltPlan(runner=runner, serving=traits),
        plan_name="fast",
        grad_mode=GradMode.INFERENCE_MODE,
        fallback=fallback,
        guard=guard,
        **kwargs,
    )


# ------------------------------------------------------------------ non-finite inputs


def _poisoned(where: str, value: float) -> torch.Tensor:
    x = torch.ones(4, 3)
    if where == "element":
        x[2, 1] = value
    elif where == "row":
        x[1] = value
    else:
        x.fill_(value)
    return x


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", ["element", "row", "all"])
def test_a_nonfinite_input_gets_eagers_answer_warned_once_and_counted(where, value):
    plan = CountingPlan()
    serve = served(plan)
    x = _poisoned(where, value)
    with pytest.warns(RuntimeWarning, match="NaN or infinity"):
        first = serve(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        second = serve(x)
    torch.testing.assert_close(first, eager(x), equal_nan=True)
    torch.testing.assert_close(second, eager(x), equal_nan=True)
    assert plan.calls == 0
    health = serve.health()
    assert health.fallbacks["nonfinite_input"] == 2 == health.fallback_calls
    assert health.calls == 2 and health.plan_calls == 0
    serve(torch.ones(4, 3))
    assert plan.calls == 1  # finite inputs still reach the plan


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_nonfinite_values_are_found_in_every_floating_dtype(dtype):
    x = torch.ones(2, 3, dtype=dtype)
    assert not has_nonfinite_input((x,), {})
    x[0, 0] = float("nan")
    assert has_nonfinite_input((), {"nested": [torch.zeros(1), {"x": x}]})
    assert not has_nonfinite_input((torch.arange(4),), {"mask": torch.ones(2, dtype=torch.bool)})


def test_nonfinite_inputs_are_refused_or_served_as_the_policy_says():
    x = _poisoned("element", float("nan"))
    refusing = served(CountingPlan(), guard=GuardPolicy(on_nonfinite_input="raise"))
    with pytest.raises(NonFiniteInputError, match="on_nonfinite_input='raise'"):
        refusing(x)
    assert refusing.health().refused_calls == 1
    plan = CountingPlan()
    serving = served(plan, guard=GuardPolicy(on_nonfinite_input="serve"))
    serving(x)
    assert plan.calls == 1 and serving.health().fallback_calls == 0
    alone = served(CountingPlan(), fallback=None)
    with pytest.raises(NonFiniteInputError, match="no eager model here"):
        alone(x)


# ------------------------------------------------------------------ a plan that fails


def test_a_failing_plan_is_served_by_eager_then_disabled_after_max_failures():
    plan = CountingPlan()
    plan.fail_from = 3
    serve = served(plan, guard=GuardPolicy(max_failures=3))
    x = torch.ones(4, 3)
    for _ in range(2):
        assert torch.equal(serve(x), eager(x))
    with pytest.warns(RuntimeWarning, match="device lost on call 3"):
        assert torch.equal(serve(x), eager(x))
    assert serve.health().disabled is None
    serve(x)
    with pytest.warns(RuntimeWarning, match="is disabled"):
        serve(x)  # the third failure in a row disables it, and says so
    calls_when_disabled = plan.calls
    for _ in range(5):
        assert torch.equal(serve(x), eager(x))
    assert plan.calls == calls_when_disabled  # the plan is never called again
    health = serve.health()
    assert health.failures == 3 and health.consecutive_failures == 3
    assert "3 consecutive failures" in health.disabled and "device lost" in health.disabled
    assert health.fallbacks["plan_failure"] == 3
    assert health.fallbacks["plan_disabled"] == 5
    assert health.plan_calls == 2 and health.calls == 10


def test_a_success_between_failures_starts_the_count_again():
    plan = CountingPlan()
    plan.fail_from, plan.fail_until = 1, 3  # calls 1 and 2 fail, then it recovers
    serve = served(plan, guard=GuardPolicy(max_failures=3))
    with pytest.warns(RuntimeWarning):
        for _ in range(5):
            serve(torch.ones(4, 3))
    health = serve.health()
    assert health.failures == 2 and health.consecutive_failures == 0
    assert health.disabled is None and health.plan_calls == 3


def test_on_plan_failure_raise_lets_the_exception_through_and_never_disables():
    plan = CountingPlan()
    plan.fail_from = 1
    serve = served(plan, guard=GuardPolicy(on_plan_failure="raise", max_failures=1))
    for _ in range(3):
        with pytest.raises(RuntimeError, match="device lost"):
            serve(torch.ones(4, 3))
    health = serve.health()
    assert health.failures == 3 and health.disabled is None and health.fallback_calls == 0


def test_when_eager_fails_too_the_call_is_at_fault_not_the_plan():
    def picky(x):
        raise ValueError("token id out of range")

    plan = CountingPlan()
    plan.fail_from = 1
    serve = served(plan, fallback=picky, guard=GuardPolicy(max_failures=1))
    with pytest.raises(ValueError, match="out of range"):
        serve(torch.ones(4, 3))
    health = serve.health()
    assert health.failures == 0 and health.disabled is None and health.refused_calls == 1


# ------------------------------------------------------------------ shadow checks


def test_shadow_checks_catch_a_plan_that_turns_wrong_and_disable_it():
    plan = CountingPlan()
    plan.zeros_every = 4  # one call in four answers zeros
    serve = served(plan, guard=GuardPolicy(shadow_rate=1.0, max_mismatches=3), judge=judge())
    x = torch.ones(4, 3)
    for _ in range(8):
        serve(x)
    assert serve.drain_shadow_checks()
    health = serve.health()
    assert health.shadow_checks == 8 and health.shadow_mismatches == 2
    assert health.disabled is None
    first = health.mismatches[0]
    assert first.signature == RACED and first.call == 4
    assert "rel_l2" in first.reason or "cosine" in first.reason
    with pytest.warns(RuntimeWarning, match="is disabled"):
        for _ in range(8):
            serve(x)
            serve.drain_shadow_checks()
    health = serve.health()
    assert health.shadow_mismatches == 3
    assert "3 shadow checks out of limits" in health.disabled
    calls = plan.calls
    assert torch.equal(serve(x), eager(x)) and plan.calls == calls


def test_shadow_rate_zero_checks_nothing_and_a_share_checks_about_that_share():
    never = served(CountingPlan(), guard=GuardPolicy(shadow_rate=0.0), judge=judge())
    for _ in range(50):
        never(X)
    assert never.health().shadow_checks == 0
    some = served(CountingPlan(), guard=GuardPolicy(shadow_rate=0.25), judge=judge())
    for _ in range(400):
        some(X)
        some.drain_shadow_checks()
    checked = some.health().shadow_checks
    assert 50 <= checked <= 150  # binomial(400, 0.25): mean 100, sd 8.7


def test_a_full_shadow_queue_skips_checks_and_counts_them():
    release = threading.Event()

    def slow_eager(x):
        release.wait(10)
        return eager(x)

    guard = ProductionGuard("fast", GuardPolicy(shadow_rate=1.0))
    checker = ShadowChecker(guard, slow_eager, judge(), queue_size=1)
    for call in range(5):
        checker.submit(RACED, RACED, (X,), {}, eager(X), call)
    release.set()
    assert checker.drain()
    health = guard.health()
    # One taken by the thread, one in the queue, the rest skipped (the caller never waits).
    assert health.shadow_skipped >= 3 and health.shadow_checks + health.shadow_skipped == 5
    checker.close()


def test_shadow_copies_are_taken_before_the_caller_changes_its_tensors():
    serve = served(CountingPlan(), guard=GuardPolicy(shadow_rate=1.0), judge=judge(Precision.FP32))
    x = torch.ones(4, 3)
    out = serve(x)
    x.fill_(7.0)
    out.fill_(-1.0)  # the caller owns its output
    assert serve.drain_shadow_checks()
    assert serve.health().shadow_mismatches == 0


# ------------------------------------------------------------------ the latency watch


def _watched(clock: FakeClock, plan: CountingPlan) -> ServedPlan:
    raced = RacedLatency(RACED, "b4", median_ms=1.0, high_ms=1.1)
    return served(plan, race_latency=(raced,), race_p50_ms=1.0, clock=clock)


def test_the_latency_watch_flags_a_3x_slowdown_and_not_the_race_speed():
    clock = FakeClock()
    plan = CountingPlan(clock)
    serve = _watched(clock, plan)
    for _ in range(DRIFT_MIN_CALLS - 1):
        serve(X)
    assert serve.health().drift is None  # not enough calls yet
    serve(X)
    health = serve.health()
    assert health.drift is False
    assert health.served_p50_ms == pytest.approx(1.0, rel=0.03)
    plan.step_s = 0.003  # the plan turns 3x slower
    for _ in range(3 * DRIFT_MIN_CALLS):
        serve(X)
    health = serve.health()
    assert health.drift is True
    (sig,) = health.signatures
    assert sig.served_p50_ms == pytest.approx(3.0, rel=0.03) and sig.race_high_ms == 1.1
    assert "b4" in health.drift_note and "race upper bound 1.1 ms" in health.drift_note


def test_the_watch_reads_recent_calls_so_a_late_slowdown_shows():
    clock = FakeClock()
    plan = CountingPlan(clock)
    serve = _watched(clock, plan)
    for _ in range(5000):
        serve(X)
    plan.step_s = 0.003
    for _ in range(2000):
        serve(X)
    assert serve.health().drift is True


# ------------------------------------------------------------------ the record


def test_the_health_record_is_strict_json_with_every_field():
    clock = FakeClock()
    serve = _watched(clock, CountingPlan(clock))
    serve(X)
    serve(torch.ones(2, 3))  # unseen
    with pytest.warns(RuntimeWarning):
        serve(_poisoned("all", float("nan")))
    data = json.loads(serve.health().to_json())
    for name in (
        "calls",
        "fallback_calls",
        "failures",
        "shadow_checks",
        "shadow_mismatches",
        "disabled",
        "served_p50_ms",
        "served_p99_ms",
        "drift",
    ):
        assert name in data
    assert data["calls"] == 3 and data["fallback_calls"] == 2
    assert data["fallbacks"]["unseen_signature"] == 1


def test_unseen_refusals_are_counted():
    serve = served(CountingPlan(), on_unseen="raise")
    with pytest.raises(UnseenSignatureError):
        serve(torch.ones(2, 3))
    assert serve.health().refused_calls == 1


def test_a_serialized_plans_time_excludes_waiting_for_another_thread():
    clock = FakeClock()
    plan = CountingPlan(clock)
    serve = served(plan, traits=ServingTraits(), clock=clock)
    serve(X)
    assert serve.health().served_p50_ms == pytest.approx(1.0, rel=0.03)


def test_without_an_eager_model_a_failing_plan_raises_and_is_never_disabled():
    plan = CountingPlan()
    plan.fail_from, plan.fail_until = 1, 5
    serve = served(
        plan, fallback=None, guard=GuardPolicy(max_failures=1, shadow_rate=1.0), judge=judge()
    )
    for _ in range(4):
        with pytest.raises(RuntimeError, match="device lost"):
            serve(X)
    assert torch.equal(serve(X), eager(X))  # it recovered, and still serves
    health = serve.health()
    assert health.failures == 4 and health.disabled is None
    assert health.shadow_checks == 0  # no eager model: nothing to check against
