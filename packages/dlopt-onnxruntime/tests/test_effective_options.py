"""A session must run with what the plan asked for: provider options that ONNX Runtime
dropped (its fallback retries without them) or ignored refuse the plan, a TensorRT plan
whose nodes all ran elsewhere is refused, probe reasons carry no terminal codes, and the
TensorRT EP's install hint names the major and index it needs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from dlopt.errors import ProviderBuildError
from dlopt.plugin import PreparedCase, ProviderContext
from dlopt.settings.target import ExecutionTarget
from dlopt_onnxruntime import OnnxRuntimeProvider, clear_probe_cache, probe
from dlopt_onnxruntime.effective import (
    assignment_problem,
    describe_lost,
    fell_back,
    options_not_in_effect,
)
from dlopt_onnxruntime.plugin import default_providers

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TRT = "TensorrtExecutionProvider"


def _context(tmp_path: Path) -> ProviderContext:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        cases = (PreparedCase("b3", (x,), {}, model(x)),)
    return ProviderContext(artifact_dir=tmp_path, cases=cases), model  # type: ignore[return-value]


# ------------------------------------------------------------------ real ONNX Runtime (CPU)


@pytest.mark.slow
def test_an_option_the_session_ignored_refuses_the_plan(tmp_path: Path) -> None:
    context, model = _context(tmp_path)  # type: ignore[misc]
    provider = OnnxRuntimeProvider(
        "ort_cpu_tuned", CPU, provider_options={"dlopt_unknown_option": "1"}
    )
    with pytest.raises(ProviderBuildError) as info:
        provider.build(model, context)
    message = str(info.value)
    assert "CPUExecutionProvider: dlopt_unknown_option=1 (in effect: unset)" in message
    assert "would not measure what it claims" in message


@pytest.mark.slow
def test_the_plan_records_which_ep_ran_the_nodes(tmp_path: Path) -> None:
    import onnxruntime

    if not hasattr(onnxruntime.InferenceSession, "get_provider_graph_assignment_info"):
        pytest.skip(f"onnxruntime {onnxruntime.__version__} does not record EP assignment")
    context, model = _context(tmp_path)  # type: ignore[misc]
    plan = next(p for p in default_providers() if p.name == "onnxruntime_cpu").build(model, context)
    try:
        assignment = plan.metadata["node_assignment"]
        assert set(assignment) == {CPU} and assignment[CPU] >= 1
    finally:
        plan.close()


# ------------------------------------------------------------------ the comparison


def test_options_dropped_by_the_fallback_are_found() -> None:
    """What ONNX Runtime's fallback leaves: the CUDA EP with its default options."""
    requested = [
        (
            CUDA,
            {
                "device_id": "0",
                "use_tf32": "0",
                "user_compute_stream": "94330000",
                "has_user_compute_stream": "1",
                "arena_extend_strategy": "kSameAsRequested",
            },
        ),
        (CPU, {}),
    ]
    defaults = {
        CUDA: {
            "device_id": "0",
            "use_tf32": "1",
            "user_compute_stream": "0",
            "has_user_compute_stream": "0",
            "arena_extend_strategy": "kNextPowerOfTwo",
        },
        CPU: {},
    }
    lost, unconfirmed = options_not_in_effect(requested, defaults, [CUDA, CPU])
    assert unconfirmed == {}
    assert lost == {
        CUDA: {
            "use_tf32": ("0", "1"),
            "user_compute_stream": ("94330000", "0"),
            "has_user_compute_stream": ("1", "0"),
            "arena_extend_strategy": ("kSameAsRequested", "kNextPowerOfTwo"),
        }
    }
    assert "CUDAExecutionProvider: use_tf32=0 (in effect: 1)" in describe_lost(lost)
    # The options in effect, spelled as ONNX Runtime reports them: nothing lost.
    applied = {CUDA: dict(requested[0][1]), CPU: {}}
    assert options_not_in_effect(requested, applied, [CUDA, CPU]) == ({}, {})


def test_booleans_compare_as_onnx_runtime_reports_them() -> None:
    requested = [(TRT, {"trt_fp16_enable": "True", "trt_engine_cache_enable": "False"})]
    effective = {TRT: {"trt_fp16_enable": "1", "trt_engine_cache_enable": "0"}}
    assert options_not_in_effect(requested, effective, [TRT]) == ({}, {})
    # An EP the session does not use is the fell-back check's business, not this one's.
    assert options_not_in_effect(requested, {}, [CUDA]) == ({}, {})


def test_options_an_ep_does_not_report_are_unconfirmed_not_refused() -> None:
    """The TensorRT EP does not report its stream or timing-cache path; OpenVINO reports
    nothing. The CPU EP takes no options: any given to it were ignored."""
    requested = [
        (TRT, {"trt_fp16_enable": "True", "user_compute_stream": "94330000"}),
        ("OpenVINOExecutionProvider", {"device_type": "CPU"}),
        (CPU, {"arena_size": "64"}),
    ]
    effective = {TRT: {"trt_fp16_enable": "1"}, "OpenVINOExecutionProvider": {}, CPU: {}}
    used = [TRT, "OpenVINOExecutionProvider", CPU]
    lost, unconfirmed = options_not_in_effect(requested, effective, used)
    assert unconfirmed == {
        TRT: ["user_compute_stream"],
        "OpenVINOExecutionProvider": ["device_type"],
    }
    assert lost == {CPU: {"arena_size": ("64", None)}}


def test_the_fallback_is_recognised_by_what_onnx_runtime_prints() -> None:
    assert fell_back(["EP Error x\nFalling back to ['CPUExecutionProvider'] and retrying.\n"])
    assert not fell_back(["", "2026 [W:onnxruntime] some warning"])


def test_a_tensorrt_plan_whose_nodes_all_ran_on_cuda_is_refused() -> None:
    problem = assignment_problem(TRT, {CUDA: 12, CPU: 1})
    assert problem is not None
    assert problem.startswith(f"{TRT} took none of the model's 13 nodes")
    assert assignment_problem(TRT, {TRT: 10, CUDA: 2}) is None
    assert assignment_problem(TRT, None) is None  # not recorded: nothing to say


# ------------------------------------------------------------------ probe output


def test_probe_reasons_carry_no_terminal_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    class FallingBackSession:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            os.write(2, b"\x1b[1;31m2026 [E:onnxruntime] Failed to load libnvinfer.so.10\x1b[m\n")
            os.write(1, b"*** EP Error *** Falling back to ['CPUExecutionProvider']\n")

        def get_providers(self) -> list[str]:
            return [CPU]

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [TRT, CUDA, CPU])
    monkeypatch.setattr(onnxruntime, "InferenceSession", FallingBackSession)
    clear_probe_cache()
    try:
        check = probe.check_execution_provider(onnxruntime, TRT)
    finally:
        clear_probe_cache()
    assert not check.usable
    assert "Failed to load libnvinfer.so.10" in check.reason
    assert "\x1b" not in check.reason


# ------------------------------------------------------------------ hints and floor


def _fake_capi(tmp_path: Path, trt: int, cuda: int) -> Path:
    (tmp_path / "libonnxruntime_providers_tensorrt.so").write_bytes(
        b"\x7fELF...libnvinfer.so." + str(trt).encode() + b"\x00libnvonnxparser.so\x00"
    )
    (tmp_path / "libonnxruntime_providers_cuda.so").write_bytes(
        b"\x7fELF...libcudart.so." + str(cuda).encode() + b"\x00libcublas.so.13\x00"
    )
    return tmp_path


def test_the_tensorrt_ep_hint_names_the_major_it_links_and_the_index(tmp_path: Path) -> None:
    capi = _fake_capi(tmp_path, trt=10, cuda=13)
    assert probe.tensorrt_ep_needs(capi) == (10, 13)
    hint = probe.tensorrt_ep_hint(capi)
    assert hint.startswith(
        'pip install "tensorrt-cu13-libs==10.*" --extra-index-url https://pypi.nvidia.com'
    )
    assert "libnvinfer.so.10" in hint and "LD_LIBRARY_PATH" in hint
    assert "TensorRT 11" in hint  # why torch-tensorrt needs another environment


def test_without_the_libraries_the_hint_still_names_the_index(tmp_path: Path) -> None:
    assert probe.tensorrt_ep_needs(tmp_path) == (None, None)
    hint = probe.tensorrt_ep_hint(tmp_path)
    assert "pip install tensorrt" not in hint
    assert probe.NVIDIA_INDEX in hint


def test_the_tensorrt_plans_give_that_hint() -> None:
    plan = next(p for p in default_providers() if p.name == "onnxruntime_tensorrt_fp16")
    assert plan.execution_provider_hint() == probe.tensorrt_ep_hint()


def test_an_onnx_runtime_older_than_the_options_need_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = probe.distribution_version
    monkeypatch.setattr(
        probe,
        "distribution_version",
        lambda name: "1.17.3" if name == "onnxruntime" else real(name),
    )
    import dlopt.platform.probing

    monkeypatch.setattr(
        dlopt.platform.probing,
        "distribution_version",
        lambda name: "1.17.3" if name == "onnxruntime" else real(name),
    )
    availability = next(p for p in default_providers() if p.name == "onnxruntime_cpu").probe(
        ProviderContext(target=ExecutionTarget("cpu"), artifact_dir=tmp_path)
    )
    assert not availability.available
    assert "onnxruntime 1.17.3 is installed but >=1.18 is required" in availability.reason


@pytest.mark.slow
def test_what_onnx_runtime_prints_while_falling_back_is_quoted_not_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """ONNX Runtime's fallback prints to stdout and retries without the options."""
    import onnxruntime

    real = onnxruntime.InferenceSession

    def falling_back(path: Any, sess_options: Any = None, providers: Any = None) -> Any:
        print("*************** EP Error ***************")
        print(f"EP Error bad option when using {providers}")
        print("Falling back to ['CPUExecutionProvider'] and retrying.")
        return real(path, sess_options=sess_options, providers=["CPUExecutionProvider"])

    monkeypatch.setattr(onnxruntime, "InferenceSession", falling_back)
    context, model = _context(tmp_path)  # type: ignore[misc]
    provider = OnnxRuntimeProvider("ort_cpu_plain", CPU)
    with pytest.raises(ProviderBuildError) as info:
        provider.build(model, context)
    message = str(info.value)
    assert "retried with fallback providers, without the provider options" in message
    assert "Falling back to ['CPUExecutionProvider'] and retrying." in message
    printed = capfd.readouterr()
    assert "EP Error" not in printed.out and "EP Error" not in printed.err
