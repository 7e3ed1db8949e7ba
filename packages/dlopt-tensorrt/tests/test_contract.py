"""dlopt's provider contract suite over the Torch-TensorRT plans.

Without torch-tensorrt and a GPU (CI) the build checks skip with the probe's reason; the
discovery, import-hygiene, probe and missing-SDK checks run everywhere.
"""

from __future__ import annotations

from typing import ClassVar

from dlopt.plugin import ExecutionTarget, Precision
from dlopt.testing import ProviderContractSuite
from dlopt_tensorrt import TensorRTProvider


class _TensorRTSuite(ProviderContractSuite):
    distribution = "dlopt-tensorrt"
    entry_point = "tensorrt"
    heavy_modules = ("torch_tensorrt", "tensorrt")
    target = ExecutionTarget("cuda")
    # Importing torch_tensorrt (TensorRT, torch._dynamo) takes seconds the first time.
    max_probe_seconds: ClassVar[float] = 60.0
    # torch_tensorrt.compile captures a graph of the model.
    captures_graph = True
    precision: ClassVar[Precision]

    def make_provider(self) -> TensorRTProvider:
        return TensorRTProvider(self.precision)


class TestTensorRTFp32Contract(_TensorRTSuite):
    precision = Precision.FP32


class TestTensorRTFp16Contract(_TensorRTSuite):
    precision = Precision.FP16
