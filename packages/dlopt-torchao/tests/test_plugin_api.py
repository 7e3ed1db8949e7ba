"""Plugin API 2.0 for the torchao plans: builds trust the race's probe, options refine a
scheme, roles are declared, and the source imports only ``dlopt.plugin``.

Quantizing needs no inputs: a torchao plan quantizes weights, so the prepared cases are
not read at build (the race validates the plan on them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

import dlopt_torchao
from dlopt import InferenceOptimizer, OptimizationPolicy, load_providers
from dlopt.plugin import (
    ConfigurationError,
    ExecutionTarget,
    PreparedCase,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Role,
    WorkloadCase,
)
from dlopt.testing.plugins import imports_beyond_plugin_api
from dlopt_torchao import Scheme, TorchAOProvider
from dlopt_torchao import plans as plans_module
from dlopt_torchao import provider as provider_module
from dlopt_torchao.provider import TorchAOInt4Options, TorchAOOptions


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)
    ).eval()


def _context(tmp_path: Path, **kwargs: Any) -> ProviderContext:
    x = torch.randn(2, 128)
    return ProviderContext(
        target=ExecutionTarget("cpu"),
        artifact_dir=tmp_path,
        cases=(PreparedCase("b2", (x,), {}, None),),
        **kwargs,
    )


def _no_second_probe(monkeypatch: Any) -> None:
    def probed(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("build probed the SDK again")

    monkeypatch.setattr(provider_module, "check_distribution", probed)
    monkeypatch.setattr(provider_module, "check_torch_pairing", probed)


def test_build_uses_the_race_probe_instead_of_probing_again(
    tmp_path: Path, monkeypatch: Any
) -> None:
    provider = TorchAOProvider(Scheme.INT8_DYNAMIC)
    # Eager torchao is not offered on CPU by default; the option asks for it.
    options = TorchAOOptions(offer_everywhere=True)
    availability = provider.probe(_context(tmp_path, options=options))
    assert availability.available, availability.reason
    _no_second_probe(monkeypatch)
    plan = provider.build(_mlp(), _context(tmp_path, availability=availability, options=options))
    try:
        assert plan.metadata["quantized_layers"] == 2
        assert plan.metadata["torch_pairing"] == availability.details["torch_pairing"]
    finally:
        plan.close()


def test_build_refuses_with_the_race_probe_reason(tmp_path: Path, monkeypatch: Any) -> None:
    _no_second_probe(monkeypatch)
    refused = ProviderAvailability.unavailable("torchao 0.9 is too old")
    with pytest.raises(
        ProviderBuildError, match=r"torchao_int8_dynamic cannot build here: torchao 0\.9 is too old"
    ):
        TorchAOProvider(Scheme.INT8_DYNAMIC).build(_mlp(), _context(tmp_path, availability=refused))


def test_int4_group_size_option(tmp_path: Path) -> None:
    options = TorchAOInt4Options(group_size=32)
    plan = TorchAOProvider(Scheme.INT4_WEIGHT_ONLY).build(
        _mlp(), _context(tmp_path, options=options)
    )
    try:
        # Without the option the largest group size covering both layers (64) is chosen.
        assert plan.metadata["group_size"] == 32
        assert plan.metadata["quantized_layers"] == 2
    finally:
        plan.close()


def test_exclude_layers_keeps_them_in_full_precision(tmp_path: Path) -> None:
    options = TorchAOOptions(exclude_layers=("2",))
    plan = TorchAOProvider(Scheme.INT8_WEIGHT_ONLY).build(
        _mlp(), _context(tmp_path, options=options)
    )
    try:
        assert plan.metadata["quantized_layer_names"] == ["0"]
        assert plan.metadata["skipped_linear_layers"] == {
            "2": "excluded by the exclude_layers option"
        }
    finally:
        plan.close()


def test_exclude_layers_naming_no_linear_layer_is_a_build_error(tmp_path: Path) -> None:
    options = TorchAOOptions(exclude_layers=("head",))
    with pytest.raises(
        ProviderBuildError, match=r"exclude_layers names 'head'.*Linear layers: '0', '2'"
    ):
        TorchAOProvider(Scheme.INT8_DYNAMIC).build(_mlp(), _context(tmp_path, options=options))


def test_options_per_scheme_have_defaults_and_help() -> None:
    for provider in plans_module.all_providers():
        if not isinstance(provider, TorchAOProvider):
            continue  # the PT2E plan has its own options (tests/test_pt2e.py)
        expected = (
            TorchAOInt4Options if provider.scheme is Scheme.INT4_WEIGHT_ONLY else TorchAOOptions
        )
        assert provider.options_type is expected, provider.name
        for attribute in attrs.fields(expected):
            assert attribute.default is not attrs.NOTHING, attribute.name
            assert attribute.metadata.get("help"), attribute.name


@pytest.mark.parametrize(
    ("plan", "values", "message"),
    [
        ("torchao_int8_dynamic", {"group_size": 32}, r"plan 'torchao_int8_dynamic' has no option"),
        (
            "torchao_int4_weight_only",
            {"groupsize": 32},
            r"'torchao_int4_weight_only' has no option",
        ),
        ("torchao_int4_weight_only", {"group_size": 48}, r"'torchao_int4_weight_only'.*32, 64"),
    ],
)
def test_a_bad_option_is_refused_before_the_race_naming_the_plan(
    plan: str, values: dict[str, Any], message: str
) -> None:
    optimizer = InferenceOptimizer(
        "cpu",
        OptimizationPolicy(include=[plan], plan_options={plan: values}),
        providers=plans_module.all_providers(),
        registry=load_providers(entry_points=[]),
    )
    with pytest.raises(ConfigurationError, match=message):
        optimizer.select(_mlp(), [WorkloadCase("b2", args=(torch.randn(2, 128),))])


def test_every_plan_declares_the_challenger_role() -> None:
    for provider in plans_module.all_providers():
        assert Role.of(provider) is Role.CHALLENGER
    assert TorchAOProvider.role is Role.CHALLENGER


def test_the_source_imports_from_dlopt_plugin_only() -> None:
    assert imports_beyond_plugin_api(dlopt_torchao) == []
