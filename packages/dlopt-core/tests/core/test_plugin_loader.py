"""The loader keeps every plugin in its own error boundary."""

from __future__ import annotations

import types

import pytest

from dlopt.contract.hooks import hookimpl
from dlopt.contract.provider import PLUGIN_API_VERSION, api_version_problem
from dlopt.errors import PluginLoadError
from dlopt.pipeline.probe import probe_all
from dlopt.platform.probing import importlib_metadata
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.testing import FakeProvider


class _FakeDist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


class _FakeEntryPoint:
    """Stands in for importlib.metadata.EntryPoint: a name, a dist and a load()."""

    def __init__(self, name: str, load, dist: str = "dlopt-fake", version: str = "9.9") -> None:
        self.name = name
        self._load = load
        self.dist = _FakeDist(dist, version)

    def load(self):
        return self._load()


def _plugin_module(name: str, *providers, api: str | None = PLUGIN_API_VERSION, raises=None):
    module = types.ModuleType(name)
    if api is not None:
        module.DLOPT_PLUGIN_API_VERSION = api

    @hookimpl
    def dlopt_register_providers(register):
        for provider in providers:
            register(provider)
        if raises is not None:
            raise raises

    module.dlopt_register_providers = dlopt_register_providers
    return module


def _import_error():
    raise ImportError("No module named 'npu_sdk'")


def _broken_entry_points():
    good = _plugin_module("good", FakeProvider("good_plan"))
    return [
        _FakeEntryPoint("good", lambda: good, dist="dlopt-good", version="1.2.3"),
        _FakeEntryPoint("import_fails", _import_error, dist="dlopt-npu", version="0.3"),
        _FakeEntryPoint(
            "register_raises",
            lambda: _plugin_module("r", FakeProvider("half_plan"), raises=RuntimeError("boom")),
        ),
        _FakeEntryPoint(
            "too_new", lambda: _plugin_module("n", FakeProvider("new_plan"), api="2.2")
        ),
        _FakeEntryPoint(
            "undeclared", lambda: _plugin_module("u", FakeProvider("u_plan"), api=None)
        ),
        importlib_metadata.EntryPoint(
            name="ghost", value="dlopt_no_such_module_anywhere", group="dlopt.providers"
        ),
    ]


def test_broken_plugins_are_reported_and_the_rest_keep_working():
    registry = load_providers(PluginSettings(), entry_points=_broken_entry_points())
    names = [info.name for info in registry.providers]
    assert "good_plan" in names and "eager_fp32" in names
    # A plugin that raised mid-registration contributes nothing, not half its plans.
    assert "half_plan" not in names and "new_plan" not in names and "u_plan" not in names
    failures = {f.plugin: f for f in registry.failures}
    assert set(failures) == {"import_fails", "register_raises", "too_new", "undeclared", "ghost"}
    assert failures["import_fails"].stage == "load"
    assert failures["import_fails"].distribution == "dlopt-npu"
    assert failures["import_fails"].version == "0.3"
    assert "npu_sdk" in failures["import_fails"].error
    assert failures["register_raises"].stage == "register"
    assert "boom" in failures["register_raises"].error
    assert failures["too_new"].stage == "api_version"
    assert "2.1" in failures["too_new"].error and PLUGIN_API_VERSION in failures["too_new"].error
    assert "declares no DLOPT_PLUGIN_API_VERSION" in failures["undeclared"].error
    assert "dlopt_no_such_module_anywhere" in failures["ghost"].error
    good = registry.get("good_plan")
    assert (good.plugin, good.distribution, good.version) == ("good", "dlopt-good", "1.2.3")


def test_strict_mode_reraises_the_first_failure():
    with pytest.raises(PluginLoadError, match=r"import_fails.*npu_sdk"):
        load_providers(PluginSettings(strict=True), entry_points=_broken_entry_points())


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DLOPT_PLUGINS": "good"}, {"good_plan"}),
        ({"DLOPT_DISABLE_PLUGINS": "good"}, set()),
        ({"DLOPT_DISABLE_PLUGIN_AUTOLOAD": "1"}, set()),
        ({}, {"good_plan"}),
    ],
)
def test_allow_deny_and_autoload_switches(env, expected):
    settings = PluginSettings.from_env(env)
    registry = load_providers(settings, entry_points=_broken_entry_points())
    plugin_names = {info.name for info in registry.providers if info.plugin != "dlopt.builtin"}
    assert plugin_names == expected
    # Built-ins register through the same hook whatever the switches say.
    assert {"eager_fp32", "native_channels_last"} <= {info.name for info in registry.providers}
    if env.get("DLOPT_PLUGINS") == "good":
        assert registry.failures == []


def test_duplicate_provider_names_are_refused():
    dup = _plugin_module("dup", FakeProvider("eager_fp32"))
    registry = load_providers(PluginSettings(), entry_points=[_FakeEntryPoint("dup", lambda: dup)])
    (failure,) = registry.failures
    assert failure.stage == "register" and "already registered" in failure.error
    assert [i.plugin for i in registry.providers if i.name == "eager_fp32"] == ["dlopt.builtin"]


def test_register_rejects_objects_that_are_not_providers():
    bad = _plugin_module("bad", object())
    registry = load_providers(PluginSettings(), entry_points=[_FakeEntryPoint("bad", lambda: bad)])
    (failure,) = registry.failures
    assert "lacks name, probe, build" in failure.error


def test_a_probe_that_raises_is_reported_unavailable():
    from dlopt.contract.provider import ProviderContext

    plugin = _plugin_module("p", FakeProvider("exploding", fail="probe_raises"))
    registry = load_providers(PluginSettings(), entry_points=[_FakeEntryPoint("p", lambda: plugin)])
    status = {s.name: s for s in probe_all(registry, ProviderContext())}["exploding"]
    assert not status.availability.available
    assert "fake probe exploded" in status.availability.reason


def test_event_observers_that_raise_do_not_break_emission():
    from dlopt.events import Event, EventKind

    seen = []
    loud, quiet = types.ModuleType("loud"), types.ModuleType("quiet")
    for module in (loud, quiet):
        module.DLOPT_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    loud.dlopt_on_event = hookimpl(lambda event: (_ for _ in ()).throw(RuntimeError("x")))
    quiet.dlopt_on_event = hookimpl(lambda event: seen.append(event.kind))
    registry = load_providers(
        PluginSettings(autoload=False), extra_plugins=[("loud", loud), ("quiet", quiet)]
    )
    registry.emit(Event(EventKind.ROUND_FINISHED, "round 1"))
    assert seen == [EventKind.ROUND_FINISHED]


@pytest.mark.parametrize(
    ("declared", "ok"),
    [
        (PLUGIN_API_VERSION, True),
        ("2.0", True),
        ("1.0", False),  # written for 1.0: the 2.0 contract changed under it
        ("2.1", True),
        ("2.2", False),
        ("3.0", False),
        ("one", False),
        (None, False),
    ],
)
def test_api_version_compatibility(declared, ok):
    assert (api_version_problem(declared) is None) is ok
