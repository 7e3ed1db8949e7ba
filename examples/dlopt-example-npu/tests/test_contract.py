"""dlopt's provider contract suite over both example plans.

The example declares every capability the suite knows: tinynpu specializes a new input
shape on its first call (dynamic shapes), traces keyword inputs and nested outputs, and
its programs reload from their file (save/load). The deferred-launch classes run the same
suite with outputs that hold NaN until ``synchronize()``: the suite must wait for a
plan's queued work before it judges the outputs, as the race does.
"""

from __future__ import annotations

import pytest
import tinynpu
from dlopt_example_npu.provider import ExampleNpuFastProvider, ExampleNpuProvider

from dlopt.testing import ProviderContractSuite


class TestExampleNpuFp32Contract(ProviderContractSuite):
    distribution = "dlopt-example-npu"
    entry_point = "examplenpu"
    # Loading the plugin must not import the SDK; hiding it must make the plan unavailable.
    heavy_modules = ("tinynpu",)
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True
    supports_save_load = True
    # tinynpu compiles a torch.jit.trace of the model.
    captures_graph = True
    # The SDK ships with the example, so the plans must be available wherever it is
    # installed: "unavailable" fails instead of skipping (DLOPT_CONTRACT_REQUIRE_AVAILABLE=1
    # does the same from the environment, for a vendor's CI).
    require_available = True

    def make_provider(self) -> ExampleNpuProvider:
        return ExampleNpuProvider()


class TestExampleNpuFastContract(TestExampleNpuFp32Contract):
    def make_provider(self) -> ExampleNpuProvider:
        return ExampleNpuFastProvider()


class TestExampleNpuFp32DeferredContract(TestExampleNpuFp32Contract):
    """Queued calls run only in ``synchronize()``: reading outputs earlier sees NaN."""

    @pytest.fixture(autouse=True)
    def _deferred_launch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(tinynpu.LAUNCH_ENV, "deferred")


class TestExampleNpuFastDeferredContract(TestExampleNpuFp32DeferredContract):
    def make_provider(self) -> ExampleNpuProvider:
        return ExampleNpuFastProvider()
