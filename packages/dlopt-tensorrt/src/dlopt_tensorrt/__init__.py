"""Torch-TensorRT plans for dlopt (``tensorrt_fp32``, ``tensorrt_tf32``, ``tensorrt_fp16``,
``tensorrt_bf16``).

torch_tensorrt itself is imported only when a plan is probed or built.
"""

from __future__ import annotations

from dlopt_tensorrt.compat import check_torch_pairing
from dlopt_tensorrt.inputs import InputSpec, WorkloadInputs, derive_inputs
from dlopt_tensorrt.provider import (
    TensorRTOptions,
    TensorRTProvider,
    all_providers,
    load_engine,
    precision_kwargs,
)
from dlopt_tensorrt.requirement import install_command, torch_tensorrt_pin

__all__ = [
    "InputSpec",
    "TensorRTOptions",
    "TensorRTProvider",
    "WorkloadInputs",
    "all_providers",
    "check_torch_pairing",
    "derive_inputs",
    "install_command",
    "load_engine",
    "precision_kwargs",
    "torch_tensorrt_pin",
]
