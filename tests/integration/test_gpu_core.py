"""Core's CUDA paths on a real GPU: native fp16/bf16 autocast, CUDA peak memory, timing
that waits for the device, and a race on a CUDA target. Skips without a CUDA device."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from dlopt import InferenceOptimizer, OptimizationPolicy, WorkloadCase, WorkloadProfile
from dlopt.contract.provider import ProviderContext
from dlopt.measurement import MeasurementPolicy, time_call, track_peak_memory
from dlopt.platform.probing import cuda_bf16_native
from dlopt.plugins.builtin import native_variants
from dlopt.settings.target import ExecutionTarget
from dlopt.testing.contexts import plan_gate

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason=f"torch {torch.__version__} sees no CUDA device"
    ),
]


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)
    ).eval()


def _workload(device: str) -> WorkloadProfile:
    gen = torch.Generator().manual_seed(1)
    return WorkloadProfile(
        cases=(
            WorkloadCase("b1", args=(torch.randn(1, 512, generator=gen).to(device),), weight=3),
            WorkloadCase("b32", args=(torch.randn(32, 512, generator=gen).to(device),)),
        )
    )


@pytest.mark.parametrize("name", ["native_fp16", "native_bf16"])
def test_native_autocast_on_cuda(name: str, tmp_path: Path) -> None:
    provider = next(p for p in native_variants() if p.name == name)
    context = ProviderContext(target=ExecutionTarget("cuda"), artifact_dir=tmp_path)
    availability = provider.probe(context)
    index = torch.cuda.current_device()
    if name == "native_bf16":
        # Offered exactly where the GPU computes bf16 natively (sm80+), never emulated.
        native = torch.cuda.get_device_capability(index)[0] >= 8
        assert availability.available is native is cuda_bf16_native(index)
    if not availability.available:
        pytest.skip(f"{name} unavailable here: {availability.reason}")
    model = _mlp().cuda()
    plan = provider.build(model, context)
    with torch.inference_mode():
        for case in _workload("cuda").cases:
            got = plan(*case.args)
            assert got.dtype == plan.output_dtype
            result = plan_gate(plan, got, model(*case.args), case.name)
            assert result.passed, result


@pytest.mark.parametrize("target", ["cuda", "cuda:0"])
def test_cuda_peak_memory_sees_an_allocation(target: str) -> None:
    size_mb = 256
    with track_peak_memory(target) as probe:
        block = torch.empty(size_mb * 2**20, dtype=torch.uint8, device="cuda")
        del block
    assert probe.result.mb is not None
    assert size_mb <= probe.result.mb < size_mb + 64, probe.result


def test_time_call_waits_for_the_device() -> None:
    """Queued device work is inside the timed region: the host time covers what CUDA
    events measure for the same call (it would be microseconds without a sync)."""
    sleep_cycles = 50_000_000  # tens of milliseconds of GPU time
    sync = functools.partial(torch.cuda.synchronize, torch.cuda.current_device())
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def work() -> None:
        start.record()
        torch.cuda._sleep(sleep_cycles)
        end.record()

    seconds, _ = time_call(work, synchronize=sync)
    device_seconds = start.elapsed_time(end) / 1e3
    assert device_seconds > 0
    assert seconds >= device_seconds * 0.9, (seconds, device_seconds)


@pytest.mark.parametrize("inputs_on", ["cuda", "cpu"])
def test_a_race_on_a_cuda_target(inputs_on: str, tmp_path: Path) -> None:
    """Inputs given on the CPU (as ``dlopt select --device cuda`` makes them) are prepared
    on the target before any plan sees them."""
    policy = OptimizationPolicy(
        include=("native_fp16", "native_bf16"),
        measurement=MeasurementPolicy(max_time_s=3.0, seed=3, bootstrap_resamples=0),
    )
    model = _mlp().cuda()
    decision = InferenceOptimizer("cuda", policy, artifact_dir=tmp_path / "plans").select(
        model, _workload(inputs_on)
    )
    report = decision.report
    assert report.baseline == "eager_fp32"
    measured = [c for c in report.candidates if c.name == "eager_fp32"]
    assert measured and measured[0].error is None
    with torch.inference_mode():
        out = decision(_workload("cuda").cases[0].args[0])
    assert out.device.type == "cuda"
