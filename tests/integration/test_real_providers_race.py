"""A real race across distributions: built-ins, ONNX Runtime and FX on a tiny conv net.

Checks the wiring, not the winner: timing on a shared CPU decides nothing reliably here.
"""

from __future__ import annotations

import json

import pytest
import torch

from dlopt import InferenceOptimizer, OptimizationPolicy, WorkloadCase, WorkloadProfile
from dlopt.measurement import MeasurementPolicy
from dlopt.testing.models import SmallConvNet


def test_real_plans_race_validate_and_report(tmp_path):
    pytest.importorskip("dlopt_onnxruntime")
    pytest.importorskip("dlopt_fx")
    model = SmallConvNet().eval()
    gen = torch.Generator().manual_seed(0)
    workload = WorkloadProfile(
        cases=(
            WorkloadCase("b1", args=(torch.randn(1, 3, 16, 16, generator=gen),), weight=3),
            WorkloadCase("b4", args=(torch.randn(4, 3, 16, 16, generator=gen),), weight=1),
        )
    )
    policy = OptimizationPolicy(
        include=("native_channels_last", "fx", "onnxruntime_cpu", "onnxruntime_cpu_int8"),
        measurement=MeasurementPolicy(max_time_s=3.0, seed=11, bootstrap_resamples=0),
        exhaustive=True,  # every named plan races
    )
    decision = InferenceOptimizer("cpu", policy, artifact_dir=tmp_path / "plans").select(
        model, workload
    )
    report = decision.report
    by_name = {c.name: c for c in report.candidates}
    assert set(by_name) == {
        "eager_fp32",
        "native_channels_last",
        "fx",
        "onnxruntime_cpu",
        "onnxruntime_cpu_int8",
    }
    ort = by_name["onnxruntime_cpu"]
    assert ort.validation.first_calls is not None and ort.validation.first_calls.passed, ort.error
    assert ort.precision == "fp32" and ort.first_call_time_s is not None
    assert [c.name for c in ort.cases] == ["b1", "b4"]
    assert all(c.latency is not None for c in ort.cases)
    assert by_name["fx"].metadata["rewrites"], "the fx plan records its rewrites"
    int8 = by_name["onnxruntime_cpu_int8"]
    # Either validated at int8 limits or rejected with a stage; never silently dropped.
    assert int8.precision == "int8" and (
        int8.validation.first_calls is not None or int8.error is not None
    )
    assert report.selected_plan in by_name
    with torch.inference_mode():
        out = decision(workload.cases[1].args[0])
    torch.testing.assert_close(out, model(workload.cases[1].args[0]), rtol=0.1, atol=0.1)
    bundle = decision.save_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["selected_plan"] == report.selected_plan
    decision.close()
