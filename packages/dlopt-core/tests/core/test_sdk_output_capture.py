"""SDK chatter while importing and probing is captured, never printed into the host's
output (``dlopt providers --json`` must be JSON only), and failed imports are remembered."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from dlopt.contract.provider import ProviderAvailability, ProviderContext, ProviderInfo
from dlopt.pipeline.probe import probe_provider
from dlopt.platform import probing

NOISY_IMPORT = """
import os, sys, warnings
print("python-level hello from {name}")
os.write(1, b"\\x1b[1;31mfd-level EP Error: libnvinfer.so.10 missing\\x1b[m\\n")
os.write(2, b"fd-level stderr from {name}\\n")
warnings.warn("register_constant is deprecated", DeprecationWarning, stacklevel=1)
with open({counter!r}, "a") as f:
    f.write("x")
{tail}
"""


def _noisy_module(tmp_path: Path, name: str, tail: str = "") -> Path:
    counter = tmp_path / f"{name}.imports"
    (tmp_path / f"{name}.py").write_text(
        NOISY_IMPORT.format(name=name, counter=str(counter), tail=tail)
    )
    return counter


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    probing.clear_captured_sdk_output()
    probing.forget_failed_imports()


def test_output_of_an_import_is_captured_not_printed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _noisy_module(tmp_path, "noisy_sdk_ok")
    module, error = probing.try_import("noisy_sdk_ok")
    printed = capfd.readouterr()
    assert error is None and module is not None
    assert printed.out == "" and printed.err == ""
    (captured,) = probing.captured_sdk_output()
    assert captured.source == "import noisy_sdk_ok"
    assert "python-level hello from noisy_sdk_ok" in captured.stdout
    # fd-level writes are caught too, colour codes removed.
    assert "fd-level EP Error: libnvinfer.so.10 missing" in captured.stdout
    assert "\x1b" not in captured.stdout
    assert "fd-level stderr from noisy_sdk_ok" in captured.stderr
    assert captured.warnings == ("DeprecationWarning: register_constant is deprecated",)
    sys.modules.pop("noisy_sdk_ok", None)


def test_a_failed_import_quotes_its_output_and_is_not_retried(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    counter = _noisy_module(
        tmp_path, "noisy_sdk_bad", tail="raise OSError('libnvinfer.so.10: cannot open')"
    )
    module, error = probing.try_import("noisy_sdk_bad")
    again, error_again = probing.try_import("noisy_sdk_bad")
    printed = capfd.readouterr()
    assert module is None and again is None
    assert printed.out == "" and printed.err == ""
    assert error is not None
    assert error.startswith("OSError: libnvinfer.so.10: cannot open (while importing it printed:")
    assert "fd-level EP Error" in error and "\x1b" not in error
    assert error_again == error
    assert counter.read_text() == "x", "a failed import ran again"
    probing.forget_failed_imports()
    probing.try_import("noisy_sdk_bad")
    assert counter.read_text() == "xx"


class _NoisyProbe:
    name = "noisy_plan"
    precision = None

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate

    def probe(self, context: ProviderContext) -> ProviderAvailability:
        import os

        print("EP Error: falling back to CPU")
        os.write(1, b"\x1b[0;93m2026-01-01 [W:onnxruntime] Falling back\x1b[m\n")
        os.write(2, b"native stderr line\n")
        if self.gate is not None:
            self.gate.wait(10)
            os.write(1, b"late line from an abandoned probe\n")
        return ProviderAvailability.unavailable("\x1b[1mTensorrtExecutionProvider\x1b[m unusable")

    def build(self, model: Any, context: ProviderContext) -> Any:
        raise NotImplementedError


def test_a_probe_that_prints_leaves_the_host_output_clean(
    capfd: pytest.CaptureFixture[str],
) -> None:
    status = probe_provider(ProviderInfo(_NoisyProbe(), "noisy"), ProviderContext())
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == ""
    assert status.sdk_output == (
        "EP Error: falling back to CPU",
        "2026-01-01 [W:onnxruntime] Falling back",
        "native stderr line",
    )
    reason = status.availability.reason
    assert reason.startswith("TensorrtExecutionProvider unusable (the SDK printed: EP Error")
    assert "\x1b" not in reason
    assert [c.source for c in probing.captured_sdk_output()] == ["probe noisy_plan"]
    # The host prints normally afterwards.
    print("host output")
    assert capfd.readouterr().out == "host output\n"


def test_a_hung_probe_gives_stdout_back(capfd: pytest.CaptureFixture[str]) -> None:
    gate = threading.Event()
    status = probe_provider(
        ProviderInfo(_NoisyProbe(gate), "noisy"), ProviderContext(), timeout_s=0.5
    )
    assert "without answering" in status.availability.reason
    print("host output after the limit")
    assert "host output after the limit" in capfd.readouterr().out
    gate.set()  # the abandoned probe finishes; the host's stdout stays its own
    for thread in threading.enumerate():
        if thread.name == "dlopt-probe-noisy_plan":
            thread.join(10)
    print("and later")
    out = capfd.readouterr().out
    assert "and later" in out


def test_nested_captures_each_see_their_own_output(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import os

    with probing.capture_output("outer") as outer:
        os.write(1, b"before\n")
        with probing.capture_output("inner") as inner:
            os.write(1, b"inside\n")
        os.write(2, b"after\n")
    assert capfd.readouterr() == ("", "")
    assert inner.result is not None and inner.result.stdout == "inside\n"
    assert outer.result is not None
    assert outer.result.lines() == ("before", "inside", "after")


class _ChattyEntryPoint:
    """An entry point whose module prints while it is imported (and maybe fails)."""

    name = "chatty"
    value = "chatty_plugin"
    dist = None

    def __init__(self, fails: bool) -> None:
        self.fails = fails

    def load(self) -> Any:
        import os
        import types

        print("chatty plugin says hello")
        os.write(2, b"native chatter while importing the plugin\n")
        if self.fails:
            raise ImportError("chatty plugin is broken")
        return types.SimpleNamespace(DLOPT_PLUGIN_API_VERSION="2.0")


@pytest.mark.parametrize("fails", [False, True])
def test_a_plugin_that_prints_while_loading_leaves_the_output_clean(
    fails: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    from dlopt.plugins.discovery import PluginSettings, load_providers

    registry = load_providers(PluginSettings(), entry_points=[_ChattyEntryPoint(fails)])
    assert capfd.readouterr() == ("", "")
    assert [f.plugin for f in registry.failures] == (["chatty"] if fails else [])
    (captured,) = probing.captured_sdk_output()
    assert captured.source == "load plugin chatty"
    assert captured.lines() == (
        "chatty plugin says hello",
        "native chatter while importing the plugin",
    )


def test_code_writing_bytes_to_stdout_works_inside_a_capture(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with probing.capture_output("bytes") as capture:
        sys.stdout.buffer.write(b"raw bytes\n")
        sys.stdout.flush()
        print("text", file=sys.stderr)
    assert capfd.readouterr() == ("", "")
    assert capture.result is not None
    assert (capture.result.stdout, capture.result.stderr) == ("raw bytes\n", "text\n")
