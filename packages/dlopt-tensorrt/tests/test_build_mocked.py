"""Option translation with the SDK faked: what dlopt asks torch_tensorrt.compile for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from dlopt.plugin import (
    ExecutionTarget,
    Precision,
    ProviderBuildError,
    ProviderContext,
    ValueDependentGraph,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt_tensorrt import TensorRTOptions, TensorRTProvider, load_engine, precision_kwargs


def _workload() -> WorkloadProfile:
    return WorkloadProfile(
        (
            WorkloadCase("b1", args=(torch.randn(1, 16),), weight=1),
            WorkloadCase("b4", args=(torch.randn(4, 16),), weight=6),
            WorkloadCase("b32", args=(torch.randn(32, 16),), weight=1),
        ),
        name="serving",
    )


def _context(
    tmp_path: Path, workload: WorkloadProfile | None = None, **kwargs: Any
) -> ProviderContext:
    return ProviderContext(
        target=ExecutionTarget("cuda"),
        workload=workload or _workload(),
        artifact_dir=tmp_path,
        **kwargs,
    )


def test_compile_gets_dynamo_ir_and_a_shape_range(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt(api="new")
    model = net
    plan = TensorRTProvider(Precision.FP16).build(model, _context(tmp_path))
    (call,) = trt.compile_calls
    assert call["ir"] == "dynamo"
    assert call["device"] == torch.device("cuda", 0)  # target "cuda": the current device
    assert call["min_block_size"] == 1
    (spec,) = call["inputs"]
    assert spec.kwargs["name"] == "features"  # the forward parameter
    assert spec.kwargs["min_shape"] == (1, 16)
    assert spec.kwargs["opt_shape"] == (4, 16)  # the heaviest traffic
    assert spec.kwargs["max_shape"] == (32, 16)
    assert spec.kwargs["dtype"] == torch.float32
    # Strongly typed release: fp16 through autocast, no enabled_precisions.
    assert call["enable_autocast"] is True
    assert call["autocast_low_precision_type"] == torch.float16
    assert "enabled_precisions" not in call
    assert plan.precision is Precision.FP16
    assert plan.output_dtype == torch.float16
    # The compiled module is a copy; the caller's model is untouched.
    assert call["module"] is not model
    x = torch.randn(3, 16)
    torch.testing.assert_close(plan(x), model(x))
    meta = plan.metadata
    json.dumps(meta, allow_nan=False)
    assert meta["precision_api"] == "enable_autocast"
    assert meta["dynamic_shapes"] is True and meta["opt_case"] == "b4"
    assert meta["compile_options"]["autocast_low_precision_type"] == "float16"
    plan.close()
    with pytest.raises(RuntimeError, match="closed"):
        plan(x)


def test_legacy_release_gets_enabled_precisions(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt(api="legacy")
    plan = TensorRTProvider(Precision.BF16).build(net, _context(tmp_path))
    (call,) = trt.compile_calls
    assert call["enabled_precisions"] == {torch.float32, torch.bfloat16}
    # Recorded as strict JSON: the set as a sorted list of dtype names.
    assert plan.metadata["compile_options"]["enabled_precisions"] == ["bfloat16", "float32"]
    assert call["use_explicit_typing"] is False
    assert "enable_autocast" not in call


@pytest.mark.parametrize(
    ("precision", "disable_tf32"), [(Precision.FP32, True), (Precision.TF32, False)]
)
def test_fp32_and_tf32_toggle_tf32(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path, precision: Precision, disable_tf32: bool
) -> None:
    trt = fake_trt(api="new")
    plan = TensorRTProvider(precision).build(net, _context(tmp_path))
    assert trt.compile_calls[0]["disable_tf32"] is disable_tf32
    assert plan.output_dtype is None
    assert plan.metadata["precision_api"] == "fp32"


def test_static_workload_gives_a_static_input(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    workload = WorkloadProfile.single(torch.randn(2, 16))
    TensorRTProvider(Precision.FP16).build(net, _context(tmp_path, workload))
    (spec,) = trt.compile_calls[0]["inputs"]
    example = spec.kwargs.pop("torch_tensor")
    assert spec.kwargs == {"shape": (2, 16), "dtype": torch.float32, "name": "features"}
    assert example is workload.cases[0].args[0]


def test_extra_compile_options_pass_through(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    provider = TensorRTProvider(Precision.FP16, compile_options={"truncate_double": True})
    provider.build(net, _context(tmp_path))
    call = trt.compile_calls[0]
    assert call["truncate_double"] is True and call["min_block_size"] == 1


def test_save_engine_writes_into_the_plan_dir(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    context = _context(tmp_path, options=TensorRTOptions(save_engine=True))
    plan = TensorRTProvider(Precision.FP16).build(net, context)
    (save,) = trt.save_calls
    path = plan.artifacts["engine"]
    assert path == tmp_path / "tensorrt_fp16" / "trt_program.ep" and path.exists()
    assert save["output_format"] == "exported_program"
    (example,) = save["arg_inputs"]
    assert example.shape == (32, 16)


def test_compile_failure_is_a_build_error(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    trt.fail_with = RuntimeError("Unsupported operator aten.foo")
    with pytest.raises(
        ProviderBuildError,
        match=r"torch_tensorrt\.compile failed: RuntimeError: Unsupported operator",
    ):
        TensorRTProvider(Precision.FP16).build(net, _context(tmp_path))


def test_workload_is_required(net: torch.nn.Module, fake_trt: Any, tmp_path: Path) -> None:
    fake_trt()
    context = ProviderContext(target=ExecutionTarget("cuda"), artifact_dir=tmp_path)
    with pytest.raises(ProviderBuildError, match="pass a workload"):
        TensorRTProvider(Precision.FP16).build(net, context)


def test_unservable_workload_is_a_build_error(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    fake_trt()
    workload = WorkloadProfile.single(torch.randn(2, 16), 3)
    with pytest.raises(ProviderBuildError, match="tensor arguments only"):
        TensorRTProvider(Precision.FP16).build(net, _context(tmp_path, workload))


def test_build_refuses_with_the_probe_reason(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    fake_trt(capability=(6, 1))
    with pytest.raises(ProviderBuildError, match=r"compute capability 6\.1 is below"):
        TensorRTProvider(Precision.FP16).build(net, _context(tmp_path))


def test_precision_kwargs_without_any_precision_api() -> None:
    with pytest.raises(ProviderBuildError, match="neither enable_autocast nor enabled_precisions"):
        precision_kwargs(Precision.FP16, {"device", "disable_tf32"})
    with pytest.raises(ProviderBuildError, match="no disable_tf32"):
        precision_kwargs(Precision.FP32, {"device"})
    assert precision_kwargs(Precision.FP32, {"disable_tf32", "enabled_precisions"}) == (
        {"disable_tf32": True, "enabled_precisions": {torch.float32}},
        "fp32",
    )


# What Torch-TensorRT 2.13 does with these calls, as the fake SDK simulates it ----------

# target "cuda" without an index ---------------------------------------------------


def test_target_cuda_without_an_index_builds_on_the_current_device(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trt = fake_trt()
    plan = TensorRTProvider(Precision.FP16).build(net, _context(tmp_path))
    (call,) = trt.compile_calls
    assert call["device"] == torch.device("cuda", 0)
    assert plan.metadata["compile_options"]["device"] == "cuda:0"


def test_an_explicit_index_is_kept(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    trt = fake_trt()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    TensorRTProvider(Precision.FP16).build(
        net,
        ProviderContext(
            target=ExecutionTarget("cuda:1"), workload=_workload(), artifact_dir=tmp_path
        ),
    )
    assert trt.compile_calls[0]["device"] == torch.device("cuda", 1)


# a saved program keeps its dynamic batch -----------------------------------------


def test_a_saved_program_serves_every_case_shape(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    context = _context(tmp_path, options=TensorRTOptions(save_engine=True))
    model = net
    plan = TensorRTProvider(Precision.FP16).build(model, context)
    (save,) = trt.save_calls
    assert save["retrace"] is False
    loaded = load_engine(plan.artifacts["engine"])
    for case in _workload().cases:
        x = case.args[0]
        torch.testing.assert_close(loaded(x), model(x))
    assert plan.metadata["save_options"] == {"output_format": "exported_program", "retrace": False}


# the timing cache belongs to the plan ---------------------------------------------


def test_the_timing_cache_lives_in_the_plan_directory(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    TensorRTProvider(Precision.FP16).build(net, _context(tmp_path))
    path = Path(trt.compile_calls[0]["timing_cache_path"])
    assert path.parent == tmp_path / "tensorrt_fp16"


def test_a_release_without_the_option_is_not_given_it(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt(api="minimal")
    TensorRTProvider(Precision.FP16).build(net, _context(tmp_path))
    assert "timing_cache_path" not in trt.compile_calls[0]


class _BranchOnValues(torch.nn.Module):
    """Branches on the sign of the inputs' sum: the raced inputs all take the first branch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.sum() > 0:
            return self.fc(features)
        return self.fc(features) * 3


class _LoopOnValues(torch.nn.Module):
    """Repeats a layer as many times as the largest input value says."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        for _ in range(int(features.amax().clamp(max=3))):
            features = self.fc(features).relu()
        return features


@pytest.mark.parametrize(
    ("model", "line"),
    [
        (_BranchOnValues(), "if features.sum() > 0:"),
        (_LoopOnValues(), "for _ in range(int(features.amax().clamp(max=3))):"),
    ],
)
def test_a_graph_that_depends_on_input_values_is_refused_before_compiling(
    model: torch.nn.Module, line: str, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    positive = WorkloadProfile(
        (
            WorkloadCase("b1", args=(torch.rand(1, 16) + 1,)),
            WorkloadCase("b4", args=(torch.rand(4, 16) + 1,)),
        )
    )
    with pytest.raises(ValueDependentGraph) as refused:
        TensorRTProvider(Precision.FP16).build(model.eval(), _context(tmp_path, positive))
    assert line in str(refused.value)
    assert "test_build_mocked.py:" in str(refused.value)
    assert trt.compile_calls == []  # refused before the SDK saw it
