"""Plugin API 2.0 for the TensorRT plans, with the SDK faked (see conftest): builds compile
for the race's prepared inputs and trust its probe, options refine a plan, roles are
declared, and the source imports only ``dlopt.plugin``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

import dlopt_tensorrt
from dlopt import InferenceOptimizer, OptimizationPolicy, load_providers
from dlopt.plugin import (
    ConfigurationError,
    ExecutionTarget,
    Precision,
    PreparedCase,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Role,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt.testing.plugins import imports_beyond_plugin_api
from dlopt_tensorrt import TensorRTOptions, TensorRTProvider, all_providers
from dlopt_tensorrt import provider as provider_module


def _prepared(*batches: tuple[int, float]) -> tuple[PreparedCase, ...]:
    """Cases as the race hands them over: on the target device in a real race (CPU
    tensors here, standing in for them: no GPU needed with the SDK faked)."""
    return tuple(
        PreparedCase(f"b{n}", (torch.randn(n, 16),), {}, None, weight) for n, weight in batches
    )


def _context(tmp_path: Path, cases: tuple[PreparedCase, ...], **kwargs: Any) -> ProviderContext:
    # The user's workload differs from the prepared cases (other tensors, other shapes):
    # a build that reads it instead of the cases is caught.
    workload = WorkloadProfile((WorkloadCase("user", args=(torch.randn(64, 16),)),), name="user")
    return ProviderContext(
        target=ExecutionTarget("cuda"),
        workload=workload,
        artifact_dir=tmp_path,
        cases=cases,
        **kwargs,
    )


def test_compile_gets_the_prepared_inputs(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    cases = _prepared((1, 1.0), (8, 5.0), (32, 1.0))
    options = TensorRTOptions(save_engine=True)
    TensorRTProvider(Precision.FP16).build(net, _context(tmp_path, cases, options=options))
    (call,) = trt.compile_calls
    (spec,) = call["inputs"]
    assert spec.kwargs["min_shape"] == (1, 16)
    assert spec.kwargs["opt_shape"] == (8, 16)
    assert spec.kwargs["max_shape"] == (32, 16)
    # Traced with the prepared tensor at the maximum shape itself, on the device plans are
    # called with, not with a tensor made on the CPU.
    assert spec.kwargs["torch_tensor"] is cases[2].args[0]
    (save,) = trt.save_calls
    assert save["arg_inputs"][0] is cases[2].args[0]


def test_a_static_signature_is_traced_with_its_prepared_input(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    cases = _prepared((4, 1.0))
    TensorRTProvider(Precision.FP32).build(net, _context(tmp_path, cases))
    (spec,) = trt.compile_calls[0]["inputs"]
    assert spec.kwargs["shape"] == (4, 16)
    assert spec.kwargs["torch_tensor"] is cases[0].args[0]


def test_each_input_is_traced_with_its_largest_prepared_tensor_or_one_made_beside_them(
    fake_trt: Any, tmp_path: Path
) -> None:
    trt = fake_trt()
    cases = (
        PreparedCase("a", (torch.randn(2, 20), torch.randn(9, 3)), {}, None),
        PreparedCase("b", (torch.randn(5, 16), torch.randn(4, 3)), {}, None),
    )

    class Two(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x.sum() + y.sum()

    TensorRTProvider(Precision.FP32).build(Two(), _context(tmp_path, cases))
    x, y = trt.compile_calls[0]["inputs"]
    assert y.kwargs["torch_tensor"] is cases[0].args[1]  # (9, 3) is y's maximum
    # No case has x's maximum (5, 20): a tensor of that shape is made where the cases live.
    made = x.kwargs["torch_tensor"]
    assert made.shape == (5, 20) and made.device == cases[0].args[0].device
    assert made.dtype == torch.float32


def test_build_uses_the_race_probe_instead_of_probing_again(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    fake_trt()
    provider = TensorRTProvider(Precision.FP16)
    availability = provider.probe(ProviderContext(target=ExecutionTarget("cuda")))
    assert availability.available, availability.reason

    def probed(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("build probed the SDK again")

    monkeypatch.setattr(provider_module, "check_distribution", probed)
    monkeypatch.setattr(provider_module, "check_torch_pairing", probed)
    context = _context(tmp_path, _prepared((2, 1.0)), availability=availability)
    plan = provider.build(net, context)
    assert plan.metadata["compute_capability"] == "9.0"
    assert plan.metadata["torch_tensorrt_version"] == "2.13.0"


def test_build_refuses_with_the_race_probe_reason(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    fake_trt()
    refused = ProviderAvailability.unavailable("GPU compute capability 6.1 is too old")
    context = _context(tmp_path, _prepared((2, 1.0)), availability=refused)
    with pytest.raises(ProviderBuildError, match=r"tensorrt_fp16 cannot build here: GPU comp"):
        TensorRTProvider(Precision.FP16).build(net, context)


def test_options_reach_the_compile(net: torch.nn.Module, fake_trt: Any, tmp_path: Path) -> None:
    trt = fake_trt()
    options = TensorRTOptions(
        workspace_size_mb=512, optimization_level=5, min_block_size=3, opt_shape="largest"
    )
    cases = _prepared((1, 1.0), (8, 5.0), (32, 1.0))
    plan = TensorRTProvider(Precision.FP16).build(net, _context(tmp_path, cases, options=options))
    call = trt.compile_calls[0]
    assert call["workspace_size"] == 512 * 2**20
    assert call["optimization_level"] == 5
    assert call["min_block_size"] == 3
    assert call["inputs"][0].kwargs["opt_shape"] == (32, 16)
    assert plan.metadata["opt_case"] == "b32"
    assert trt.save_calls == []  # save_engine is off by default


def test_an_option_this_torch_tensorrt_lacks_is_a_clear_build_error(
    net: torch.nn.Module, fake_trt: Any, tmp_path: Path
) -> None:
    fake_trt(api="minimal")  # a release without optimization_level
    options = TensorRTOptions(optimization_level=2)
    with pytest.raises(ProviderBuildError, match=r"has no optimization_level.*unset"):
        TensorRTProvider(Precision.FP16).build(
            net, _context(tmp_path, _prepared((2, 1.0)), options=options)
        )


def test_every_option_has_a_default_and_help() -> None:
    for attribute in attrs.fields(TensorRTOptions):
        assert attribute.default is not attrs.NOTHING, attribute.name
        assert attribute.metadata.get("help"), attribute.name
    assert all(p.options_type is TensorRTOptions for p in all_providers())


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"workspace_mb": 512}, r"plan 'tensorrt_fp16' has no option 'workspace_mb'"),
        ({"optimization_level": 7}, r"plan 'tensorrt_fp16'.*optimization_level must be 0 to 5"),
        ({"opt_shape": "median"}, r"plan 'tensorrt_fp16'.*opt_shape must be one of"),
    ],
)
def test_a_bad_option_is_refused_before_the_race_naming_the_plan(
    net: torch.nn.Module, values: dict[str, Any], message: str
) -> None:
    optimizer = InferenceOptimizer(
        "cpu",
        OptimizationPolicy(include=["tensorrt_fp16"], plan_options={"tensorrt_fp16": values}),
        providers=all_providers(),
        registry=load_providers(entry_points=[]),
    )
    with pytest.raises(ConfigurationError, match=message):
        optimizer.select(net, [WorkloadCase("b2", args=(torch.randn(2, 16),))])


def test_every_plan_declares_the_challenger_role() -> None:
    for provider in all_providers():
        assert Role.of(provider) is Role.CHALLENGER
    assert TensorRTProvider.role is Role.CHALLENGER


def test_the_source_imports_from_dlopt_plugin_only() -> None:
    assert imports_beyond_plugin_api(dlopt_tensorrt) == []
