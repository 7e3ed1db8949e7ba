"""Serving an OpenVINO plan: any grad mode, inputs made inside or outside inference mode,
fresh outputs, many threads at once, the throughput hint's split batch, and calls the
plan cannot serve."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from dlopt.plugin import ExecutionTarget, ProviderContext, WorkloadCase, WorkloadError
from dlopt.plugin import WorkloadProfile as Profile
from dlopt.testing.models import MLP
from dlopt_openvino import OpenVinoOptions
from dlopt_openvino.plugin import default_providers


class RowSum(torch.nn.Module):
    """Mixes the rows of the batch: its batch cannot be split."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=0, keepdim=True) * 2


def _workload(features: int = 16) -> Profile:
    gen = torch.Generator().manual_seed(0)
    return Profile(
        cases=tuple(
            WorkloadCase(f"batch-{n}", args=(torch.randn(n, features, generator=gen),))
            for n in (1, 4)
        )
    )


def _build(
    model: torch.nn.Module, tmp: Path, options: OpenVinoOptions | None = None, **target: Any
) -> Any:
    provider = next(p for p in default_providers() if p.name == "openvino_cpu")
    context = ProviderContext(
        target=ExecutionTarget("cpu", **target),
        workload=_workload(),
        artifact_dir=tmp,
        options=options,
    )
    return provider.build(model, context)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    torch.manual_seed(0)
    model = MLP(16, 64, 8)
    plan = _build(model, tmp_path_factory.mktemp("serving"))
    yield model, plan
    plan.close()


def _expected(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x.detach().clone())


@pytest.mark.parametrize("made_in", ["inference_mode", "plain"])
@pytest.mark.parametrize("called_in", ["inference_mode", "no_grad", "enabled"])
def test_serves_in_any_grad_mode_on_any_input(served: Any, made_in: str, called_in: str) -> None:
    model, plan = served
    gen = torch.Generator().manual_seed(1)
    if made_in == "inference_mode":
        with torch.inference_mode():
            x = torch.randn(3, 16, generator=gen) * 2  # an inference tensor
    else:
        x = (torch.randn(3, 16, generator=gen) * 2).requires_grad_(called_in == "enabled")
    modes = {
        "inference_mode": torch.inference_mode,
        "no_grad": torch.no_grad,
        "enabled": lambda: torch.enable_grad(),
    }
    with modes[called_in]():
        out = plan(x)
    torch.testing.assert_close(out, _expected(model, x), rtol=1e-4, atol=1e-5)
    # A fresh, ordinary tensor: usable in autograd whatever the mode it was made in.
    assert not out.is_inference() and not out.requires_grad
    weight = torch.ones(8, requires_grad=True)
    (out * weight).sum().backward()
    assert weight.grad is not None


def test_outputs_are_fresh_on_every_call(served: Any) -> None:
    _, plan = served
    first_input = torch.randn(4, 16)
    first = plan(first_input)
    kept = first.clone()
    second = plan(torch.randn(4, 16))
    assert first.data_ptr() != second.data_ptr()
    torch.testing.assert_close(first, kept)  # the second call did not write into it


@pytest.fixture(scope="module")
def served_for_throughput(tmp_path_factory: pytest.TempPathFactory) -> Any:
    torch.manual_seed(0)
    model = MLP(16, 64, 8)
    options = OpenVinoOptions(performance_hint="throughput", num_streams=2)
    plan = _build(model, tmp_path_factory.mktemp("throughput"), options)
    yield model, plan
    plan.close()


@pytest.mark.parametrize("hint", ["latency", "throughput"])
def test_four_threads_at_once_each_get_their_own_output(
    request: pytest.FixtureRequest, hint: str
) -> None:
    """Each thread's calls run on infer requests of its own (under the throughput hint,
    several per thread, its batches split across them)."""
    model, plan = request.getfixturevalue(
        "served" if hint == "latency" else "served_for_throughput"
    )
    inputs = [torch.randn(2 + i, 16, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    expected = [_expected(model, x) for x in inputs]
    start = threading.Barrier(4)
    got: dict[int, list[torch.Tensor]] = {}
    errors: list[BaseException] = []

    def serve(index: int) -> None:
        try:
            start.wait()
            with torch.inference_mode():
                got[index] = [plan(inputs[index]) for _ in range(20)]
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    for index in range(4):
        for out in got[index]:
            torch.testing.assert_close(out, expected[index], rtol=1e-4, atol=1e-5)


def test_calls_with_another_structure_dtype_or_shape_are_refused(served: Any) -> None:
    _, plan = served
    with pytest.raises(WorkloadError, match="converted for 1 input tensors but the call passed 2"):
        plan(torch.randn(1, 16), torch.randn(1, 16))
    with pytest.raises(WorkloadError, match=r"torch\.float32 of rank 3, but .* of rank 2"):
        plan(torch.randn(1, 2, 16))
    with pytest.raises(WorkloadError, match=r"torch\.float64 of rank 2, but .* torch\.float32"):
        plan(torch.randn(2, 16, dtype=torch.float64))
    with pytest.raises(WorkloadError, match=r"shape \[2, 12\], .* shape \['any', 16\]"):
        plan(torch.randn(2, 12))


def test_unseen_batch_sizes_are_served_by_the_dynamic_batch(served: Any) -> None:
    model, plan = served
    assert plan.metadata["dynamic_dims"] == {"input_0": [0]}
    assert plan.metadata["input_shapes"] == (
        "one OpenVINO model with dynamic dimensions: input_0 dim 0 (1 to 4)"
    )
    x = torch.randn(9, 16)
    torch.testing.assert_close(plan(x), _expected(model, x), rtol=1e-4, atol=1e-5)


def test_threads_follow_the_target(tmp_path: Path) -> None:
    with _build(MLP(16, 64, 8), tmp_path, threads=1) as plan:
        assert plan.metadata["compile_config"]["INFERENCE_NUM_THREADS"] == "1"


def test_throughput_hint_splits_the_batch_across_infer_requests(
    served_for_throughput: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, plan = served_for_throughput
    meta = plan.metadata
    assert meta["compile_config"]["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert meta["split_batch"] is True
    runner = plan.runner
    calls: list[int] = []
    split = runner._split

    def counting(requests: Any, arrays: Any, batch: int) -> Any:
        calls.append(batch)
        return split(requests, arrays, batch)

    monkeypatch.setattr(runner, "_split", counting)
    for rows in (1, 4, 7):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(plan(x), _expected(model, x), rtol=1e-4, atol=1e-5)
    # Batch 1 runs on one request; larger batches are split where there are streams.
    split_across = meta["infer_requests_per_call"]
    assert calls == ([4, 7] if split_across > 1 else []), (calls, meta)


def test_a_model_mixing_its_batch_is_not_split(tmp_path: Path) -> None:
    options = OpenVinoOptions(performance_hint="throughput", num_streams=2)
    with _build(RowSum().eval(), tmp_path, options) as plan:
        assert plan.metadata["split_batch"] is False
        x = torch.randn(4, 16)
        torch.testing.assert_close(plan(x), x.sum(dim=0, keepdim=True) * 2)
