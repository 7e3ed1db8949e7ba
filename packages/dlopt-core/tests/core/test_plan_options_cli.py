"""Plan options from the shell: ``dlopt providers --options PLAN`` and ``--option``."""

from __future__ import annotations

import json

import attrs
import pytest

from dlopt.cli import main
from dlopt.cli.cmd_select import parse_plan_options
from dlopt.errors import ConfigurationError
from dlopt.plugins import discovery as loader
from dlopt.testing import FakeProvider
from dlopt.testing.plugins import plugin_module


@attrs.frozen
class NpuOptions:
    cores: int = attrs.field(default=1, metadata={"help": "NPU cores to use"})
    mode: str = attrs.field(default="fast", metadata={"help": "compiler mode"})


class NpuFake(FakeProvider):
    options_type = NpuOptions


@pytest.fixture
def npu_registry(monkeypatch):
    provider = NpuFake("npu_plan")
    real = loader.load_providers

    def load(*args, **kwargs):
        settings = loader.PluginSettings(autoload=False)
        return real(settings, extra_plugins=[("npu", plugin_module("npu", provider))])

    monkeypatch.setattr(loader, "load_providers", load)


def test_providers_lists_a_plans_options(npu_registry, capsys):
    assert main(["providers", "--options", "npu_plan"]) == 0
    out = capsys.readouterr().out
    assert "cores" in out and "NPU cores to use" in out and "'fast'" in out


def test_providers_lists_options_as_json(npu_registry, capsys):
    assert main(["providers", "--options", "npu_plan", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["options"][0] == {
        "name": "cores",
        "type": "int",
        "default": 1,
        "help": "NPU cores to use",
    }


def test_an_unknown_plan_is_a_usage_error_with_close_names(npu_registry, capsys):
    assert main(["providers", "--options", "npu_plna"]) == 2
    assert "did you mean 'npu_plan'" in capsys.readouterr().err


def test_option_values_are_read_as_json_when_they_parse():
    assert parse_plan_options(["p.cores=2", "p.mode=basic", "q.flag=true"]) == {
        "p": {"cores": 2, "mode": "basic"},
        "q": {"flag": True},
    }
    with pytest.raises(ConfigurationError, match=r"PLAN\.OPTION=VALUE"):
        parse_plan_options(["cores=2"])


def test_select_refuses_a_bad_option_before_racing(npu_registry, capsys):
    code = main(["select", "--demo", "--option", "npu_plan.cores=many"])
    assert code == 2
    err = capsys.readouterr().err
    assert "'npu_plan'" in err and "cores" in err and "Traceback" not in err
