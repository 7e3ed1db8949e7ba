"""Every Torch-TensorRT probe state, simulated; each has its own reason and fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from dlopt.plugin import ExecutionTarget, Precision, ProviderContext
from dlopt_tensorrt import TensorRTProvider, all_providers
from dlopt_tensorrt import provider as provider_module


def _probe(precision: Precision = Precision.FP16, device: str = "cuda") -> Any:
    return TensorRTProvider(precision).probe(ProviderContext(target=ExecutionTarget(device)))


def _hide_sdk(monkeypatch: Any) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in ("torch_tensorrt", "tensorrt")]:
        monkeypatch.delitem(sys.modules, name)


def test_one_plan_per_precision() -> None:
    assert {p.name: p.precision for p in all_providers()} == {
        "tensorrt_fp32": Precision.FP32,
        "tensorrt_tf32": Precision.TF32,
        "tensorrt_fp16": Precision.FP16,
        "tensorrt_bf16": Precision.BF16,
    }
    with pytest.raises(ValueError, match="fp32, tf32, fp16 and bf16"):
        TensorRTProvider(Precision.INT8)


def test_not_installed(sim: Any, monkeypatch: Any) -> None:
    sim.metadata(version=None)
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    availability = _probe()
    assert not availability.available
    assert availability.reason == (
        "torch-tensorrt is not installed (dlopt-tensorrt leaves it to you: install the "
        "release that matches torch)"
    )
    minor = ".".join(torch.__version__.split(".")[:2])
    # Pinned to this torch's minor, never an extra or an open range (either moves torch).
    assert availability.install_hint == (
        f'pip install "torch-tensorrt=={minor}.*" '
        "--extra-index-url https://download.pytorch.org/whl/cu126 "
        "--extra-index-url https://pypi.nvidia.com"
    )


def test_wrong_version_for_this_torch(sim: Any) -> None:
    sim.metadata(version="2.10.0", requires=["torch<2.11.0,>=2.10.0", "tensorrt-cu12>=10.13"])
    availability = _probe()
    assert not availability.available
    assert "torch-tensorrt 2.10.0 requires torch<2.11.0,>=2.10.0 (from its metadata)" in (
        availability.reason
    )
    assert f"but torch {torch.__version__} is installed" in availability.reason
    assert "torch-tensorrt==" in availability.install_hint
    assert availability.sdk_versions["torch-tensorrt"] == "2.10.0"


def test_import_blocked(sim: Any, monkeypatch: Any) -> None:
    sim.metadata()
    _hide_sdk(monkeypatch)
    monkeypatch.setitem(sys.modules, "torch_tensorrt", None)
    availability = _probe()
    assert not availability.available
    assert availability.reason.startswith("torch-tensorrt 2.13.0 is installed but does not import")
    assert availability.install_hint


def test_missing_tensorrt_libraries_report_the_loader_error(
    sim: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    sim.metadata()
    _hide_sdk(monkeypatch)
    package = tmp_path / "torch_tensorrt"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise OSError('libnvinfer.so.10: cannot open shared object file: No such file or directory')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    availability = _probe()
    assert not availability.available
    assert availability.reason == (
        "TensorRT libraries are missing: importing torch_tensorrt 2.13.0 failed with "
        "OSError: libnvinfer.so.10: cannot open shared object file: No such file or directory"
    )
    assert 'pip install --force-reinstall "torch-tensorrt==2.13.0"' in availability.install_hint
    assert "LD_LIBRARY_PATH" in availability.install_hint


def test_no_dynamo_frontend(fake_trt: Any) -> None:
    fake_trt(dynamo=False)
    availability = _probe()
    assert not availability.available
    assert "no Dynamo frontend" in availability.reason


def test_cpu_target(fake_trt: Any) -> None:
    fake_trt()
    availability = _probe(device="cpu")
    assert not availability.available
    assert "the target is cpu" in availability.reason


def test_no_cuda_device(fake_trt: Any, monkeypatch: Any) -> None:
    fake_trt(capability=None)
    monkeypatch.setattr(torch.version, "cuda", None)
    availability = _probe()
    assert not availability.available
    assert (
        availability.reason
        == f"torch {torch.__version__} sees no CUDA device (it is a CPU-only build)"
    )
    assert "download.pytorch.org/whl/cu" in availability.install_hint


def test_gpu_older_than_tensorrt_supports(fake_trt: Any) -> None:
    fake_trt(tensorrt_version="10.14.1", capability=(6, 1))
    availability = _probe(Precision.FP32)
    assert not availability.available
    assert availability.reason == (
        "GPU compute capability 6.1 is below what TensorRT 10.14.1 supports (7.5+)"
    )
    assert availability.details["compute_capability"] == "6.1"


@pytest.mark.parametrize(
    ("precision", "capability", "available"),
    [
        (Precision.FP16, (7, 5), True),
        (Precision.FP32, (7, 5), True),
        (Precision.BF16, (7, 5), False),
        (Precision.TF32, (7, 5), False),
        (Precision.BF16, (8, 0), True),
        (Precision.TF32, (9, 0), True),
    ],
)
def test_precision_needs_a_gpu_generation(
    fake_trt: Any, precision: Precision, capability: tuple[int, int], available: bool
) -> None:
    fake_trt(capability=capability)
    availability = _probe(precision)
    assert availability.available is available, availability.reason
    if not available:
        assert "needs compute capability 8.0+" in availability.reason
    else:
        assert availability.sdk_versions["tensorrt"] == "10.14.1"
        assert availability.details["torch_requirement"] == "torch<2.14.0,>=2.13.0 (metadata)"


def test_missing_device_index(fake_trt: Any) -> None:
    fake_trt()
    availability = _probe(device="cuda:2")
    assert not availability.available
    assert "cuda:2 does not exist" in availability.reason


def test_probe_never_raises(monkeypatch: Any) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("metadata store is corrupt")

    monkeypatch.setattr(provider_module, "check_distribution", boom)
    availability = _probe()
    assert not availability.available
    assert "metadata store is corrupt" in availability.reason
