"""Save and load end to end: an ONNX Runtime winner's bundle serves again in a fresh process.

The model computes slowly in eager mode only (a sleep the exporters do not record), so the
exported ONNX Runtime plan wins every race by a wide margin and the tests do not depend
on the machine's speed.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import dlopt
from dlopt import InferenceOptimizer, OptimizationPolicy, WorkloadCase, WorkloadProfile
from dlopt.bundle.store import BundleError, BundleLoadError
from dlopt.measurement import MeasurementPolicy
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.testing.fresh_process import printed_result, run_script

pytest.importorskip("dlopt_onnxruntime")
pytestmark = pytest.mark.slow

#: A model module for the CLI (``MODULE:FACTORY``) and for the race below.
MODEL_SOURCE = textwrap.dedent(
    '''
    import time

    import torch


    class SlowEagerMlp(torch.nn.Module):
        """An MLP whose eager calls also sleep 3 ms; exporters do not record the sleep."""

        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
            )

        def forward(self, x):
            if not (torch.compiler.is_exporting() or torch.jit.is_tracing()):
                time.sleep(0.003)
            return self.net(x)


    def build():
        torch.manual_seed(0)
        return SlowEagerMlp().eval()
    '''
)

ORT_OPTIONS = {"graph_optimization_level": "extended", "intra_op_threads": 1}


@pytest.fixture(scope="module")
def model_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    (folder / "slow_eager_model.py").write_text(MODEL_SOURCE)
    return folder


def _build_model(folder: Path) -> torch.nn.Module:
    namespace: dict[str, Any] = {}
    exec(compile(MODEL_SOURCE, str(folder / "slow_eager_model.py"), "exec"), namespace)
    return namespace["build"]()


@pytest.fixture(scope="module")
def saved(model_module: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real race of eager vs onnxruntime_cpu, saved as a bundle."""
    root = tmp_path_factory.mktemp("saved")
    model = _build_model(model_module)
    gen = torch.Generator().manual_seed(4)
    workload = WorkloadProfile(
        cases=(
            WorkloadCase("b2", args=(torch.randn(2, 32, generator=gen),), weight=3),
            WorkloadCase("b8", args=(torch.randn(8, 32, generator=gen),), weight=1),
        )
    )
    policy = OptimizationPolicy(
        include=("onnxruntime_cpu",),
        plan_options={"onnxruntime_cpu": ORT_OPTIONS},
        measurement=MeasurementPolicy(max_time_s=3.0, seed=0, bootstrap_resamples=0),
        exhaustive=True,
    )
    decision = InferenceOptimizer("cpu", policy, artifact_dir=root / "plans").select(
        model, workload
    )
    assert decision.selected_plan == "onnxruntime_cpu", decision.selection_reason
    bundle = decision.save_bundle(root / "bundle")
    decision.close()
    x = torch.randn(5, 32, generator=gen)  # a batch size the race never saw
    with torch.no_grad():
        expected = model(x)
    np.save(root / "x.npy", x.numpy())
    return bundle, x, expected, root


LOADER = textwrap.dedent(
    """
    import json, sys

    import numpy as np
    import torch

    def refuse(*args, **kwargs):
        raise AssertionError("an export ran while loading a bundle")

    torch.onnx.export = refuse
    torch.jit.trace = refuse

    import dlopt

    bundle, inputs, outputs = sys.argv[1:4]
    decision = dlopt.load_bundle(bundle)
    x = torch.from_numpy(np.load(inputs))
    with torch.inference_mode():
        np.save(outputs, decision(x).numpy())
    print("RESULT " + json.dumps({
        "selected": decision.selected_plan,
        "export_source": decision.plan.metadata["export_source"],
        "session_options": decision.plan.metadata["session_options"],
        "models_built": [m for m in sys.modules if "slow_eager" in m],
    }))
    decision.close()
    """
)


def test_a_bundle_serves_again_in_a_fresh_process_without_an_export(saved: Any) -> None:
    bundle, _, expected, root = saved
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["provider"]["name"] == "onnxruntime_cpu"
    assert manifest["provider"]["distribution"] == "dlopt-onnxruntime"
    assert manifest["provider"]["options"]["graph_optimization_level"] == "extended"
    proc = run_script(
        LOADER, str(bundle), str(root / "x.npy"), str(root / "y.npy"), directory=root, timeout=300
    )
    info = printed_result(proc)
    assert info["selected"] == "onnxruntime_cpu"
    assert info["export_source"] == "loaded"
    assert info["models_built"] == []
    # The options the plan raced with came back from the report.
    assert info["session_options"]["graph_optimization_level"] == "extended"
    assert info["session_options"]["intra_op_num_threads"] == 1
    torch.testing.assert_close(torch.from_numpy(np.load(root / "y.npy")), expected)


def test_a_tampered_bundle_is_refused_before_anything_is_loaded(
    saved: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime

    bundle, *_ = saved
    copy = Path(shutil.copytree(bundle, tmp_path / "bundle"))
    weights = copy / "artifacts" / "onnxruntime_cpu" / "model.onnx.data"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    sessions: list[Any] = []
    monkeypatch.setattr(onnxruntime, "InferenceSession", lambda *a, **k: sessions.append(a))
    with pytest.raises(BundleError, match=r"model\.onnx\.data does not match the SHA-256"):
        dlopt.load_bundle(copy)
    assert sessions == []


def test_a_bundle_whose_plugin_is_not_installed_says_what_to_install(saved: Any) -> None:
    bundle, *_ = saved
    core_only = load_providers(PluginSettings(autoload=False))
    with pytest.raises(BundleLoadError) as info:
        dlopt.load_bundle(bundle, registry=core_only)
    message = str(info.value)
    assert "onnxruntime_cpu" in message
    assert "pip install dlopt-onnxruntime" in message


def test_dlopt_select_bundle_is_loadable(
    model_module: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlopt.cli import main

    monkeypatch.chdir(model_module)  # MODULE:FACTORY names a module in the working directory
    monkeypatch.syspath_prepend(str(model_module))
    bundle = tmp_path / "bundle"
    code = main(
        [
            "select",
            "slow_eager_model:build",
            "--input",
            "4x32",
            "--include",
            "onnxruntime_cpu",
            "--max-measure-time",
            "3",
            "--seed",
            "0",
            "--artifacts",
            str(tmp_path / "plans"),
            "--bundle",
            str(bundle),
        ]
    )
    assert code == 0
    shutil.rmtree(tmp_path / "plans")  # serving needs the bundle only
    model = _build_model(model_module)
    x = torch.randn(4, 32)
    np.save(tmp_path / "x.npy", x.numpy())
    # A fresh process: a serving box that never saw the race, the model or its module.
    proc = run_script(
        LOADER, str(bundle), str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), directory=tmp_path
    )
    info = printed_result(proc)
    assert info["selected"] == "onnxruntime_cpu" and info["export_source"] == "loaded"
    assert info["models_built"] == []
    with torch.inference_mode():
        torch.testing.assert_close(torch.from_numpy(np.load(tmp_path / "y.npy")), model(x))
