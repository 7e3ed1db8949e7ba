"""dlopt's provider contract suite over the torchao plans."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
import torch

from dlopt.plugin import ProviderContext, WorkloadCase, WorkloadProfile
from dlopt.testing import ProviderContractSuite
from dlopt_torchao import Scheme, TorchAOProvider


class _TorchAOSuite(ProviderContractSuite):
    distribution = "dlopt-torchao"
    entry_point = "torchao"
    heavy_modules = ("torchao",)
    # The first probe in a process imports torchao, which imports torch._dynamo: about
    # 3 s on an idle 2-core machine, more while other work shares it. Later probes are ms.
    max_probe_seconds: ClassVar[float] = 30.0
    scheme: ClassVar[Scheme]
    compiled: ClassVar[bool] = False

    def make_provider(self) -> TorchAOProvider:
        return TorchAOProvider(self.scheme, self.compiled)

    def make_options(self, provider: Any) -> Any:
        # Plans dlopt leaves out of a race by default (eager torchao on CPU, int4 on CPU)
        # are still checked: the option that offers them everywhere is set.
        return provider.options_type(offer_everywhere=True)

    def probe_context(self, tmp_path: Path) -> ProviderContext:
        context = super().probe_context(tmp_path)
        return attrs.evolve(context, options=self.make_options(self.make_provider()))


class TestInt8DynamicContract(_TorchAOSuite):
    """The suite's default conv + Linear model: the Linear head is quantized."""

    scheme = Scheme.INT8_DYNAMIC
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True


class TestInt4WeightOnlyContract(_TorchAOSuite):
    # The suite's keyword and nested models have 16 input features, which no int4 group
    # size divides: the plan would refuse them, so only dynamic shapes are declared.
    scheme = Scheme.INT4_WEIGHT_ONLY
    supports_dynamic_shapes = True

    def make_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)
        ).eval()

    def make_workload(self) -> WorkloadProfile:
        gen = torch.Generator().manual_seed(1)
        return WorkloadProfile(
            cases=(
                WorkloadCase("batch-1", args=(torch.randn(1, 64, generator=gen),), weight=3),
                WorkloadCase("batch-8", args=(torch.randn(8, 64, generator=gen),), weight=1),
            ),
            name="mlp",
        )


class TestFp8Contract(_TorchAOSuite):
    """On a CPU machine the build checks skip with the probe's reason."""

    scheme = Scheme.FP8


@pytest.mark.slow
class TestInt8DynamicInductorContract(_TorchAOSuite):
    """The CPU fast path where the CPU has VNNI or AMX: int8 dynamic quantization compiled
    (each build compiles). Checked on any CPU: ``offer_everywhere`` is set."""

    scheme = Scheme.INT8_DYNAMIC
    compiled = True
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True
