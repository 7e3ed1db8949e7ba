"""The provider distributions dlopt's own project publishes, as dlopt-core knows them.

``dlopt providers`` names each one that is not installed, with the command that installs
it. The list lives here, in dlopt-core itself, so that a dlopt-core installed from a wheel
alone (no repository, no other distribution) still knows what it is missing. Nothing here
imports a provider or an SDK: whether a distribution is installed is read from its
metadata only.
"""

from __future__ import annotations

import re

from attrs import frozen

from dlopt.platform.probing import distribution_version


@frozen
class FirstPartyDistribution:
    """One provider distribution of dlopt's project: its name, the module it installs,
    the plans it adds (in words) and how to install it."""

    name: str
    module: str
    adds: str
    install: str
    install_gpu: str | None = None

    def install_command(self, device_type: str = "cpu") -> str:
        """The pip command for a target of ``device_type`` (``"cpu"``, ``"cuda"``...)."""
        command = self.install_gpu if device_type == "cuda" and self.install_gpu else self.install
        return command.replace("{torch_minor}", _torch_minor())


#: Every provider distribution of the project, in the order the README lists them.
FIRST_PARTY: tuple[FirstPartyDistribution, ...] = (
    FirstPartyDistribution(
        "dlopt-fx",
        "dlopt_fx",
        "FX rewrites (Conv-BN folding) and TorchInductor compiles: fx, fx_inductor, inductor*",
        "pip install dlopt-fx",
    ),
    FirstPartyDistribution(
        "dlopt-onnxruntime",
        "dlopt_onnxruntime",
        "ONNX Runtime sessions on any EP, fp32, int8 and fp16: onnxruntime_*",
        'pip install "dlopt-onnxruntime[cpu]"',
        'pip install "dlopt-onnxruntime[gpu]"',
    ),
    FirstPartyDistribution(
        "dlopt-torchao",
        "dlopt_torchao",
        "TorchAO quantization, int8, int4 and fp8, eager and compiled: torchao_*",
        'pip install "dlopt-torchao[inductor]"',
    ),
    FirstPartyDistribution(
        "dlopt-openvino",
        "dlopt_openvino",
        "OpenVINO on CPU, Intel GPU and NPU, with NNCF int8: openvino_*",
        "pip install dlopt-openvino",
    ),
    FirstPartyDistribution(
        "dlopt-tensorrt",
        "dlopt_tensorrt",
        "Torch-TensorRT engines on NVIDIA GPUs: tensorrt_*",
        'pip install dlopt-tensorrt "torch-tensorrt=={torch_minor}.*"',
    ),
)


def _torch_minor() -> str:
    """``major.minor`` of the installed torch (torch-tensorrt 2.N pairs with torch 2.N)."""
    version = distribution_version("torch") or ""
    match = re.match(r"(\d+)\.(\d+)", version)
    return f"{match.group(1)}.{match.group(2)}" if match else "<torch major.minor>"


def is_first_party(distribution: str | None) -> bool:
    """Whether ``distribution`` is dlopt-core or one of :data:`FIRST_PARTY` (the
    benchmark suite measures their plans: the shipped priors speak for them)."""
    return distribution == "dlopt-core" or any(d.name == distribution for d in FIRST_PARTY)


def missing_first_party() -> tuple[FirstPartyDistribution, ...]:
    """The first-party provider distributions not installed here (read from metadata)."""
    return tuple(d for d in FIRST_PARTY if distribution_version(d.name) is None)
