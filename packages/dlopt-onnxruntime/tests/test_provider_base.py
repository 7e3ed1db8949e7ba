"""The ONNX Runtime provider is a ``dlopt.plugin.Provider``: guarded, cached probes, and
typed records whose JSON is what the plans' metadata and signatures always held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlopt.plugin import Precision, Provider, ProviderContext
from dlopt_onnxruntime import OrtInt8Options, probe
from dlopt_onnxruntime.plugin import default_providers
from dlopt_onnxruntime.records import DynamicInt8Settings, Transform, TransformRecord


def _provider(name: str) -> Any:
    return next(p for p in default_providers() if p.name == name)


def test_every_plan_is_a_plugin_provider_with_its_options_type() -> None:
    plans = default_providers()
    assert all(isinstance(p, Provider) for p in plans)
    types = {p.name: p.options_type.__name__ for p in plans}
    assert types["onnxruntime_cpu"] == "OrtOptions"
    assert types["onnxruntime_cpu_int8"] == "OrtInt8Options"
    assert types["onnxruntime_cpu_int8_static"] == "OrtInt8StaticOptions"
    assert _provider("onnxruntime_cuda").install_hint == probe.GPU_INSTALL_HINT
    assert _provider("onnxruntime_cpu").install_hint == probe.CPU_INSTALL_HINT


def test_a_probe_that_raises_is_unavailable_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def broken() -> None:
        raise RuntimeError("simulated metadata failure")

    monkeypatch.setattr(probe, "sdk_versions", broken)
    availability = _provider("onnxruntime_cpu").probe(ProviderContext(artifact_dir=tmp_path))
    assert not availability.available
    assert "simulated metadata failure" in (availability.reason or "")
    assert availability.install_hint == probe.CPU_INSTALL_HINT


def test_probe_answers_are_cached_per_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    real = probe.sdk_versions

    def counting() -> Any:
        calls.append("probe")
        return real()

    monkeypatch.setattr(probe, "sdk_versions", counting)
    provider = _provider("onnxruntime_cpu")
    context = ProviderContext(artifact_dir=tmp_path)
    first = provider.probe(context)
    assert provider.probe(context) is first
    assert calls == ["probe"]


def test_the_dynamic_int8_signature_keeps_its_json() -> None:
    """Plan keys hash this JSON: saved int8 plans stay reusable across the refactor."""
    options = OrtInt8Options(int8_reduce_range=True)
    record = TransformRecord(
        "CPUExecutionProvider",
        Precision.INT8.value,
        Transform.QUANTIZE_DYNAMIC,
        DynamicInt8Settings(options.int8_op_types, options.int8_per_channel, True),
    )
    assert record.signature() == {
        "execution_provider": "CPUExecutionProvider",
        "precision": "int8",
        "kind": "quantize_dynamic",
        "op_types": ["MatMul", "Attention", "LSTM"],
        "per_channel": False,
        "reduce_range": True,
        "weight_type": "QInt8",
    }
    assert record.metadata() == {**record.signature(), "seconds": None}


def test_a_batched_workload_is_served_by_one_export_with_a_dynamic_batch_axis() -> None:
    # The throughput objective races one build per plan at every batch size: the export
    # makes the batch dimension dynamic and the report says over which range.
    import torch

    from dlopt.plugin import WorkloadProfile
    from dlopt_onnxruntime.export import analyze_cases

    workload = WorkloadProfile.batched(torch.randn(1, 6), batch_sizes=(1, 8, 32))
    layout = analyze_cases(workload.cases)
    assert layout.dynamic_dims == {"input_0": [0]}
    assert layout.shape_support() == "one ONNX export with dynamic axes: input_0 dim 0 (1 to 32)"
    fixed = analyze_cases(WorkloadProfile.single(torch.randn(2, 6)).cases)
    assert fixed.shape_support() == "one ONNX export at fixed input shapes"
