"""Plugin API 2.0 for the fx and Inductor plans: builds use the race's prepared inputs,
options refine a plan, roles are declared, and the source imports only ``dlopt.plugin``.

No check here compiles: Inductor plans compile on their first call, never in ``build``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import dlopt_fx
from dlopt import InferenceOptimizer, OptimizationPolicy, load_providers
from dlopt.plugin import (
    ConfigurationError,
    PreparedCase,
    ProviderContext,
    Role,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt.testing.plugins import imports_beyond_plugin_api
from dlopt_fx import providers as providers_module
from dlopt_fx.providers import FxProvider, InductorOptions, InductorProvider, default_providers


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x)).relu()


def _prepared(*batches: int) -> tuple[PreparedCase, ...]:
    gen = torch.Generator().manual_seed(0)
    return tuple(
        PreparedCase(f"b{b}", (torch.randn(b, 6, generator=gen),), {}, None) for b in batches
    )


def _context(tmp_path: Path, cases: tuple[PreparedCase, ...], **kwargs: Any) -> ProviderContext:
    # The workload as the user gave it: different tensors (and shapes) than the cases, as
    # when the race moved the cases to the target device.
    workload = WorkloadProfile(cases=(WorkloadCase("user", args=(torch.randn(3, 6),)),))
    return ProviderContext(workload=workload, artifact_dir=tmp_path, cases=cases, **kwargs)


def test_fx_build_traces_and_checks_on_the_prepared_inputs(
    tmp_path: Path, monkeypatch: Any
) -> None:
    seen: list[Any] = []
    real = providers_module.record_output_ranks

    def spy(gm: Any, cases: Any) -> Any:
        seen.extend(cases)
        return real(gm, cases)

    monkeypatch.setattr(providers_module, "record_output_ranks", spy)
    cases = _prepared(2, 5)
    FxProvider().build(Net().eval(), _context(tmp_path, cases))
    assert [id(args[0]) for args, _ in seen] == [id(c.args[0]) for c in cases]


def test_inductor_dynamic_dims_follow_the_prepared_cases(tmp_path: Path) -> None:
    # The user's workload has one shape; the prepared cases (what plans are called with)
    # have two batch sizes: the batch dim must be marked dynamic.
    plan = InductorProvider("inductor").build(Net().eval(), _context(tmp_path, _prepared(2, 5)))
    try:
        assert plan.metadata["dynamic_shapes"] == "marked"
        assert plan.metadata["dynamic_dims"] == {"0": [0]}
    finally:
        plan.close()


def test_options_refine_the_plan(tmp_path: Path) -> None:
    options = InductorOptions(freezing=True, dynamic="static")
    context = _context(tmp_path, _prepared(2, 5), options=options)
    plan = InductorProvider("inductor").build(Net().eval(), context)
    try:
        assert plan.metadata["inductor_options"] == {"freezing": True}
        assert plan.metadata["dynamic_shapes"] == "static"
    finally:
        plan.close()


def test_option_defaults_keep_each_variant_as_it_was() -> None:
    defaults = InductorOptions()
    by_name = {p.name: p for p in default_providers() if isinstance(p, InductorProvider)}
    assert by_name["inductor"].options_for("cpu", defaults) == {}
    assert by_name["inductor_freezing"].options_for("cpu", defaults) == {"freezing": True}
    assert by_name["inductor_max_autotune"].options_for("cuda", defaults) == {
        "max_autotune": True,
        "coordinate_descent_tuning": True,
    }
    # mode turns autotuning on for a plain plan, or off for the autotuning variant.
    autotune = InductorOptions(mode="max-autotune-no-cudagraphs")
    assert by_name["inductor"].options_for("cpu", autotune) == {
        "max_autotune": True,
        "freezing": True,
    }
    assert (
        by_name["inductor_max_autotune"].options_for("cpu", InductorOptions(mode="default")) == {}
    )
    # An explicit freezing=False is the user's to make, even with autotuning on CPU.
    no_freeze = InductorOptions(mode="max-autotune-no-cudagraphs", freezing=False)
    assert by_name["inductor"].options_for("cpu", no_freeze) == {"max_autotune": True}


def test_every_option_has_a_default_and_help() -> None:
    import attrs

    for attribute in attrs.fields(InductorOptions):
        assert attribute.default is not attrs.NOTHING, attribute.name
        assert attribute.metadata.get("help"), attribute.name
    for provider in default_providers():
        expected = None if isinstance(provider, FxProvider) else InductorOptions
        assert provider.options_type is expected, provider.name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"freezin": True}, r"plan 'inductor_freezing' has no option 'freezin'"),
        ({"mode": "reduce-overhead"}, r"plan 'inductor_freezing'.*CUDA graphs"),
        ({"dynamic": "sometimes"}, r"plan 'inductor_freezing'.*dynamic must be one of"),
    ],
)
def test_a_bad_option_is_refused_before_the_race_naming_the_plan(
    values: dict[str, Any], message: str
) -> None:
    optimizer = InferenceOptimizer(
        "cpu",
        OptimizationPolicy(
            include=["inductor_freezing"], plan_options={"inductor_freezing": values}
        ),
        providers=[InductorProvider("inductor_freezing", freezing=True)],
        registry=load_providers(entry_points=[]),
    )
    with pytest.raises(ConfigurationError, match=message):
        optimizer.select(Net().eval(), [WorkloadCase("b2", args=(torch.randn(2, 6),))])


def test_every_plan_declares_the_challenger_role() -> None:
    for provider in default_providers():
        assert Role.of(provider) is Role.CHALLENGER
    assert FxProvider.role is Role.CHALLENGER and InductorProvider.role is Role.CHALLENGER


def test_the_source_imports_from_dlopt_plugin_only() -> None:
    assert imports_beyond_plugin_api(dlopt_fx) == []
