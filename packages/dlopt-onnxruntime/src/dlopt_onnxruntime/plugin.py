"""dlopt plugin module for ONNX Runtime: registers one provider per plan.

Imports nothing heavy: onnxruntime, onnx and onnxscript are imported inside probe/build.
"""

from __future__ import annotations

from dlopt.plugin import Precision, Register, hookimpl
from dlopt_onnxruntime.provider import OnnxRuntimeProvider

DLOPT_PLUGIN_API_VERSION = "2.1"


def default_providers() -> list[OnnxRuntimeProvider]:
    """Every plan this plugin offers; each probe says whether it runs on the target."""
    cpu = "CPUExecutionProvider"
    cuda = "CUDAExecutionProvider"
    trt = "TensorrtExecutionProvider"
    return [
        OnnxRuntimeProvider("onnxruntime_cpu", cpu, Precision.FP32),
        # Dynamic int8 for MatMul/Gemm; the static plan adds calibrated QDQ convolutions.
        OnnxRuntimeProvider("onnxruntime_cpu_int8", cpu, Precision.INT8),
        OnnxRuntimeProvider("onnxruntime_cpu_int8_static", cpu, Precision.INT8, static_int8=True),
        OnnxRuntimeProvider("onnxruntime_cuda", cuda, Precision.FP32),
        OnnxRuntimeProvider("onnxruntime_cuda_fp16", cuda, Precision.FP16),
        # TensorRT builds fp32 engines with TF32 tactics on Ampere and newer.
        OnnxRuntimeProvider("onnxruntime_tensorrt", trt, Precision.TF32),
        OnnxRuntimeProvider("onnxruntime_tensorrt_fp16", trt, Precision.FP16),
        OnnxRuntimeProvider("onnxruntime_openvino", "OpenVINOExecutionProvider", Precision.FP32),
    ]


@hookimpl
def dlopt_register_providers(register: Register) -> None:
    for provider in default_providers():
        register(provider)
