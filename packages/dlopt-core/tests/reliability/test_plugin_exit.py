"""Fault class: a plugin that calls ``sys.exit`` (SystemExit is not an Exception).

At import, in its register hook or in its probe, it is reported like any other broken
plugin, with its name; ``dlopt providers`` goes on. Ctrl-C (KeyboardInterrupt) still stops.
"""

from __future__ import annotations

import sys

import pytest

from dlopt.cli import main
from dlopt.contract.provider import ProviderContext, ProviderInfo
from dlopt.pipeline.probe import probe_provider
from dlopt.plugins import discovery as loader
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.testing import FakeProvider
from dlopt.testing.plugins import plugin_module


class _EntryPoint:
    def __init__(self, name, load):
        self.name = name
        self._load = load
        self.dist = None

    def load(self):
        return self._load()


def _exits_at_import():
    sys.exit("plugin gave up at import")


def test_sys_exit_at_import_is_a_load_failure():
    registry = load_providers(
        PluginSettings(), entry_points=[_EntryPoint("quitter", _exits_at_import)]
    )
    (failure,) = registry.failures
    assert (failure.plugin, failure.stage) == ("quitter", "load")
    assert "SystemExit" in failure.error and "gave up at import" in failure.error
    assert "eager_fp32" in {info.name for info in registry.providers}


def test_sys_exit_while_registering_is_a_register_failure():
    plugin = plugin_module("quits_registering", FakeProvider("q_plan"), raises=SystemExit(3))
    registry = load_providers(
        PluginSettings(autoload=False), extra_plugins=[("quits_registering", plugin)]
    )
    (failure,) = registry.failures
    assert (failure.plugin, failure.stage) == ("quits_registering", "register")
    assert "SystemExit" in failure.error
    assert "q_plan" not in {info.name for info in registry.providers}


def test_keyboard_interrupt_still_stops_loading():
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        load_providers(PluginSettings(), entry_points=[_EntryPoint("ctrl_c", interrupted)])
    plugin = plugin_module("ctrl_c_register", raises=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        load_providers(PluginSettings(autoload=False), extra_plugins=[("ctrl_c", plugin)])


class _ExitingProbe(FakeProvider):
    def probe(self, context):
        raise SystemExit("probe quit")


class _InterruptedProbe(FakeProvider):
    def probe(self, context):
        raise KeyboardInterrupt


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_sys_exit_in_a_probe_is_unavailable(timeout_s):
    info = ProviderInfo(_ExitingProbe("exiting"), plugin="quitter_plugin")
    status = probe_provider(info, ProviderContext(), timeout_s=timeout_s)
    assert not status.availability.available
    assert "SystemExit" in status.availability.reason
    assert "quitter_plugin" in status.availability.install_hint


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_keyboard_interrupt_in_a_probe_propagates(timeout_s):
    info = ProviderInfo(_InterruptedProbe("ctrl_c"), plugin="p")
    with pytest.raises(KeyboardInterrupt):
        probe_provider(info, ProviderContext(), timeout_s=timeout_s)


def test_dlopt_providers_lists_a_plugin_that_exits(monkeypatch, capsys):
    real = loader.load_providers

    def with_quitter(settings=None, **kwargs):
        return real(
            PluginSettings(), entry_points=[_EntryPoint("quitter", _exits_at_import)], **kwargs
        )

    monkeypatch.setattr(loader, "load_providers", with_quitter)
    assert main(["providers"]) == 0
    out = capsys.readouterr().out
    assert "quitter" in out and "SystemExit" in out and "eager_fp32" in out


class _ExitingBuild(FakeProvider):
    def build(self, model, context):
        sys.exit("the SDK gave up on aten::fake")


class _InterruptedBuild(FakeProvider):
    def build(self, model, context):
        raise KeyboardInterrupt


def test_sys_exit_in_a_build_rejects_that_plan_and_the_race_goes_on(race, x):
    from dlopt.testing.models import StructuredMLP

    decision = race.optimizer(
        race.fake("eager_fp32", 3e-3),
        _ExitingBuild("quits_in_build", 1e-4),
        race.fake("fast", 1e-3),
    ).select_signature(StructuredMLP(), x)
    quitter = decision.report.candidate("quits_in_build")
    assert quitter.status == "rejected" and quitter.error.stage == "build"
    assert "SystemExit: the SDK gave up on aten::fake" in quitter.error.message
    assert decision.selected_plan == "fast"


def test_keyboard_interrupt_in_a_build_stops_the_selection(race, x):
    from dlopt.testing.models import StructuredMLP

    optimizer = race.optimizer(race.fake("eager_fp32", 3e-3), _InterruptedBuild("ctrl_c", 1e-4))
    with pytest.raises(KeyboardInterrupt):
        optimizer.select_signature(StructuredMLP(), x)
