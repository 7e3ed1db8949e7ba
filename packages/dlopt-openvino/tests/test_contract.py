"""dlopt's provider contract suite over the OpenVINO CPU plans.

The GPU and NPU plans are checked through their probes (tests/test_probe.py): on a
machine without those devices the suite's build checks would only skip.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from dlopt.plugin import Precision
from dlopt.testing import ProviderContractSuite
from dlopt_openvino import OpenVinoProvider, clear_probe_cache


class TestOpenVinoCpuContract(ProviderContractSuite):
    distribution = "dlopt-openvino"
    entry_point = "openvino"
    heavy_modules = ("openvino", "nncf")
    # The first probe imports openvino (a fraction of a second idle; more while other
    # work shares this machine's two cores).
    max_probe_seconds: ClassVar[float] = 20.0
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True
    supports_save_load = True
    # The conversion traces the model (TorchScript).
    captures_graph = True

    def make_provider(self) -> OpenVinoProvider:
        return OpenVinoProvider("openvino_cpu", "CPU", Precision.FP32)

    def _forget_probe_caches(self) -> None:
        clear_probe_cache()


class _SamePlugin(TestOpenVinoCpuContract):
    def test_loading_the_plugin_imports_no_heavy_sdk(self) -> None:
        pytest.skip("one plugin module registers every plan: TestOpenVinoCpuContract loads it")


class TestOpenVinoBf16Contract(_SamePlugin):
    """Skips its build checks, with the probe's reason, on a CPU without native bf16."""

    def make_provider(self) -> OpenVinoProvider:
        return OpenVinoProvider("openvino_cpu_bf16", "CPU", Precision.BF16)


class TestOpenVinoInt8Contract(_SamePlugin):
    def make_provider(self) -> OpenVinoProvider:
        return OpenVinoProvider("openvino_cpu_int8", "CPU", Precision.INT8)
