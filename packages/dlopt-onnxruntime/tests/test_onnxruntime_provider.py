"""Tests of the ONNX Runtime provider on CPU (GPU paths skip here with the probe's reason).

Exporting is slow (seconds per model), so exported plans are built once per module and
shared; plans of one model share one export inside the process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

import dlopt_onnxruntime.export as export_module
from dlopt.contract.provider import ProviderContext
from dlopt.errors import ProviderBuildError, WorkloadError
from dlopt.plugin import capture_output
from dlopt.precision import Precision
from dlopt.settings.policy import structure_options
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.testing import ProviderContractSuite
from dlopt.testing.models import MLP
from dlopt.validation import validate_outputs
from dlopt_onnxruntime import OnnxRuntimeProvider, clear_probe_cache, probe
from dlopt_onnxruntime.effective import normalize_option
from dlopt_onnxruntime.options import OrtOptions
from dlopt_onnxruntime.plugin import default_providers

pytestmark = pytest.mark.slow

CPU = "CPUExecutionProvider"


def _provider(name: str) -> OnnxRuntimeProvider:
    return next(p for p in default_providers() if p.name == name)


# ------------------------------------------------------------------ contract suites


class TestOnnxRuntimeCpuContract(ProviderContractSuite):
    distribution = "dlopt-onnxruntime"
    entry_point = "onnxruntime"
    heavy_modules = ("onnxruntime",)
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True
    supports_save_load = True
    # The export traces the model (the TorchScript exporter first).
    captures_graph = True

    def make_provider(self) -> OnnxRuntimeProvider:
        return _provider("onnxruntime_cpu")

    def _forget_probe_caches(self) -> None:
        clear_probe_cache()


class TestOnnxRuntimeInt8Contract(TestOnnxRuntimeCpuContract):
    def make_provider(self) -> OnnxRuntimeProvider:
        return _provider("onnxruntime_cpu_int8")


class TestOnnxRuntimeInt8StaticContract(TestOnnxRuntimeCpuContract):
    """The static plan; the suite's MLP-shaped models (keywords, nested outputs) get
    their MatMul/Gemm quantized statically too, so the plan has work on every model."""

    def make_provider(self) -> OnnxRuntimeProvider:
        return _provider("onnxruntime_cpu_int8_static")

    def make_options(self, provider: Any) -> Any:
        return structure_options(
            provider.options_type,
            {"int8_static_op_types": ["Conv", "MatMul", "Gemm"], "int8_dynamic_op_types": []},
            plan=provider.name,
        )


# ------------------------------------------------------------------ models


class NestedNet(torch.nn.Module):
    """Image plus keyword mask in, dict with a nested tuple out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor, scale: float = 1.0) -> dict[str, Any]:
        features = torch.relu(self.conv(x)).mean(dim=(2, 3))
        logits = self.head(features) * scale + mask
        return {"logits": logits, "extra": (features, logits.argmax(dim=-1))}


class Unexportable(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.zeta(x, x)


def _nested_workload() -> WorkloadProfile:
    gen = torch.Generator().manual_seed(3)

    def case(name: str, batch: int, size: int, weight: float) -> WorkloadCase:
        return WorkloadCase(
            name,
            args=(torch.randn(batch, 3, size, size, generator=gen),),
            kwargs={"mask": torch.randn(batch, 5, generator=gen), "scale": 2.0},
            weight=weight,
        )

    # Batch and image size vary; channels and the mask's width do not.
    return WorkloadProfile(
        cases=(case("b1-s16", 1, 16, 3), case("b4-s16", 4, 16, 1), case("b3-s24", 3, 24, 1)),
        name="nested",
    )


def _check_against_eager(
    plan: Any, model: torch.nn.Module, workload: WorkloadProfile, precision: Precision
) -> None:
    with torch.inference_mode():
        for case in workload.cases:
            got = plan(*case.args, **case.kwargs)
            expected = model(*case.args, **case.kwargs)
            result = validate_outputs(got, expected, precision=precision, case_name=case.name)
            assert result.passed, result


@pytest.fixture(scope="module")
def artifact_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ort-artifacts")


@pytest.fixture(scope="module")
def nested(artifact_dir: Path) -> Any:
    torch.manual_seed(0)
    model = NestedNet().eval()
    workload = _nested_workload()
    context = ProviderContext(workload=workload, artifact_dir=artifact_dir)
    plan = _provider("onnxruntime_cpu").build(model, context)
    yield model, workload, context, plan
    plan.close()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Any:
    torch.manual_seed(0)
    model = MLP(64, 256, 32)
    workload = WorkloadProfile.single(
        torch.randn(16, 64, generator=torch.Generator().manual_seed(5))
    )
    context = ProviderContext(workload=workload, artifact_dir=tmp_path_factory.mktemp("mlp"))
    fp32 = _provider("onnxruntime_cpu").build(model, context)
    int8 = _provider("onnxruntime_cpu_int8").build(model, context)
    yield model, workload, context, fp32, int8
    fp32.close()
    int8.close()


# ------------------------------------------------------------------ export and run


def test_multi_case_nested_inputs_and_dict_outputs(nested: Any) -> None:
    model, workload, _, plan = nested
    _check_against_eager(plan, model, workload, Precision.FP32)
    out = plan(*workload.cases[1].args, **workload.cases[1].kwargs)
    assert set(out) == {"logits", "extra"}
    assert isinstance(out["extra"], tuple) and out["extra"][1].dtype == torch.int64


def test_only_varying_dimensions_are_dynamic(nested: Any) -> None:
    *_, plan = nested
    # x: batch and both spatial sizes vary; mask: only the batch.
    assert plan.metadata["dynamic_axes"] == {"input_0": [0, 2, 3], "input_1": [0]}
    assert plan.metadata["input_names"] == ["input_0", "input_1"]
    assert len(plan.metadata["output_names"]) == 3
    # Export from the case whose varying sizes are > 1 (torch.export specializes 1s).
    assert plan.metadata["example_case"] != "b1-s16"


def test_export_evidence_is_recorded(nested: Any) -> None:
    _, _, _, plan = nested
    meta = plan.metadata
    assert meta["exporter"] in {"dynamo", "torchscript"}
    assert isinstance(meta["opset"], int) and meta["opset"] >= 17
    if meta["exporter"] == "dynamo":
        assert meta["export_fallback_error"]
    options = meta["session_options"]
    assert options["intra_op_num_threads"] == torch.get_num_threads()
    assert options["graph_optimization_level"] == "all"
    assert options["enable_cpu_mem_arena"] is True
    assert meta["session_providers"][0] == CPU
    json.dumps(meta, allow_nan=False)


def test_threads_follow_the_target(mlp: Any, tmp_path: Path) -> None:
    model, workload, *_ = mlp
    context = ProviderContext(
        target=ExecutionTarget("cpu", threads=1), workload=workload, artifact_dir=tmp_path
    )
    plan = _provider("onnxruntime_cpu").build(model, context)
    try:
        assert plan.metadata["session_options"]["intra_op_num_threads"] == 1
        assert plan.metadata["export_source"] == "shared"  # same model and signature
    finally:
        plan.close()


def test_single_case_workload_is_exported_static(mlp: Any) -> None:
    model, workload, _, fp32, _ = mlp
    assert fp32.metadata["dynamic_axes"] == {}
    _check_against_eager(fp32, model, workload, Precision.FP32)


def test_int8_plan_quantizes_and_passes_int8_limits(mlp: Any) -> None:
    model, workload, _, fp32, int8 = mlp
    assert int8.precision is Precision.INT8
    assert int8.metadata["transform"]["kind"] == "quantize_dynamic"
    assert int8.artifacts["session_model"].name == "model.int8.onnx"
    # Both Linear layers (Gemm nodes) run in int8: the whole model is int8.
    assert (int8.metadata["quantized_ops"], int8.metadata["quantizable_ops"]) == (2, 2)
    assert int8.metadata["quantized_fraction"] == 1.0
    assert "quantized_ops" not in fp32.metadata
    _check_against_eager(int8, model, workload, Precision.INT8)
    case = workload.cases[0]
    with torch.inference_mode():
        diff = (int8(*case.args) - fp32(*case.args)).abs().max().item()
    assert diff > 0, "int8 plan computed exactly the fp32 result: nothing was quantized"
    # Held to fp32 limits, the same int8 outputs fail: the limits really differ.
    with torch.inference_mode():
        strict = validate_outputs(
            int8(*case.args), model(*case.args), precision=Precision.FP32, case_name="x"
        )
    assert not strict.passed


def test_unexportable_model_is_rejected_with_exporter_messages(tmp_path: Path) -> None:
    workload = WorkloadProfile.single(torch.rand(2, 3) + 1.5)
    context = ProviderContext(workload=workload, artifact_dir=tmp_path)
    with pytest.raises(ProviderBuildError) as info:
        _provider("onnxruntime_cpu").build(Unexportable(), context)
    message = str(info.value)
    assert "dynamo exporter" in message and "torchscript exporter" in message
    assert "zeta" in message


def _two_batch_sizes_on_cpu(
    model: torch.nn.Module, first: int, second: int, *, seed: int, artifact_dir: Path
) -> tuple[WorkloadProfile, Any]:
    """Cases ``a`` and ``b`` of 4 features at batch ``first`` and ``second``, and the
    ``onnxruntime_cpu`` plan built for them."""
    gen = torch.Generator().manual_seed(seed)
    workload = WorkloadProfile(
        cases=tuple(
            WorkloadCase(name, args=(torch.randn(batch, 4, generator=gen),))
            for name, batch in (("a", first), ("b", second))
        )
    )
    plan = _provider("onnxruntime_cpu").build(
        model, ProviderContext(workload=workload, artifact_dir=artifact_dir)
    )
    return workload, plan


def test_auto_exports_with_torchscript_first(tmp_path: Path) -> None:
    """TorchScript is tried first: it exports in a fraction of the dynamo exporter's time."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
    workload, plan = _two_batch_sizes_on_cpu(model, 2, 7, seed=0, artifact_dir=tmp_path)
    try:
        assert plan.metadata["exporter"] == "torchscript"
        assert plan.metadata["export_fallback_error"] is None
        _check_against_eager(plan, model, workload, Precision.FP32)
    finally:
        plan.close()


def test_falls_back_to_dynamo_when_torchscript_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("simulated TorchScript trace failure")

    monkeypatch.setitem(export_module._EXPORT_FUNCS, "torchscript", broken)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
    workload, plan = _two_batch_sizes_on_cpu(model, 2, 7, seed=0, artifact_dir=tmp_path)
    try:
        assert plan.metadata["exporter"] == "dynamo"
        assert "simulated TorchScript trace failure" in plan.metadata["export_fallback_error"]
        _check_against_eager(plan, model, workload, Precision.FP32)
    finally:
        plan.close()


def test_export_serving_only_one_shape_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 'successful' export that fails on the second case is not accepted."""
    static_torchscript = export_module._export_torchscript

    def first_shape_only(job: Any) -> None:
        shapes = tuple(tuple(int(s) for s in t.shape) for t in job.example)
        static_torchscript(attrs.evolve(job, layout=attrs.evolve(job.layout, shapes=shapes)))

    monkeypatch.setitem(export_module._EXPORT_FUNCS, "torchscript", first_shape_only)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    workload, plan = _two_batch_sizes_on_cpu(model, 2, 5, seed=1, artifact_dir=tmp_path)
    try:
        assert plan.metadata["exporter"] == "dynamo"
        assert "output shapes" in plan.metadata["export_fallback_error"] or (
            "failed" in plan.metadata["export_fallback_error"]
        )
        _check_against_eager(plan, model, workload, Precision.FP32)
    finally:
        plan.close()


def test_cases_with_different_non_tensor_arguments_are_rejected(tmp_path: Path) -> None:
    x = torch.randn(1, 3, 8, 8)
    mask = torch.randn(1, 5)
    workload = WorkloadProfile(
        cases=(
            WorkloadCase("a", args=(x,), kwargs={"mask": mask, "scale": 1.0}),
            WorkloadCase("b", args=(x,), kwargs={"mask": mask, "scale": 2.0}),
        )
    )
    with pytest.raises(ProviderBuildError, match="non-tensor arguments"):
        _provider("onnxruntime_cpu").build(
            NestedNet().eval(), ProviderContext(workload=workload, artifact_dir=tmp_path)
        )


def test_calling_with_another_structure_says_so(nested: Any) -> None:
    _, _, _, plan = nested
    with pytest.raises(WorkloadError, match="input tensors"):
        plan(torch.randn(1, 3, 16, 16))


# ------------------------------------------------------------------ artifacts


def test_artifacts_are_written_and_reloaded(nested: Any) -> None:
    model, workload, context, plan = nested
    plan_dir = context.artifact_dir / "onnxruntime_cpu"
    assert plan.artifacts["onnx_model"] == plan_dir / "model.onnx"
    assert (plan_dir / "model.onnx.data").exists(), "weights are stored as external data"
    manifest = json.loads(plan.artifacts["manifest"].read_text())
    assert manifest["dynamic_axes"] == plan.metadata["dynamic_axes"]
    assert manifest["export_record"]["exporter"] == plan.metadata["exporter"]
    # A fresh provider (a later run hitting the cache) loads the files instead of exporting.
    again = _provider("onnxruntime_cpu").build(model, context)
    try:
        assert again.metadata["reused_export"] is True
        assert again.metadata["export_source"] == "manifest"
        assert again.metadata["exporter"] == plan.metadata["exporter"]
        _check_against_eager(again, model, workload, Precision.FP32)
    finally:
        again.close()


def test_changed_weights_are_not_served_from_old_artifacts(nested: Any) -> None:
    model, workload, context, _ = nested
    changed = NestedNet().eval()
    changed.load_state_dict(model.state_dict())
    with torch.no_grad():
        changed.head.bias.add_(1.0)
    export_module_calls: list[str] = []
    original = export_module._EXPORT_FUNCS["torchscript"]

    def counting(job: Any) -> None:
        export_module_calls.append("torchscript")
        original(job)

    provider = OnnxRuntimeProvider("onnxruntime_cpu", CPU)
    torchscript = attrs.evolve(context, options=OrtOptions(exporter="torchscript"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(export_module._EXPORT_FUNCS, "torchscript", counting)
        plan = provider.build(changed, torchscript)
    try:
        assert export_module_calls == ["torchscript"]
        assert plan.metadata["reused_export"] is False
        _check_against_eager(plan, changed, workload, Precision.FP32)
    finally:
        plan.close()


# ------------------------------------------------------------------ probes


def test_cpu_probe_reports_flavour_and_compiled_providers(tmp_path: Path) -> None:
    availability = _provider("onnxruntime_cpu").probe(ProviderContext(artifact_dir=tmp_path))
    assert availability.available
    assert availability.details["flavour"] == "onnxruntime"
    assert CPU in availability.details["compiled_providers"].split(",")
    assert availability.sdk_versions["onnxruntime"]


def test_cuda_provider_missing_from_build_is_reported(tmp_path: Path) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime build has the CUDA EP")
    context = ProviderContext(target=ExecutionTarget("cuda:0"), artifact_dir=tmp_path)
    availability = _provider("onnxruntime_cuda").probe(context)
    assert not availability.available
    assert "built without CUDAExecutionProvider" in availability.reason
    assert availability.install_hint == probe.GPU_INSTALL_HINT


def test_listed_but_falling_back_provider_is_unusable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build lists CUDA, but a session silently runs on CPU: reported, not used."""
    import onnxruntime

    real = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" in real:
        pytest.skip("this onnxruntime build has a real CUDA EP")
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", *real]
    )
    clear_probe_cache()
    try:
        context = ProviderContext(target=ExecutionTarget("cuda:0"), artifact_dir=tmp_path)
        availability = _provider("onnxruntime_cuda").probe(context)
    finally:
        clear_probe_cache()
    assert not availability.available
    assert "fell back to CPUExecutionProvider" in availability.reason
    assert availability.details["session_providers"] == CPU
    assert availability.install_hint


@pytest.fixture
def cuda_falls_back(monkeypatch: pytest.MonkeyPatch) -> Any:
    """ONNX Runtime lists the CUDA EP, but a session falls back to the CPU EP and writes
    the reason to fd 2, as the real one does without cuDNN; the probe cache is fresh."""
    import onnxruntime

    class FallingBackSession:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            import os

            os.write(2, b"[E:onnxruntime] Failed to load libcudnn.so.9: not found\n")

        def get_providers(self) -> list[str]:
            return [CPU]

    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", CPU]
    )
    monkeypatch.setattr(onnxruntime, "InferenceSession", FallingBackSession)
    clear_probe_cache()
    yield onnxruntime
    clear_probe_cache()


def test_fallback_check_uses_session_providers(cuda_falls_back: Any) -> None:
    """Simulated fully: listed EP, session reports only CPU, with ORT's log captured."""
    check = probe.check_execution_provider(cuda_falls_back, "CUDAExecutionProvider")
    cached = probe.check_execution_provider(cuda_falls_back, "CUDAExecutionProvider")
    assert not check.usable and cached is check
    assert "libcudnn.so.9" in check.reason
    assert check.session_providers == (CPU,)


def test_what_the_probe_session_prints_also_reaches_an_enclosing_capture(
    cuda_falls_back: Any,
) -> None:
    """The probe captures through dlopt's shared capture, so a front end's own capture
    around it still sees ORT's log (a private redirection would swallow it)."""
    with capture_output("probe onnxruntime") as outer:
        check = probe.check_execution_provider(cuda_falls_back, "CUDAExecutionProvider")
    assert "libcudnn.so.9" in check.reason
    assert outer.result is not None and "libcudnn.so.9" in outer.result.stderr


def test_both_flavours_installed_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"onnxruntime": "1.20.0", "onnxruntime-gpu": "1.20.0"}
    monkeypatch.setattr(probe, "distribution_version", lambda name: versions.get(name))
    install = probe.detect_installation()
    assert install.flavours == ("onnxruntime", "onnxruntime-gpu")
    assert install.conflict and "overwrite each other" in install.conflict
    assert "pip uninstall -y onnxruntime onnxruntime-gpu" in install.conflict


def test_cpu_plans_are_unavailable_on_a_cuda_target(tmp_path: Path) -> None:
    context = ProviderContext(target=ExecutionTarget("cuda:0"), artifact_dir=tmp_path)
    availability = _provider("onnxruntime_cpu_int8").probe(context)
    assert not availability.available
    assert "target is cuda:0" in availability.reason


def test_precision_not_offered_is_reported(tmp_path: Path) -> None:
    provider = OnnxRuntimeProvider("ort_cpu_fp16", CPU, "fp16")
    availability = provider.probe(ProviderContext(artifact_dir=tmp_path))
    assert not availability.available
    assert "fp16 is not offered with CPUExecutionProvider" in availability.reason


def test_plugin_registers_every_plan_with_its_precision() -> None:
    plans = {p.name: p.precision for p in default_providers()}
    assert plans == {
        "onnxruntime_cpu": Precision.FP32,
        "onnxruntime_cpu_int8": Precision.INT8,
        "onnxruntime_cpu_int8_static": Precision.INT8,
        "onnxruntime_cuda": Precision.FP32,
        "onnxruntime_cuda_fp16": Precision.FP16,
        "onnxruntime_tensorrt": Precision.TF32,
        "onnxruntime_tensorrt_fp16": Precision.FP16,
        "onnxruntime_openvino": Precision.FP32,
    }


# ------------------------------------------------------------------ GPU


def _cuda_context(tmp_path: Path, workload: WorkloadProfile) -> ProviderContext:
    return ProviderContext(
        target=ExecutionTarget("cuda:0"), workload=workload, artifact_dir=tmp_path
    )


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    [
        "onnxruntime_cuda",
        "onnxruntime_cuda_fp16",
        "onnxruntime_tensorrt",
        "onnxruntime_tensorrt_fp16",
    ],
)
def test_gpu_plans_run_nested_workloads(name: str, tmp_path: Path) -> None:
    provider = _provider(name)
    workload = _nested_workload()
    availability = provider.probe(_cuda_context(tmp_path, None))  # type: ignore[arg-type]
    if not availability.available:
        pytest.skip(f"{name} unavailable here: {availability.reason}")
    device = torch.device("cuda:0")
    torch.manual_seed(0)
    model = NestedNet().eval().to(device)
    moved = WorkloadProfile(
        cases=tuple(
            WorkloadCase(
                c.name,
                args=tuple(a.to(device) for a in c.args),
                kwargs={
                    k: v.to(device) if isinstance(v, torch.Tensor) else v
                    for k, v in c.kwargs.items()
                },
                weight=c.weight,
            )
            for c in workload.cases
        )
    )
    plan = provider.build(model, _cuda_context(tmp_path, moved))
    try:
        assert plan.metadata["session_providers"][0] == provider.execution_provider
        # Every option the plan set is in effect (build refuses otherwise); say so here too.
        # (an option the EP does not report back is listed as unconfirmed instead).
        effective = plan.runner.session.get_provider_options()
        for ep, options in plan.metadata["provider_options"].items():
            for key in ("use_tf32", "user_compute_stream", "trt_fp16_enable"):
                if key in options and key in effective.get(ep, {}):
                    assert normalize_option(effective[ep][key]) == normalize_option(options[key])
                elif key in options and ep in effective:
                    assert key in plan.metadata["provider_options_unconfirmed"][ep]
        assignment = plan.metadata["node_assignment"]
        if assignment is not None:
            assert assignment.get(provider.execution_provider, 0) > 0, assignment
        for _ in range(2):  # second round uses the learned/preallocated output shapes
            _check_against_eager(plan, model, moved, plan.precision)
        out = plan(*moved.cases[0].args, **moved.cases[0].kwargs)
        assert out["logits"].device == device
    finally:
        plan.close()
