"""dlopt's provider contract suite over the Torch-TensorRT plans.

Without torch-tensorrt and a GPU (CI) the build checks skip with the probe's reason; the
discovery, import-hygiene, probe and missing-SDK checks run everywhere.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from dlopt.precision import Precision
from dlopt.target import ExecutionTarget
from dlopt.testing import ProviderContractSuite
from dlopt.workload import WorkloadCase, WorkloadProfile
from dlopt_tensorrt import TensorRTProvider


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


class _TensorRTSuite(ProviderContractSuite):
    distribution = "dlopt-tensorrt"
    entry_point = "tensorrt"
    heavy_modules = ("torch_tensorrt", "tensorrt")
    target = ExecutionTarget("cuda")
    # Importing torch_tensorrt (TensorRT, torch._dynamo) takes seconds the first time.
    max_probe_seconds: ClassVar[float] = 60.0
    precision: ClassVar[Precision]

    def make_provider(self) -> TensorRTProvider:
        return TensorRTProvider(self.precision)

    # Engines run on the GPU: the model and the cases live there too (the suite's
    # defaults are CPU tensors). Off a GPU the build checks skip before these matter.
    def make_model(self) -> torch.nn.Module:
        return super().make_model().to(_device())

    def make_workload(self) -> WorkloadProfile:
        base = super().make_workload()
        return WorkloadProfile(
            tuple(
                WorkloadCase(c.name, args=tuple(a.to(_device()) for a in c.args), weight=c.weight)
                for c in base.cases
            ),
            name=base.name,
        )


class TestTensorRTFp32Contract(_TensorRTSuite):
    precision = Precision.FP32


class TestTensorRTFp16Contract(_TensorRTSuite):
    precision = Precision.FP16
