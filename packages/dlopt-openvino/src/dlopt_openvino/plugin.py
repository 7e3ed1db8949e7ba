"""dlopt plugin module for OpenVINO: registers one provider per plan.

Imports nothing heavy: openvino and nncf are imported inside probe, build and load.
"""

from __future__ import annotations

from dlopt.plugin import Precision, Register, hookimpl
from dlopt_openvino.provider import OpenVinoProvider

DLOPT_PLUGIN_API_VERSION = "2.1"


def default_providers() -> list[OpenVinoProvider]:
    """Every plan this plugin offers; each probe says whether it runs here."""
    return [
        OpenVinoProvider("openvino_cpu", "CPU", Precision.FP32),
        # Only where the CPU computes bf16 natively (AVX512-BF16, AMX); the probe says so.
        OpenVinoProvider("openvino_cpu_bf16", "CPU", Precision.BF16),
        # NNCF post-training quantization calibrated on the workload's inputs.
        OpenVinoProvider("openvino_cpu_int8", "CPU", Precision.INT8),
        # Where OpenVINO lists an Intel GPU / NPU: both compute in f16.
        OpenVinoProvider("openvino_gpu", "GPU", Precision.FP16),
        OpenVinoProvider("openvino_npu", "NPU", Precision.FP16),
    ]


@hookimpl
def dlopt_register_providers(register: Register) -> None:
    for provider in default_providers():
        register(provider)
