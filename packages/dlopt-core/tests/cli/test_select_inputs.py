"""``dlopt select`` on real inputs: a factory's own workload, ``--inputs`` files (no
pickle), and the report saying which inputs raced."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from packaging.requirements import Requirement

from dlopt.cli import main
from dlopt.evidence.report import load_report

FACTORY = """
import torch
from dlopt import WorkloadCase, WorkloadProfile
from dlopt.testing.models import StructuredMLP

def build():
    return StructuredMLP()

def build_with_inputs():
    gen = torch.Generator().manual_seed(0)
    return StructuredMLP(), WorkloadProfile(
        name="mine",
        cases=(
            WorkloadCase("small", args=(torch.randn(2, 16, generator=gen),), weight=3),
            WorkloadCase("large", args=(torch.randn(6, 16, generator=gen),), weight=1),
        ),
    )

def build_bad_pair():
    return StructuredMLP(), {"cases": []}
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    name = f"user_models_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    return tmp_path / name


def _select(module: Path, factory: str, *extra: str) -> list[str]:
    return [
        "select",
        f"{module.name}:{factory}",
        *extra,
        "--include",
        "native_channels_last",  # rejected at build: only eager races, quickly
        "--max-measure-time",
        "1",
        "--report",
        str(module.parent / "r.json"),
    ]


def test_a_factory_may_return_its_own_workload(user_module, capsys):
    assert main(_select(user_module, "build_with_inputs")) == 0, capsys.readouterr().err
    report = load_report(user_module.parent / "r.json")
    assert [c.name for c in report.workload.cases] == ["small", "large"]
    assert [c.weight for c in report.workload.cases] == [3.0, 1.0]
    assert report.workload.inputs == "from the factory"
    assert "float32[2, 16]" in report.workload.cases[0].inputs


def test_a_pair_whose_second_item_is_no_workload_is_a_usage_error(user_module, capsys):
    assert main(_select(user_module, "build_bad_pair")) == 2
    assert "second item is dict" in capsys.readouterr().err


def test_a_plain_factory_needs_inputs(user_module, capsys):
    assert main(_select(user_module, "build")) == 2
    assert "--inputs FILE" in capsys.readouterr().err


def test_npz_inputs_race_one_case_per_entry(user_module, capsys):
    path = user_module.parent / "inputs.npz"
    np.savez(path, first=np.ones((3, 16), np.float32), second=np.zeros((5, 16), np.float32))
    assert main(_select(user_module, "build", "--inputs", str(path))) == 0, capsys.readouterr().err
    report = load_report(user_module.parent / "r.json")
    assert [c.name for c in report.workload.cases] == ["first", "second"]
    assert "float32[5, 16]" in report.workload.cases[1].inputs
    assert report.workload.inputs == "npz file inputs.npz (2 cases)"


def test_safetensors_inputs(user_module, capsys):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    path = user_module.parent / "inputs.safetensors"
    safetensors_torch.save_file({"only": torch.ones(4, 16)}, str(path))
    assert main(_select(user_module, "build", "--inputs", str(path))) == 0, capsys.readouterr().err
    report = load_report(user_module.parent / "r.json")
    assert [c.name for c in report.workload.cases] == ["only"]
    assert report.workload.inputs == "safetensors file inputs.safetensors (1 case)"


def test_safetensors_without_the_package_says_how_to_get_it(user_module, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_safetensors(name, *args, **kwargs):
        if name.startswith("safetensors"):
            raise ImportError("No module named 'safetensors'")
        return real_import(name, *args, **kwargs)

    path = user_module.parent / "inputs.safetensors"
    path.write_bytes(b"\0" * 16)
    monkeypatch.setattr(builtins, "__import__", no_safetensors)
    assert main(_select(user_module, "build", "--inputs", str(path))) == 2
    assert 'pip install "dlopt-core[inputs]"' in capsys.readouterr().err


def test_the_inputs_extra_the_hint_names_installs_safetensors():
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert "safetensors" in {Requirement(line).name for line in extras.get("inputs", [])}


@pytest.mark.parametrize(
    ("name", "write", "message"),
    [
        (
            "objects.npz",
            lambda p: np.savez(p, bad=np.array([{"a": 1}], dtype=object)),
            "cannot be read without pickle",
        ),
        ("text.npz", lambda p: np.savez(p, words=np.array(["a", "b"])), "not a number type"),
        ("broken.npz", lambda p: p.write_bytes(b"not a zip"), "is not a readable .npz"),
        ("empty.npz", lambda p: np.savez(p), "holds no tensors"),
        ("inputs.pt", lambda p: p.write_bytes(b"x"), "use a .npz file"),
        ("broken.safetensors", lambda p: p.write_bytes(b"\x01" * 12), "not a readable"),
    ],
)
def test_bad_input_files_are_usage_errors(user_module, capsys, name, write, message):
    if name.endswith(".safetensors"):
        pytest.importorskip("safetensors")
    path = user_module.parent / name
    write(path)
    assert main(_select(user_module, "build", "--inputs", str(path))) == 2
    assert message in capsys.readouterr().err


def test_inputs_and_shapes_together_are_refused(user_module, capsys):
    path = user_module.parent / "inputs.npz"
    np.savez(path, a=np.ones((1, 16), np.float32))
    argv = _select(user_module, "build", "--inputs", str(path), "--case", "x=1x16")
    assert main(argv) == 2
    assert "not both" in capsys.readouterr().err


def test_random_shapes_are_named_in_the_report(user_module, capsys):
    assert main(_select(user_module, "build", "--case", "b1=1x16@2")) == 0
    report = load_report(user_module.parent / "r.json")
    assert report.workload.inputs == "random tensors of the given shapes"
