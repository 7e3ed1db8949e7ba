"""``ServedPlan``: every caller served as the plan was judged, from any context and thread."""

from __future__ import annotations

import threading
import time
import warnings

import pytest
import torch

from dlopt.contract.provider import EAGER_SERVING, BuiltPlan, ServingTraits
from dlopt.errors import ServingContextError, UnseenSignatureError
from dlopt.serving.served import ServedPlan
from dlopt.serving.signature import describe, family_key, signature_key
from dlopt.vocabulary import Concurrency, GradMode, UnseenSignature

X = torch.ones(4, 3)
RACED = (describe(signature_key((X,), {})),)


class Recorder:
    """A runner that doubles its input and records the context of every call."""

    def __init__(self, pause_s: float = 0.0) -> None:
        self.seen: list[tuple[bool, bool, bool]] = []
        self.pause_s = pause_s
        self.inside = 0
        self.most_inside = 0
        self.lock = threading.Lock()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        self.seen.append(
            (torch.is_inference_mode_enabled(), torch.is_grad_enabled(), x.is_inference())
        )
        time.sleep(self.pause_s)
        with self.lock:
            self.inside -= 1
        return x * 2


SERIALIZED = ServingTraits()


def served(runner, traits=SERIALIZED, grad_mode=GradMode.INFERENCE_MODE, **kwargs):
    plan = BuiltPlan(runner=runner, serving=traits)
    kwargs.setdefault("raced", RACED)
    return ServedPlan(plan, plan_name="compiled", grad_mode=grad_mode, **kwargs)


CALLERS = {
    "inference_mode": torch.inference_mode,
    "no_grad": torch.no_grad,
    "enabled": torch.enable_grad,
}


@pytest.mark.parametrize("caller", list(CALLERS))
def test_a_plan_bound_to_its_context_is_always_called_in_it(caller):
    runner = Recorder()
    serve = served(runner)
    with CALLERS[caller]():
        x = torch.ones(4, 3)  # made in the caller's context
        out = serve(x)
    # The judged context: inference mode, with an inference tensor, whoever called.
    assert runner.seen == [(True, False, True)]
    assert torch.equal(out, torch.full((4, 3), 2.0))
    # ...and the caller gets a tensor it can use in its own context.
    assert out.is_inference() == (caller == "inference_mode")


@pytest.mark.parametrize("judged", [GradMode.NO_GRAD, GradMode.ENABLED])
def test_a_plan_judged_outside_inference_mode_is_left_from_within_it(judged):
    runner = Recorder()
    serve = served(runner, grad_mode=judged)
    with torch.inference_mode():
        out = serve(torch.ones(4, 3))
    assert runner.seen == [(False, judged is GradMode.ENABLED, False)]
    assert out.is_inference() is False


def test_a_plan_that_serves_any_context_is_called_in_the_callers():
    runner = Recorder()
    serve = served(runner, EAGER_SERVING)
    with torch.no_grad():
        serve(torch.ones(4, 3))
    with torch.inference_mode():
        serve(torch.ones(4, 3))
    assert runner.seen == [(False, False, False), (True, False, True)]


def test_a_caller_that_needs_gradients_is_refused_by_a_plan_without_them():
    x = torch.ones(4, 3, requires_grad=True)
    with pytest.raises(ServingContextError, match=r"needs gradients.*'compiled'.*inference_mode"):
        served(Recorder())(x)
    # An eager plan carries them.
    out = served(lambda t: t * 2, EAGER_SERVING)(x)
    out.sum().backward()
    assert torch.equal(x.grad, torch.full((4, 3), 2.0))


def test_a_serialized_plan_is_entered_by_one_thread_at_a_time():
    for traits, most in ((ServingTraits(), 1), (EAGER_SERVING, 4)):
        runner = Recorder(pause_s=0.05)
        serve = served(runner, traits)
        barrier = threading.Barrier(4)
        outs = []

        def call(serve=serve, barrier=barrier, outs=outs):
            barrier.wait()
            outs.append(serve(torch.ones(4, 3)))

        threads = [threading.Thread(target=call) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(outs) == 4 and all(torch.equal(o, torch.full((4, 3), 2.0)) for o in outs)
        # Serialized: never two at once; concurrent: all four overlap in the pause.
        assert runner.most_inside == most


def test_a_per_thread_plan_gives_each_calling_thread_its_own_runner():
    made: list[Recorder] = []

    def new_runner() -> Recorder:
        made.append(Recorder())
        return made[-1]

    plan = BuiltPlan(
        runner=Recorder(),
        serving=ServingTraits(concurrency=Concurrency.PER_THREAD),
        thread_runner=new_runner,
    )
    serve = ServedPlan(plan, plan_name="p", grad_mode=GradMode.INFERENCE_MODE, raced=RACED)
    threads = [
        threading.Thread(target=lambda: [serve(torch.ones(4, 3)) for _ in range(3)])
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 3 and all(len(r.seen) == 3 for r in made)
    assert plan.runner.seen == []  # the build's own runner serves no thread


def test_an_unseen_signature_falls_back_to_eager_once_warned_and_counted():
    fallback_calls = []

    def eager(x):
        fallback_calls.append(x.shape)
        return x * 2

    runner = Recorder()
    serve = served(runner, fallback=eager)
    with pytest.warns(RuntimeWarning, match=r"float32\[5, 3\]@cpu.*eager fp32 serves it"):
        out = serve(torch.ones(5, 3))
    assert torch.equal(out, torch.full((5, 3), 2.0)) and runner.seen == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: no second warning
        serve(torch.ones(6, 3))
        serve(torch.ones(4, 3))  # raced: the plan
    assert serve.fallback_calls == 2 and len(runner.seen) == 1
    assert serve.unseen_signatures == ("(float32[5, 3]@cpu,)", "(float32[6, 3]@cpu,)")


def test_an_unseen_signature_raises_when_the_policy_says_so_or_nothing_can_fall_back():
    serve = served(Recorder(), on_unseen=UnseenSignature.RAISE, fallback=lambda x: x)
    with pytest.raises(UnseenSignatureError, match=r"float32\[5, 3\].*raced: \(float32\[4, 3\]"):
        serve(torch.ones(5, 3))
    with pytest.raises(UnseenSignatureError, match=r"load_bundle\(path, model=model\)"):
        served(Recorder())(torch.ones(5, 3))


def test_a_plan_with_checked_dynamic_shapes_serves_its_family():
    runner = Recorder()
    families = (describe(family_key(signature_key((X,), {}))),)
    serve = served(runner, EAGER_SERVING, families=families, fallback=lambda x: None)
    assert serve(torch.ones(9, 3)).shape == (9, 3)
    assert serve.fallback_calls == 0 and len(runner.seen) == 1
    # Another rank or dtype is not of the family.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert serve(torch.ones(9, 3, 1)) is None and serve(torch.ones(4, 3).double()) is None
    assert serve.fallback_calls == 2


def test_a_report_without_serving_evidence_sends_every_call_to_the_plan():
    runner = Recorder()
    serve = ServedPlan.from_evidence(BuiltPlan(runner=runner), None, plan_name="old")
    assert serve(torch.ones(7, 7)).shape == (7, 7) and len(runner.seen) == 1
