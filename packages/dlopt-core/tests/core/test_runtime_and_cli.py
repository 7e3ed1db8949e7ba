"""Runtime provenance and the inspect/providers commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlopt.cli import main
from dlopt.evidence.provenance import RuntimeInfo, inspect_runtime
from dlopt.platform.serialization import dumps, from_jsonable, parse_strict_json


def test_runtime_record_round_trips_through_json():
    info = inspect_runtime("cpu")
    text = dumps(info)
    again = from_jsonable(parse_strict_json(text), RuntimeInfo)
    assert again == info
    assert dumps(again) == text
    assert info.device_type == "cpu" and info.torch
    assert {p.name for p in info.providers} >= {"eager_fp32", "native_channels_last"}


def test_cuda_request_without_cuda_says_what_to_do():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(ValueError, match="no CUDA device"):
        inspect_runtime("cuda", with_providers=False)


def test_inspect_json_prints_the_record(capsys):
    assert main(["inspect", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["device"] == "cpu" and "isa_flags" in record["cpu"]


def test_providers_table_and_json(capsys):
    assert main(["providers"]) == 0
    table = capsys.readouterr().out
    assert "eager_fp32" in table and "available" in table
    assert main(["providers", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {p["name"] for p in data["providers"]}
    assert "eager_fp32" in names


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().out


def test_bad_device_is_a_usage_error(capsys):
    assert main(["providers", "--device", "gpu0"]) == 2
    assert "torch does not know the device type 'gpu0'" in capsys.readouterr().err


def _install_fake_distribution(site: Path, name: str, module_source: str, module: str) -> None:
    """A real installed distribution (dist-info + entry point) on a throwaway path."""
    dist_info = site / f"{name.replace('-', '_')}-0.5.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.5\n")
    (dist_info / "entry_points.txt").write_text(f"[dlopt.providers]\n{module} = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(module_source))


def test_providers_command_lists_a_broken_installed_plugin(tmp_path):
    _install_fake_distribution(
        tmp_path, "dlopt-brokenplugin", "import npu_sdk_that_is_missing\n", "brokenplugin"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "dlopt", "providers"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "plugins that failed to load" in out.stdout
    assert "brokenplugin" in out.stdout and "dlopt-brokenplugin" in out.stdout
    assert "npu_sdk_that_is_missing" in out.stdout
    assert "eager_fp32" in out.stdout
    strict = subprocess.run(
        [sys.executable, "-m", "dlopt", "providers"],
        env={**env, "DLOPT_STRICT_PLUGINS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert strict.returncode == 1
    assert "brokenplugin" in strict.stderr


def test_loading_every_entry_point_imports_no_heavy_sdk():
    code = textwrap.dedent(
        """
        import json, sys
        from dlopt.plugins.discovery import load_providers
        registry = load_providers()
        from dlopt.testing.provider_suite import ALL_HEAVY_SDKS
        print(json.dumps({"heavy": [m for m in ALL_HEAVY_SDKS if m in sys.modules],
                          "plugins": [p.plugin for p in registry.plugins],
                          "failures": [f.error for f in registry.failures]}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [], f"plugin loading imported {result['heavy']}"
    assert result["failures"] == []
