"""Dynamic batching: concurrent calls merged into one plan call, every caller's promise kept."""

from __future__ import annotations

import asyncio
import threading
import warnings

import pytest
import torch

from dlopt.contract.provider import BuiltPlan, ServingTraits
from dlopt.errors import UnseenSignatureError
from dlopt.serving.batching import BatchedDecision
from dlopt.serving.served import ServedPlan
from dlopt.serving.signature import describe, family_key, signature_key
from dlopt.settings.guard import GuardPolicy
from dlopt.vocabulary import Concurrency, GradMode


def rows_of(batch: int, features: int = 3) -> torch.Tensor:
    return torch.ones(batch, features)


RACED = tuple(describe(signature_key((rows_of(n),), {})) for n in (1, 8))
FAMILY = (describe(family_key(signature_key((rows_of(1),), {}))),)


def eager(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + torch.arange(x.shape[-1])


class Recorder:
    """A plan computing ``eager``'s answer, recording the batch size of every call; it
    may fail on merged calls, or answer without a batch dimension."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.lock = threading.Lock()
        self.fail_merged = False
        self.pooled = False
        self.gate: threading.Event | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            self.gate.wait(10)
        with self.lock:
            self.sizes.append(x.shape[0])
        if self.fail_merged and x.shape[0] > 1:
            raise RuntimeError("the device ran out of memory")
        if self.pooled:
            return eager(x).sum()
        return eager(x)


def batched(
    runner: Recorder,
    *,
    dynamic: bool = False,
    fallback=eager,
    max_delay_ms: float = 50.0,
    max_batch_size: int | None = None,
    max_concurrent_batches: int | None = None,
    **kwargs,
) -> BatchedDecision:
    served = ServedPlan(
        BuiltPlan(
            runner=runner,
            serving=ServingTraits(concurrency=Concurrency.CONCURRENT, any_grad_mode=True),
        ),
        plan_name="fast",
        grad_mode=GradMode.INFERENCE_MODE,
        raced=RACED,
        families=FAMILY if dynamic else (),
        fallback=fallback,
        **kwargs,
    )
    return BatchedDecision(
        served,
        batch_dim=0,
        raced_sizes=(1, 8),
        max_batch_size=max_batch_size,
        max_delay_ms=max_delay_ms,
        max_concurrent_batches=max_concurrent_batches,
    )


def call_together(serve, inputs: list[torch.Tensor], mode=torch.inference_mode) -> list:
    """Call ``serve`` once per input, from as many threads, started together."""
    results: list = [None] * len(inputs)
    start = threading.Barrier(len(inputs))

    def caller(index: int) -> None:
        start.wait()
        with mode():
            try:
                results[index] = serve(inputs[index])
            except Exception as exc:
                results[index] = exc

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def distinct_rows(n: int, batch: int = 1) -> list[torch.Tensor]:
    return [torch.full((batch, 3), float(i + 1)) for i in range(n)]


def test_concurrent_requests_merge_into_plan_calls_and_each_gets_its_rows():
    runner = Recorder()
    runner.gate = threading.Event()  # hold the first call so the rest queue up
    serve = batched(runner, dynamic=True)
    inputs = distinct_rows(8)
    threading.Timer(0.2, runner.gate.set).start()
    results = call_together(serve, inputs)
    for x, out in zip(inputs, results):
        assert torch.equal(out, eager(x))
    assert sum(runner.sizes) == 8 and max(runner.sizes) > 1  # merged
    stats = serve.stats()
    assert stats.requests == 8 and stats.merged + stats.alone == 8 and stats.batches >= 1
    health = serve.served.health()
    assert health.calls == 8 and health.plan_calls == 8
    serve.close()


def test_a_static_plan_is_called_at_a_raced_size_with_real_pad_rows():
    runner = Recorder()
    runner.gate = threading.Event()
    serve = batched(runner)
    inputs = distinct_rows(3)
    threading.Timer(0.2, runner.gate.set).start()
    results = call_together(serve, inputs)
    for x, out in zip(inputs, results):
        assert torch.equal(out, eager(x)) and out.shape == (1, 3)
    # Every plan call at a raced size: 1 or 8 (three rows padded to eight).
    assert set(runner.sizes) <= {1, 8}
    if 8 in runner.sizes:
        assert serve.stats().padded_rows == 8 * runner.sizes.count(8) - serve.stats().rows
    serve.close()


def test_a_lone_request_is_served_after_the_delay():
    runner = Recorder()
    serve = batched(runner, max_delay_ms=5)
    with torch.inference_mode():
        out = serve(rows_of(1))
    assert torch.equal(out, eager(rows_of(1))) and runner.sizes == [1]
    serve.close()


def test_callers_in_different_grad_modes_never_share_a_call():
    runner = Recorder()
    runner.gate = threading.Event()
    serve = batched(runner, dynamic=True)
    threading.Timer(0.2, runner.gate.set).start()
    inference = call_together(serve, distinct_rows(4), mode=torch.inference_mode)
    plain = call_together(serve, distinct_rows(4), mode=torch.no_grad)
    assert all(out.is_inference() for out in inference)
    assert not any(out.is_inference() for out in plain)
    serve.close()


def test_requests_the_plan_would_not_serve_are_served_alone_as_the_decision_serves_them():
    runner = Recorder()
    serve = batched(runner, dynamic=True, max_delay_ms=5)
    nan = rows_of(1).clone()
    nan[0, 1] = float("nan")
    wide = torch.ones(1, 3, dtype=torch.float64)  # unseen: another dtype
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = call_together(serve, [nan, wide, rows_of(1), rows_of(1)])
    torch.testing.assert_close(results[0], eager(nan), equal_nan=True)
    assert torch.equal(results[1], eager(wide))
    health = serve.served.health()
    assert health.fallbacks["nonfinite_input"] == 1 and health.fallbacks["unseen_signature"] == 1
    assert health.plan_calls == 2 and serve.stats().alone >= 2
    assert all(size in (1, 2) for size in runner.sizes)
    serve.close()


def test_an_unseen_request_is_refused_alone_under_raise():
    serve = batched(Recorder(), on_unseen="raise", max_delay_ms=5)
    with pytest.raises(UnseenSignatureError), torch.inference_mode():
        serve(torch.ones(1, 5))  # another width: the static plan raced width 3 only
    serve.close()


def test_a_merged_plan_failure_falls_back_to_eager_for_every_caller():
    runner = Recorder()
    runner.fail_merged = True
    runner.gate = threading.Event()
    serve = batched(runner, dynamic=True, guard=GuardPolicy(max_failures=100))
    inputs = distinct_rows(6)
    threading.Timer(0.2, runner.gate.set).start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = call_together(serve, inputs)
    for x, out in zip(inputs, results):
        assert torch.equal(out, eager(x))
    health = serve.served.health()
    assert health.calls == 6
    assert health.fallbacks["plan_failure"] + health.plan_calls == 6
    serve.close()


def test_a_bad_request_fails_alone_when_eager_fails_on_the_merged_inputs_too():
    def picky(x):
        if (x < 0).any():
            raise ValueError("negative ids")
        return eager(x)

    class PickyPlan(Recorder):
        def __call__(self, x):
            if (x < 0).any():
                raise RuntimeError("index out of range")
            return super().__call__(x)

    runner = PickyPlan()
    runner.gate = threading.Event()
    serve = batched(runner, dynamic=True, fallback=picky, guard=GuardPolicy(max_failures=100))
    inputs = distinct_rows(4)
    inputs[2] = -inputs[2]
    threading.Timer(0.2, runner.gate.set).start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = call_together(serve, inputs)
    assert isinstance(results[2], ValueError)
    for index in (0, 1, 3):
        assert torch.equal(results[index], eager(inputs[index]))
    health = serve.served.health()
    assert health.calls == 4 and health.plan_calls == 3 and health.refused_calls == 1
    serve.close()


def test_outputs_without_a_batch_dimension_stop_the_merging_with_a_warning():
    runner = Recorder()
    runner.pooled = True
    runner.gate = threading.Event()
    serve = batched(runner, dynamic=True)
    inputs = distinct_rows(4)
    threading.Timer(0.2, runner.gate.set).start()
    with pytest.warns(RuntimeWarning, match="cannot be merged"):
        results = call_together(serve, inputs)
    for x, out in zip(inputs, results):
        assert torch.equal(out, eager(x).sum())
    assert serve.unbatchable is not None
    serve.close()


def test_nested_outputs_and_keyword_inputs_are_split_per_caller():
    def runner(x, *, mask):
        return {"y": [x * mask, x.sum(dim=1, keepdim=True)]}

    key = signature_key((rows_of(1),), {"mask": torch.ones(1, 3)})
    served = ServedPlan(
        BuiltPlan(
            runner=runner,
            serving=ServingTraits(concurrency=Concurrency.CONCURRENT, any_grad_mode=True),
        ),
        plan_name="fast",
        grad_mode=GradMode.INFERENCE_MODE,
        raced=(describe(key),),
        families=(describe(family_key(key)),),
        fallback=runner,
    )
    serve = BatchedDecision(served, batch_dim=0, raced_sizes=(1, 4), max_delay_ms=50)
    inputs = distinct_rows(4)
    results: list = [None] * 4

    def caller(i: int) -> None:
        with torch.inference_mode():
            results[i] = serve(inputs[i], mask=torch.full((1, 3), float(i)))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    for i, out in enumerate(results):
        expected = runner(inputs[i], mask=torch.full((1, 3), float(i)))
        assert torch.equal(out["y"][0], expected["y"][0])
        assert torch.equal(out["y"][1], expected["y"][1])
    serve.close()


def test_asyncio_callers_await_their_rows():
    runner = Recorder()
    serve = batched(runner, dynamic=True, max_delay_ms=20)
    inputs = distinct_rows(8)

    async def main() -> list:
        with torch.inference_mode():
            return await asyncio.gather(*(serve.acall(x) for x in inputs))

    results = asyncio.run(main())
    for x, out in zip(inputs, results):
        assert torch.equal(out, eager(x))
    assert max(runner.sizes) > 1  # the coroutines were merged
    serve.close()


def test_batches_never_exceed_the_largest_size():
    runner = Recorder()
    runner.gate = threading.Event()
    serve = batched(runner, dynamic=True, max_batch_size=4)
    threading.Timer(0.2, runner.gate.set).start()
    results = call_together(serve, distinct_rows(6, batch=2))
    assert all(out.shape == (2, 3) for out in results)
    assert max(runner.sizes) <= 4
    serve.close()


def test_two_batches_may_run_at_once_for_a_concurrent_plan():
    runner = Recorder()
    serve = batched(runner, dynamic=True, max_delay_ms=1, max_concurrent_batches=2)
    inputs = distinct_rows(16)
    results = call_together(serve, inputs)
    for x, out in zip(inputs, results):
        assert torch.equal(out, eager(x))
    assert serve.max_concurrent_batches == 2 and sum(runner.sizes) == 16
    serve.close()
