"""``dlopt providers`` names every first-party provider distribution that is not installed,
with the command that installs it, from dlopt-core's own list (a wheel of dlopt-core alone
knows it); and what SDKs print while loaded and probed, C code included, is summarised on
stderr in one line per SDK (``--verbose``: every line)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from dlopt.cli import main
from dlopt.platform import probing
from dlopt.plugins import discovery as loader
from dlopt.plugins import first_party
from dlopt.plugins.discovery import PluginSettings
from dlopt.testing import FakeProvider
from dlopt.testing.plugins import plugin_module

REPOSITORY = Path(__file__).resolve().parents[4]

INSTALL = {
    "dlopt-fx": "pip install dlopt-fx",
    "dlopt-onnxruntime": 'pip install "dlopt-onnxruntime[cpu]"',
    "dlopt-torchao": 'pip install "dlopt-torchao[inductor]"',
    "dlopt-openvino": "pip install dlopt-openvino",
    "dlopt-tensorrt": 'pip install dlopt-tensorrt "torch-tensorrt==',
}


def _uninstall(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make the distribution lookup answer "not installed" for ``names`` (nothing is
    uninstalled): what importlib.metadata says of a wheel of dlopt-core installed alone."""
    real = probing.importlib_metadata.version

    def version(name: str) -> str:
        if name in names:
            raise probing.importlib_metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(probing.importlib_metadata, "version", version)


@pytest.fixture(autouse=True)
def _core_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("DLOPT_PROBE_CACHE", "off")
    probing.clear_captured_sdk_output()
    probing.forget_failed_imports()


def test_every_first_party_distribution_not_installed_is_named_with_its_pip_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _uninstall(monkeypatch, *INSTALL)
    assert main(["providers", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "first-party provider distributions not installed" in out
    for name, command in INSTALL.items():
        (row,) = [line for line in out.splitlines() if line.startswith(name + " ")]
        assert command in row, row
    assert "eager_fp32" in out  # the plans table is still there, first


def test_only_the_missing_ones_are_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(first_party, "distribution_version", _installed_but("dlopt-openvino"))
    assert main(["providers", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "pip install dlopt-openvino" in out
    for name in set(INSTALL) - {"dlopt-openvino"}:
        assert not any(line.startswith(name + " ") for line in out.splitlines()), name


def _installed_but(*missing: str):
    def version(name: str) -> str | None:
        return None if name in missing else "0.3.0"

    return version


def test_nothing_is_named_when_every_one_is_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(first_party, "distribution_version", _installed_but())
    assert main(["providers", "--plain"]) == 0
    assert "first-party provider distributions not installed" not in capsys.readouterr().out
    assert first_party.missing_first_party() == ()


def test_json_lists_them_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _uninstall(monkeypatch, *INSTALL)
    assert main(["providers", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    listed = {entry["distribution"]: entry["install"] for entry in document["not_installed"]}
    assert set(listed) == set(INSTALL)
    for name, command in INSTALL.items():
        assert listed[name].startswith(command)


def test_the_list_is_core_s_own_and_matches_the_project() -> None:
    shipped = {d.name for d in first_party.FIRST_PARTY}
    in_repository = {p.name for p in (REPOSITORY / "packages").iterdir() if p.is_dir()}
    assert shipped == in_repository - {"dlopt-core"}
    for distribution in first_party.FIRST_PARTY:
        pyproject = REPOSITORY / "packages" / distribution.name / "pyproject.toml"
        assert f'name = "{distribution.name}"' in pyproject.read_text(encoding="utf-8")
        src = REPOSITORY / "packages" / distribution.name / "src" / distribution.module
        assert (src / "__init__.py").is_file()


def test_install_commands_fit_the_target_and_the_installed_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        first_party,
        "distribution_version",
        lambda name: "2.14.1+cu126" if name == "torch" else None,
    )
    by_name = {d.name: d for d in first_party.FIRST_PARTY}
    assert by_name["dlopt-onnxruntime"].install_command("cuda").endswith('[gpu]"')
    assert by_name["dlopt-onnxruntime"].install_command("cpu").endswith('[cpu]"')
    assert by_name["dlopt-tensorrt"].install_command("cuda") == (
        'pip install dlopt-tensorrt "torch-tensorrt==2.14.*"'
    )


# --- SDK loader noise -------------------------------------------------------------------

LOADER_NOISE = """
import logging, os
for name in ("_C_mxfp8.so", "_C_cutlass_90a.so", "_C_fp6.so"):
    os.write(2, f"Failed to load /opt/sdk/lib/{name}: cannot open shared object file\\n".encode())
os.write(1, b"sdk banner from C\\n")
logging.getLogger("othersdk.kernels").warning("Detected no triton")
logging.getLogger("othersdk").warning("register_constant is deprecated")
"""


class LoadingProvider(FakeProvider):
    """A provider whose probe imports an SDK that talks at the file-descriptor level."""

    def probe(self, context):
        _module, error = probing.try_import("noisy_loader_sdk")
        assert error is None, error
        return super().probe(context)


@pytest.fixture
def noisy_sdk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    (tmp_path / "noisy_loader_sdk.py").write_text(LOADER_NOISE)
    monkeypatch.syspath_prepend(str(tmp_path))
    real = loader.load_providers

    def with_noisy(settings=None, **kwargs):
        module = plugin_module("loading", LoadingProvider("loading_plan"))
        return real(PluginSettings(autoload=False), extra_plugins=[("loading", module)])

    monkeypatch.setattr(loader, "load_providers", with_noisy)
    yield
    sys.modules.pop("noisy_loader_sdk", None)


def test_sdk_loader_noise_is_summarised_in_one_line_per_sdk(
    noisy_sdk: None, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["providers", "--plain"]) == 0
    printed = capfd.readouterr()
    assert "Failed to load" not in printed.out and "banner" not in printed.out
    err = printed.err.splitlines()
    assert err[0].startswith("provider packages said 6 lines"), printed.err
    (sdk,) = [line for line in err if line.strip().startswith("noisy_loader_sdk:")]
    assert "4 lines, e.g. " in sdk and sdk.endswith("(+3 more)"), sdk
    (other,) = [line for line in err if line.strip().startswith("othersdk:")]
    assert "2 lines" in other
    assert printed.err.count("Failed to load") <= 1
    assert len(err) == 3  # the heading, then one line per SDK


def test_verbose_shows_every_line_once(noisy_sdk: None, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["providers", "--plain", "--verbose"]) == 0
    err = capfd.readouterr().err
    for name in ("_C_mxfp8.so", "_C_cutlass_90a.so", "_C_fp6.so"):
        assert err.count(f"Failed to load /opt/sdk/lib/{name}") == 1
    assert err.count("sdk banner from C") == 1
    assert err.count("Detected no triton") == 1


def test_no_noise_no_summary(capfd: pytest.CaptureFixture[str]) -> None:
    logging.getLogger("quiet").info("below WARNING: not chatter")
    assert main(["providers", "--plain"]) == 0
    assert "provider packages said" not in capfd.readouterr().err
