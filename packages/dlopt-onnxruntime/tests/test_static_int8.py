"""The int8 plans on a small conv net and an MLP: which ops each quantizes, the static
plan's calibration, and what the validation gate makes of the result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dlopt.errors import ConfigurationError, PlanNotApplicable, ProviderBuildError
from dlopt.plugin import OperatorMix, Precision, ProviderContext
from dlopt.settings.policy import structure_options
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.testing.models import MLP
from dlopt.validation import validate_outputs
from dlopt_onnxruntime import OnnxRuntimeProvider, OrtInt8StaticOptions
from dlopt_onnxruntime.plugin import default_providers

pytestmark = pytest.mark.slow

STATIC = "onnxruntime_cpu_int8_static"


def _provider(name: str) -> OnnxRuntimeProvider:
    return next(p for p in default_providers() if p.name == name)


def _options(**values: Any) -> OrtInt8StaticOptions:
    options = structure_options(OrtInt8StaticOptions, values, plan=STATIC)
    assert isinstance(options, OrtInt8StaticOptions)
    return options


class ConvNet(torch.nn.Module):
    """Two convolutions and a Linear head (one Gemm)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


def _images(seed: int, *batches: int) -> WorkloadProfile:
    gen = torch.Generator().manual_seed(seed)
    return WorkloadProfile(
        cases=tuple(
            WorkloadCase(f"b{n}", args=(torch.randn(n, 3, 16, 16, generator=gen),)) for n in batches
        )
    )


def _gate(plan: Any, model: torch.nn.Module, workload: WorkloadProfile) -> list[Any]:
    """The validation gate's verdict per case, at the plan's declared precision."""
    results = []
    with torch.inference_mode():
        for case in workload.cases:
            results.append(
                validate_outputs(
                    plan(*case.args),
                    model(*case.args),
                    precision=plan.precision,
                    case_name=case.name,
                )
            )
    return results


@pytest.fixture(scope="module")
def conv_net(tmp_path_factory: pytest.TempPathFactory) -> Any:
    torch.manual_seed(0)
    model = ConvNet().eval()
    workload = _images(1, 2, 8)
    context = ProviderContext(
        workload=workload, artifact_dir=tmp_path_factory.mktemp("conv"), options=_options()
    )
    static = _provider(STATIC).build(model, context)
    dynamic = _provider("onnxruntime_cpu_int8").build(
        model, ProviderContext(workload=workload, artifact_dir=context.artifact_dir)
    )
    yield model, workload, context, static, dynamic
    static.close()
    dynamic.close()


def test_static_plan_quantizes_the_convolutions_and_the_head(conv_net: Any) -> None:
    _, _, _, static, _ = conv_net
    meta = static.metadata
    assert static.precision is Precision.INT8
    assert meta["transform"]["kind"] == "quantize_static"
    assert static.artifacts["session_model"].name == "model.int8_static.onnx"
    assert meta["quantizable_op_types"] == {"Conv": 2, "Gemm": 1}
    # Both convolutions run on QDQ inputs (fused into QLinearConv by the session); the
    # head is quantized dynamically, as the dynamic plan does it.
    assert meta["quantized_op_types"] == {"Conv (QDQ)": 2, "MatMulInteger": 1}
    assert meta["unquantized_op_types"] == {}
    assert (meta["quantized_ops"], meta["quantizable_ops"]) == (3, 3)
    assert meta["quantized_fraction"] == 1.0
    assert meta["transform"]["calibration"]["workload_batches"] == 2
    assert meta["transform"]["calibration"]["file"] is None


def test_dynamic_plan_leaves_the_convolutions_in_fp32(conv_net: Any) -> None:
    *_, dynamic = conv_net
    assert dynamic.metadata["quantized_op_types"] == {"MatMulInteger": 1}
    assert dynamic.metadata["unquantized_op_types"] == {"Conv": 2}
    assert dynamic.metadata["quantized_fraction"] == round(1 / 3, 4)


def test_static_plan_passes_the_int8_gate_and_not_the_fp32_one(conv_net: Any) -> None:
    model, workload, _, static, _ = conv_net
    for result in _gate(static, model, workload):
        assert result.passed, result
    case = workload.cases[1]
    with torch.inference_mode():
        strict = validate_outputs(
            static(*case.args), model(*case.args), precision=Precision.FP32, case_name="x"
        )
    assert not strict.passed, "int8 outputs equal fp32 ones: nothing computed in int8"


def test_same_calibration_data_reuses_the_plan_and_new_data_requantizes(conv_net: Any) -> None:
    model, _, context, static, _ = conv_net
    again = _provider(STATIC).build(model, context)
    try:
        assert again.metadata["export_source"] == "manifest"
        assert (
            again.metadata["transform"]["calibration"]
            == static.metadata["transform"]["calibration"]
        )
    finally:
        again.close()
    # Same shapes, other values: the export is shared but the calibration is not reused.
    other = _images(7, 2, 8)
    rebuilt = _provider(STATIC).build(
        model,
        ProviderContext(workload=other, artifact_dir=context.artifact_dir, options=_options()),
    )
    try:
        assert rebuilt.metadata["export_source"] == "shared"
        old, new = (p.metadata["transform"]["calibration"]["digest"] for p in (static, rebuilt))
        assert old != new
    finally:
        rebuilt.close()


def test_a_calibration_file_adds_batches_and_bad_ranges_fail_the_gate(
    conv_net: Any, tmp_path: Path
) -> None:
    model, workload, *_ = conv_net
    gen = torch.Generator().manual_seed(3)
    # Activations a thousand times wider than the workload's: their int8 steps are too
    # coarse for the workload's own inputs, and the gate says so.
    wide = {f"batch{i}": (torch.randn(4, 3, 16, 16, generator=gen) * 1000).numpy() for i in (0, 1)}
    np.savez(tmp_path / "calibration.npz", **wide)
    context = ProviderContext(
        workload=workload,
        artifact_dir=tmp_path / "artifacts",
        options=_options(calibration_file=str(tmp_path / "calibration.npz")),
    )
    plan = _provider(STATIC).build(model, context)
    try:
        calibration = plan.metadata["transform"]["calibration"]
        assert (calibration["workload_batches"], calibration["file_batches"]) == (2, 2)
        assert calibration["file"] == "calibration.npz"
        assert not any(result.passed for result in _gate(plan, model, workload))
    finally:
        plan.close()


def test_static_plan_on_an_mlp_is_rejected_as_changing_nothing(tmp_path: Path) -> None:
    torch.manual_seed(0)
    workload = WorkloadProfile.single(
        torch.randn(16, 64, generator=torch.Generator().manual_seed(5))
    )
    context = ProviderContext(workload=workload, artifact_dir=tmp_path, options=_options())
    model = MLP(64, 128, 128, 16, activation="relu")
    # A 3-D buffer the forward never reads: nothing before the export rules out a Conv.
    model.register_buffer("unused_table", torch.zeros(2, 2, 2))
    with pytest.raises(ProviderBuildError) as info:
        _provider(STATIC).build(model, context)
    message = str(info.value)
    assert "quantized no Conv node" in message and "Gemm x3" in message
    assert "onnxruntime_cpu_int8 computes" in message and "int8_static_op_types" in message


#: What a profiled reference call of an MLP gives: no convolution.
NO_CONVOLUTION = OperatorMix(conv=0.0, linear=0.9, attention=0.0, other=0.1)


@pytest.mark.parametrize("mix", [NO_CONVOLUTION, None], ids=["profiled", "not profiled"])
def test_a_model_without_convolutions_is_refused_before_the_export(
    tmp_path: Path, mix: OperatorMix | None
) -> None:
    workload = WorkloadProfile.single(torch.randn(16, 64))
    context = ProviderContext(
        workload=workload, artifact_dir=tmp_path, options=_options(), operator_mix=mix
    )
    with pytest.raises(PlanNotApplicable) as info:
        _provider(STATIC).build(MLP(64, 128, 128, 16, activation="relu"), context)
    message = str(info.value)
    assert "has no convolution" in message
    assert ("linear 90%" in message) == (mix is not None)
    assert "int8_static_op_types" in message and "onnxruntime_cpu_int8" in message
    assert not any(tmp_path.rglob("*.onnx")), "refused before anything was exported"


class FunctionalConv(torch.nn.Module):
    """A convolution through torch.nn.functional: no Conv2d module for a hook to time."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 3, 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, self.weight).relu().mean(dim=(2, 3))


def test_a_convolution_the_operator_mix_missed_is_still_quantized(tmp_path: Path) -> None:
    # A mix timed by module hooks sees no convolution here; the 4-D weight says otherwise.
    workload = _images(9, 4)
    context = ProviderContext(
        workload=workload, artifact_dir=tmp_path, options=_options(), operator_mix=NO_CONVOLUTION
    )
    plan = _provider(STATIC).build(FunctionalConv().eval(), context)
    try:
        assert any(op.startswith("Conv") for op in plan.metadata["quantized_op_types"])
    finally:
        plan.close()


def test_static_matmul_on_an_mlp_quantizes_and_passes_the_gate(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = MLP(64, 128, 128, 16, activation="relu")
    workload = WorkloadProfile.single(
        torch.randn(16, 64, generator=torch.Generator().manual_seed(5))
    )
    options = _options(int8_static_op_types=["MatMul", "Gemm"], int8_dynamic_op_types=[])
    # Op types of its own: the model's lack of convolutions refuses nothing.
    context = ProviderContext(
        workload=workload, artifact_dir=tmp_path, options=options, operator_mix=NO_CONVOLUTION
    )
    plan = _provider(STATIC).build(model, context)
    try:
        quantized = plan.metadata["quantized_op_types"]
        assert sum(quantized.values()) == 3
        assert all(op.endswith(" (QDQ)") for op in quantized)
        assert plan.metadata["unquantized_op_types"] == {}
        for result in _gate(plan, model, workload):
            assert result.passed, result
    finally:
        plan.close()


# ------------------------------------------------------------------ refused before export


def test_an_optimization_level_that_does_not_fuse_qdq_is_refused(tmp_path: Path) -> None:
    context = ProviderContext(
        workload=_images(1, 2),
        artifact_dir=tmp_path,
        options=_options(graph_optimization_level="basic"),
    )
    with pytest.raises(ProviderBuildError, match=r"does not fuse QDQ.*'extended' or 'all'"):
        _provider(STATIC).build(ConvNet().eval(), context)


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (np.zeros((2, 3, 8, 8), np.float32), r"shape \(2, 3, 8, 8\).*\(any, 3, 16, 16\)"),
        (np.zeros((2, 3, 16, 16), np.float64), "is float64 .* model's input is float32"),
    ],
)
def test_a_calibration_file_unlike_the_inputs_is_refused(
    tmp_path: Path, array: Any, expected: str
) -> None:
    np.savez(tmp_path / "c.npz", batch=array)
    context = ProviderContext(
        workload=_images(1, 2, 4),
        artifact_dir=tmp_path,
        options=_options(calibration_file=str(tmp_path / "c.npz")),
    )
    with pytest.raises(ProviderBuildError, match=expected):
        _provider(STATIC).build(ConvNet().eval(), context)


def test_a_calibration_file_without_arrays_or_missing_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "empty.npz")
    for name, expected in (("empty.npz", "holds no arrays"), ("absent.npz", "no such file")):
        context = ProviderContext(
            workload=_images(1, 2),
            artifact_dir=tmp_path,
            options=_options(calibration_file=str(tmp_path / name)),
        )
        with pytest.raises(ProviderBuildError, match=expected):
            _provider(STATIC).build(ConvNet().eval(), context)


def test_a_calibration_file_must_be_npz() -> None:
    with pytest.raises(ConfigurationError, match=r"must name a \.npz file"):
        _options(calibration_file="calibration.pt")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"int8_static_op_types": ["Conv", "Gemm"]}, "int8_dynamic_op_types must be"),
        ({"int8_static_op_types": ["MatMul"]}, "MatMul is in both"),
        ({"int8_static_op_types": []}, "needs at least one ONNX op type"),
    ],
)
def test_op_types_quantized_both_ways_are_refused(values: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigurationError, match=expected):
        _options(**values)
