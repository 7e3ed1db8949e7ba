"""The torch-tensorrt pin follows the installed torch's minor version (no open range)."""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from dlopt_tensorrt.requirement import UNKNOWN_PIN, install_command, torch_tensorrt_pin


@pytest.mark.parametrize(
    ("torch_version", "pin"),
    [
        ("2.13.0", "torch-tensorrt==2.13.*"),
        ("2.13.0+cu126", "torch-tensorrt==2.13.*"),
        ("2.14.1+cpu", "torch-tensorrt==2.14.*"),
        ("2.15.0.dev20260101+cu128", "torch-tensorrt==2.15.*"),
        ("2.9.0a0+gitabc123", "torch-tensorrt==2.9.*"),
    ],
)
def test_the_pin_is_torch_major_minor(torch_version: str, pin: str) -> None:
    assert torch_tensorrt_pin(torch_version) == pin


@pytest.mark.parametrize("torch_version", ["2.13.0", "2.13.5+cu126", "2.13.0rc1"])
def test_the_pin_admits_every_patch_of_that_minor_and_nothing_newer(torch_version: str) -> None:
    requirement = Requirement(torch_tensorrt_pin(torch_version) or "")
    assert requirement.specifier.contains("2.13.0")
    assert requirement.specifier.contains("2.13.7")
    assert not requirement.specifier.contains("2.14.0")
    assert not requirement.specifier.contains("2.12.1")


@pytest.mark.parametrize("torch_version", ["", "unknown", "2"])
def test_an_unreadable_torch_version_has_no_pin(torch_version: str) -> None:
    assert torch_tensorrt_pin(torch_version) is None


def test_the_install_command_pins_torch_tensorrt_and_names_the_cuda_index() -> None:
    assert install_command("2.13.0+cu126", "12.6") == (
        'pip install "torch-tensorrt==2.13.*" '
        "--extra-index-url https://download.pytorch.org/whl/cu126 "
        "--extra-index-url https://pypi.nvidia.com"
    )
    # No extra of dlopt-tensorrt and never an open range: both would move torch.
    assert "[sdk]" not in install_command("2.13.0+cu126", "12.6")


def test_the_install_command_on_cpu_torch_says_to_install_a_cuda_torch_first() -> None:
    command = install_command("2.13.0+cpu", None)
    assert command.startswith("torch 2.13.0+cpu is a CPU-only build")
    assert '"torch-tensorrt==2.13.*"' in command and "whl/cuXXX" in command


def test_an_unreadable_torch_version_gets_a_placeholder_pin_not_an_open_range() -> None:
    command = install_command("unknown", "12.6")
    assert f'"{UNKNOWN_PIN}"' in command
