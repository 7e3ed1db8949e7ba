"""The fake SDK behaves like an asynchronous accelerator: what the provider relies on."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tinynpu
import torch


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class KeywordsAndNested(torch.nn.Module):
    def forward(self, x: torch.Tensor, *, bias: torch.Tensor) -> dict[str, object]:
        y = x + bias
        return {"sum": y, "parts": [y.amax(dim=1), (y.min(dim=1).values,)]}


@contextlib.contextmanager
def _loaded(
    model: torch.nn.Module, x: torch.Tensor, **device_options: Any
) -> Iterator[tuple[tinynpu.Device, tinynpu.LoadedProgram]]:
    """``model`` compiled for ``x``'s shape on an open device (closed afterwards)."""
    device = tinynpu.open_device(0, **device_options)
    try:
        loaded = device.load(tinynpu.compile(model, (x,)))
        loaded.specialize((x,))
        yield device, loaded
    finally:
        device.close()


def test_deferred_outputs_hold_nan_until_synchronize() -> None:
    model, x = ConvNet(), torch.randn(2, 3, 8, 8)
    with _loaded(model, x, launch="deferred") as (device, loaded):
        out = loaded(x)
        assert device.pending_calls() == 1
        assert torch.isnan(out).all(), "a deferred call must not run before synchronize()"
        device.synchronize()
        assert device.pending_calls() == 0
        torch.testing.assert_close(out, model(x).detach())


def test_async_calls_return_before_they_finish_and_synchronize_waits() -> None:
    model, x = ConvNet(), torch.randn(2, 3, 8, 8)
    with _loaded(model, x, worker_threads=2, queue_depth=4) as (device, loaded):
        outs = [loaded(x) for _ in range(10)]
        device.synchronize()
        assert device.pending_calls() == 0
        for out in outs:
            torch.testing.assert_close(out, model(x).detach())


def test_blocking_launch_finishes_each_call() -> None:
    model, x = ConvNet(), torch.randn(1, 3, 8, 8)
    with _loaded(model, x, launch="blocking") as (device, loaded):
        out = loaded(x)
        assert device.pending_calls() == 0
        torch.testing.assert_close(out, model(x).detach())


def test_inputs_are_copied_at_enqueue() -> None:
    model, x = ConvNet(), torch.randn(1, 3, 8, 8)
    expected = model(x).detach()
    with _loaded(model, x, launch="deferred") as (device, loaded):
        out = loaded(x)
        x.zero_()  # the caller reuses its buffer before the call has run
        device.synchronize()
        torch.testing.assert_close(out, expected)


def test_a_failed_queued_call_is_raised_by_synchronize() -> None:
    model, x = ConvNet(), torch.randn(1, 3, 8, 8)
    with _loaded(model, x, launch="deferred") as (device, loaded):

        def broken(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            raise RuntimeError("device fault")

        loaded.program.module = broken  # type: ignore[assignment]
        loaded(x)
        with pytest.raises(tinynpu.NpuError, match="device fault"):
            device.synchronize()
        device.synchronize()  # reported once


def test_new_shapes_are_specialized_on_their_first_call() -> None:
    model, x = ConvNet(), torch.randn(1, 3, 8, 8)
    with _loaded(model, x, launch="deferred") as (device, loaded):
        other = torch.randn(3, 3, 8, 8)
        out = loaded(other)  # a new shape runs to completion before returning
        assert device.pending_calls() == 0
        torch.testing.assert_close(out, model(other).detach())
        assert sorted(loaded.signatures) == [[[1, 3, 8, 8]], [[3, 3, 8, 8]]]


def test_device_memory_counts_weights_and_calls_in_flight() -> None:
    model, x = ConvNet(), torch.randn(2, 3, 8, 8)
    with _loaded(model, x, launch="deferred") as (device, loaded):
        weights = loaded.program.weight_bytes
        tensors = [*model.parameters(), *model.buffers()]
        assert weights == sum(t.numel() * t.element_size() for t in tensors)
        in_flight = (x.numel() + model(x).numel()) * 4  # the uploaded input and the output
        for _ in range(3):
            loaded(x)
        assert device.memory_stats()["in_use_bytes"] == weights + 3 * in_flight
        device.synchronize()
        stats = device.memory_stats()
        assert stats["in_use_bytes"] == weights
        assert stats["peak_bytes"] == weights + 3 * in_flight


def test_program_file_round_trip_keeps_keywords_and_nested_outputs(tmp_path: Path) -> None:
    model = KeywordsAndNested()
    x, bias = torch.randn(2, 5), torch.randn(5)
    program = tinynpu.compile(model, (x,), {"bias": bias}, freeze=True)
    path = program.save(tmp_path / "program.tnpu")
    loaded_program = tinynpu.load_program(path)
    assert loaded_program.kwarg_names == ("bias",)
    assert loaded_program.frozen
    device = tinynpu.open_device()
    try:
        loaded = device.load(loaded_program)
        loaded.specialize((x,), {"bias": bias})
        out = loaded(x, bias=bias)
        device.synchronize()
        torch.testing.assert_close(out, model(x, bias=bias))
        assert isinstance(out["parts"], list) and isinstance(out["parts"][1], tuple)
        with pytest.raises(tinynpu.NpuError, match="keyword inputs"):
            loaded(x)
    finally:
        device.close()


def test_a_file_that_is_not_a_program_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "program.tnpu"
    path.write_bytes(b"not a zip")
    with pytest.raises(tinynpu.NpuError, match="not a tinynpu program"):
        tinynpu.load_program(path)


def test_host_tensors_only() -> None:
    model, x = ConvNet(), torch.randn(1, 3, 8, 8)
    with _loaded(model, x) as (_, loaded), pytest.raises(tinynpu.NpuError, match="host"):
        loaded(torch.empty(1, 3, 8, 8, device="meta"))


def test_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [d.index for d in tinynpu.devices()] == [0]
    monkeypatch.setenv(tinynpu.VISIBLE_DEVICES_ENV, "0,2")
    assert [d.name for d in tinynpu.devices()] == ["tinynpu0", "tinynpu2"]
    with pytest.raises(tinynpu.NpuError, match="no tinynpu device 1"):
        tinynpu.open_device(1)
    monkeypatch.setenv(tinynpu.VISIBLE_DEVICES_ENV, "")
    assert tinynpu.devices() == []
    monkeypatch.setenv(tinynpu.VISIBLE_DEVICES_ENV, "gpu0")
    with pytest.raises(tinynpu.NpuError, match="comma-separated"):
        tinynpu.devices()


def test_ping_and_close() -> None:
    assert math.isfinite(tinynpu.ping(0))
    device = tinynpu.open_device()
    device.close()
    device.close()  # idempotent
    assert device.closed
    with pytest.raises(tinynpu.NpuError, match="closed"):
        device._submit(lambda: None)
