"""Plugin API 2.0 at the loader: hooks through pluggy, unknown hooks, register's keywords,
entry-point names claimed twice, and declared roles instead of name prefixes."""

from __future__ import annotations

import types

import pytest

from dlopt.contract.hooks import hookimpl
from dlopt.contract.provider import PLUGIN_API_VERSION, Role
from dlopt.events import Event, EventKind
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.testing import FakeProvider
from dlopt.testing.models import StructuredMLP
from dlopt.testing.plugins import plugin_module


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.DLOPT_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def _load(*plugins: tuple[str, object]):
    return load_providers(PluginSettings(autoload=False), extra_plugins=list(plugins))


def test_an_observer_taking_fewer_arguments_than_the_spec_is_called_through_pluggy():
    seen = []

    class Observer:
        DLOPT_PLUGIN_API_VERSION = PLUGIN_API_VERSION

        @hookimpl
        def dlopt_on_event(self):  # pluggy matches arguments by name: none wanted here
            seen.append("called")

    registry = _load(("observer", Observer()))
    assert not registry.failures
    registry.emit(Event(EventKind.ROUND_FINISHED, "round 1"))
    assert seen == ["called"]


def test_one_observer_raising_does_not_stop_the_others():
    seen = []

    class Broken:
        DLOPT_PLUGIN_API_VERSION = PLUGIN_API_VERSION

        @hookimpl
        def dlopt_on_event(self, event):
            raise RuntimeError("observer bug")

    class Fine:
        DLOPT_PLUGIN_API_VERSION = PLUGIN_API_VERSION

        @hookimpl
        def dlopt_on_event(self, event):
            seen.append(event.kind)

    registry = _load(("broken", Broken()), ("fine", Fine()))
    registry.emit(Event(EventKind.DECISION_MADE, "done"))
    assert seen == [EventKind.DECISION_MADE]


def test_a_misspelled_hook_is_a_load_failure_naming_the_right_one():
    @hookimpl
    def dlopt_register_provider(register):
        register(FakeProvider("typo_plan"))

    registry = _load(("typo", _module("typo", dlopt_register_provider=dlopt_register_provider)))
    (failure,) = registry.failures
    assert failure.plugin == "typo" and failure.stage == "load"
    assert "'dlopt_register_provider'" in failure.error
    assert "did you mean 'dlopt_register_providers'" in failure.error
    assert "typo_plan" not in {info.name for info in registry.providers}


def test_a_hook_function_without_hookimpl_is_a_load_failure():
    def dlopt_register_providers(register):
        register(FakeProvider("unmarked_plan"))

    registry = _load(("bare", _module("bare", dlopt_register_providers=dlopt_register_providers)))
    (failure,) = registry.failures
    assert failure.stage == "load" and "@hookimpl" in failure.error


def test_register_refuses_unknown_keywords_naming_the_plugin():
    @hookimpl
    def dlopt_register_providers(register):
        register(FakeProvider("kw_plan"), priority=3)

    registry = _load(("kw", _module("kw", dlopt_register_providers=dlopt_register_providers)))
    (failure,) = registry.failures
    assert failure.plugin == "kw" and failure.stage == "register"
    assert "'priority'" in failure.error


def test_a_role_that_is_not_one_of_the_three_is_a_register_failure():
    class Odd(FakeProvider):
        pass

    odd = Odd("odd_plan")
    object.__setattr__(odd, "role", "boss")
    registry = _load(("odd", plugin_module("odd", odd)))
    (failure,) = registry.failures
    assert failure.stage == "register" and "'boss'" in failure.error


class _Dist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


class _EntryPoint:
    def __init__(self, name: str, dist: _Dist, module: object) -> None:
        self.name = name
        self.dist = dist
        self.value = f"{dist.metadata['Name']}.plugin"
        self._module = module

    def load(self):
        return self._module


def test_two_distributions_claiming_one_entry_point_name_are_reported_clearly():
    first = _EntryPoint("npu", _Dist("dlopt-npu-a", "1.0"), plugin_module("a", FakeProvider("a")))
    second = _EntryPoint("npu", _Dist("dlopt-npu-b", "2.0"), plugin_module("b", FakeProvider("b")))
    registry = load_providers(PluginSettings(), entry_points=[first, second])
    (failure,) = [f for f in registry.failures if f.plugin == "npu"]
    assert "claimed by dlopt-npu-a 1.0 and dlopt-npu-b 2.0" in failure.error
    assert not {"a", "b"} & {info.name for info in registry.providers}


def test_a_plan_named_native_is_a_challenger_unless_it_declares_the_native_role(race, x):
    # A third-party plan whose name starts with "native" must not become a baseline
    # candidate: roles are declared, names carry no meaning.
    npu = race.fake("native_npu", 1e-3, role=Role.CHALLENGER)
    decision = race.optimizer(race.fake("eager_fp32", 3e-3), npu).select_signature(
        StructuredMLP(), x
    )
    evidence = decision.report.candidate("native_npu")
    assert evidence.role == "challenger"
    assert decision.report.baseline == "eager_fp32"
    assert decision.selected_plan == "native_npu"


def test_exactly_one_reference_is_required(race, x):
    from dlopt.errors import ConfigurationError

    two = race.optimizer(
        race.fake("eager_fp32", 3e-3), race.fake("other_ref", 1e-3, role=Role.REFERENCE)
    )
    with pytest.raises(ConfigurationError, match="more than one provider declares the reference"):
        two.select_signature(StructuredMLP(), x)
