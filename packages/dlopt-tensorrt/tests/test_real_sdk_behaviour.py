"""Install hints that work with the real SDKs (NVIDIA's index, the TensorRT major
torch-tensorrt's metadata requires) and where the TensorRT version is found since
Torch-TensorRT 2.6. The build-side behaviour of 2.13 is in test_build_mocked.py."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from dlopt.plugin import ExecutionTarget, Precision, ProviderContext
from dlopt_tensorrt import TensorRTProvider
from dlopt_tensorrt.compat import tensorrt_requirement
from dlopt_tensorrt.requirement import NVIDIA_INDEX, install_command

# 6. install hints that name the index and the TensorRT major --------------------------


def test_the_install_command_names_nvidias_index() -> None:
    command = install_command("2.13.0+cu130", "13.0")
    assert command.startswith('pip install "torch-tensorrt==2.13.*" ')
    assert "--extra-index-url https://download.pytorch.org/whl/cu130" in command
    assert f"--extra-index-url {NVIDIA_INDEX}" in command


def test_missing_libraries_hint_names_the_index_and_the_major(
    sim: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sim.metadata()
    for name in [m for m in sys.modules if m.split(".")[0] in ("torch_tensorrt", "tensorrt")]:
        monkeypatch.delitem(sys.modules, name)
    package = tmp_path / "torch_tensorrt"
    package.mkdir()
    (package / "__init__.py").write_text("raise OSError('libnvinfer.so.11: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    availability = TensorRTProvider(Precision.FP16).probe(
        ProviderContext(target=ExecutionTarget("cuda"))
    )
    assert not availability.available
    hint = availability.install_hint
    assert f"--extra-index-url {NVIDIA_INDEX}" in hint
    assert "TensorRT 11" in hint and "tensorrt-cu13-libs" in hint
    assert "stub" in hint


@pytest.mark.parametrize(
    ("requires", "expected"),
    [
        (["torch<2.14,>=2.13", "tensorrt-cu13-libs<11.1.0,>=11.0.0"], ("tensorrt-cu13-libs", 11)),
        (
            ["tensorrt-cu12<10.14,>=10.13.0", "tensorrt-cu12-libs<10.14,>=10.13"],
            ("tensorrt-cu12", 10),
        ),
        (["tensorrt>=10.3.0,<10.4"], ("tensorrt", 10)),
        (["torch>=2.13", "packaging"], None),
        (None, None),
    ],
)
def test_tensorrt_requirement_is_read_from_metadata(requires: Any, expected: Any) -> None:
    assert tensorrt_requirement(requires) == expected


# 8. the TensorRT version without __tensorrt_version__ ---------------------------------


def test_tensorrt_version_without_the_old_attribute(
    fake_trt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_trt(tensorrt_version=None)  # not exported since Torch-TensorRT 2.6
    monkeypatch.setitem(sys.modules, "tensorrt", types.SimpleNamespace(__version__="11.0.0.7"))
    availability = TensorRTProvider(Precision.FP16).probe(
        ProviderContext(target=ExecutionTarget("cuda"))
    )
    assert availability.available, availability.reason
    assert availability.sdk_versions["tensorrt"] == "11.0.0.7"


def test_tensorrt_version_from_metadata_when_no_module_says(
    fake_trt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlopt_tensorrt import provider as provider_module

    fake_trt(tensorrt_version=None)
    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
    monkeypatch.setattr(
        provider_module,
        "distribution_version",
        lambda name: "11.0.0.7" if name == "tensorrt-cu13-libs" else None,
    )
    availability = TensorRTProvider(Precision.FP16).probe(
        ProviderContext(target=ExecutionTarget("cuda"))
    )
    assert availability.available, availability.reason
    assert availability.sdk_versions["tensorrt"] == "11.0.0.7"
