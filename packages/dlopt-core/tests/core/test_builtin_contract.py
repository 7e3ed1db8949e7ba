"""Core's own plans pass the same contract suite as every plugin."""

from __future__ import annotations

import torch

from dlopt.plugins.builtin import EagerFp32Provider, NativeProvider
from dlopt.testing import ProviderContractSuite


class TestEagerFp32Contract(ProviderContractSuite):
    distribution = "dlopt-core"
    # The model itself: whatever eager PyTorch serves.
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True

    def make_provider(self):
        return EagerFp32Provider()


class TestNativeChannelsLastContract(ProviderContractSuite):
    """Channels-last needs image inputs: the keyword and nested checks' MLPs have none."""

    distribution = "dlopt-core"
    supports_dynamic_shapes = True

    def make_provider(self):
        return NativeProvider("native_channels_last", channels_last=True, autocast_dtype=None)


class TestNativeBf16ChannelsLastContract(ProviderContractSuite):
    """Skips its build checks with the probe's reason on CPUs without native bf16."""

    distribution = "dlopt-core"
    supports_dynamic_shapes = True

    def make_provider(self):
        return NativeProvider(
            "native_bf16_channels_last", channels_last=True, autocast_dtype=torch.bfloat16
        )


def test_channels_last_plan_converts_inputs_and_keeps_the_callers_model(tmp_path):
    from dlopt.contract.provider import ProviderContext
    from dlopt.settings.workload import WorkloadProfile

    model = torch.nn.Conv2d(3, 4, 3).eval()
    x = torch.randn(2, 3, 8, 8)
    provider = NativeProvider("native_channels_last", channels_last=True, autocast_dtype=None)
    plan = provider.build(
        model, ProviderContext(workload=WorkloadProfile.single(x), artifact_dir=tmp_path)
    )
    out = plan(x)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert model.weight.is_contiguous()  # the caller's module keeps its layout
    torch.testing.assert_close(out, model(x))
