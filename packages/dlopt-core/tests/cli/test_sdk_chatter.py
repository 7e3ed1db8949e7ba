"""What provider SDKs print, warn or log while they are probed stays out of tables and
JSON, and is shown once, on stderr."""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Iterator

import pytest

from dlopt.cli import main
from dlopt.plugins import discovery as loader
from dlopt.plugins.discovery import PluginSettings
from dlopt.testing import FakeProvider
from dlopt.testing.plugins import plugin_module

OWN = "noisysdk.own"


class NoisyProvider(FakeProvider):
    def probe(self, context):
        warnings.warn("noisy_sdk.register_constant is deprecated", FutureWarning, stacklevel=1)
        logging.getLogger("noisysdk").warning("no triton, some kernels will not work")
        logging.getLogger(OWN).warning("own handler message")
        print("noisy sdk banner on stdout")
        print("noisy sdk banner on stderr", file=sys.stderr)
        return super().probe(context)


@pytest.fixture
def noisy_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    own = logging.getLogger(OWN)
    handler = logging.StreamHandler(sys.stderr)  # like torch's logger: its own handler
    own.addHandler(handler)
    own.propagate = False
    real = loader.load_providers

    def with_noisy(settings=None, **kwargs):
        module = plugin_module("noisy", NoisyProvider("noisy_plan"))
        return real(PluginSettings(autoload=False), extra_plugins=[("noisy", module)])

    monkeypatch.setattr(loader, "load_providers", with_noisy)
    yield
    own.removeHandler(handler)
    own.propagate = True


MESSAGES = (
    "noisy_sdk.register_constant is deprecated",
    "no triton, some kernels will not work",
    "own handler message",
    "noisy sdk banner on stdout",
    "noisy sdk banner on stderr",
)


@pytest.mark.parametrize("as_json", [False, True])
def test_probe_chatter_is_shown_once_on_stderr_only(noisy_registry, capsys, as_json):
    assert main(["providers", "--verbose", *(["--json"] if as_json else [])]) == 0
    captured = capsys.readouterr()
    if as_json:
        data = json.loads(captured.out)  # nothing but the JSON on stdout
        (noisy,) = [p for p in data["providers"] if p["name"] == "noisy_plan"]
        # The probe's own output is part of its record, as data.
        assert any("banner on stdout" in line for line in noisy["sdk_output"])
    else:
        assert "noisy_plan" in captured.out
        for message in MESSAGES:
            assert message not in captured.out
    for message in MESSAGES:
        assert captured.err.count(message) == 1, captured.err
    assert "provider packages said (5 lines):" in captured.err


def test_by_default_each_package_s_chatter_is_one_line(noisy_registry, capsys):
    assert main(["providers", "--plain"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("provider packages said 5 lines"), err
    summaries = err[1:]
    origins = [line.strip().split(":", 1)[0] for line in summaries]
    assert len(origins) == len(set(origins)), summaries  # one line per package
    assert "noisysdk" in origins  # a logger's top package names its lines
    assert sum(int(line.split(": ", 1)[1].split(" ", 1)[0]) for line in summaries) == 5
