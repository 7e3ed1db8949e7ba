"""Real Torch-TensorRT builds; they need the SDK and a CUDA GPU and skip with the probe's
reason elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlopt.plugin import ExecutionTarget, Precision, ProviderContext, WorkloadCase, WorkloadProfile
from dlopt.testing.models import SmallConvNet
from dlopt_tensorrt import TensorRTOptions, TensorRTProvider, load_engine

pytestmark = pytest.mark.gpu


def _require(provider: TensorRTProvider) -> None:
    availability = provider.probe(ProviderContext(target=ExecutionTarget("cuda")))
    if not availability.available:
        pytest.skip(f"{provider.name} unavailable here: {availability.reason}")


def _setup(tmp_path: Path) -> tuple[torch.nn.Module, WorkloadProfile, ProviderContext]:
    torch.manual_seed(0)
    model = SmallConvNet(channels=16, outputs=10, batch_norm=False).eval().cuda()
    workload = WorkloadProfile(
        (
            WorkloadCase("b1", args=(torch.randn(1, 3, 32, 32, device="cuda"),), weight=3),
            WorkloadCase("b8", args=(torch.randn(8, 3, 32, 32, device="cuda"),), weight=1),
        )
    )
    context = ProviderContext(
        target=ExecutionTarget("cuda"), workload=workload, artifact_dir=tmp_path
    )
    return model, workload, context


@pytest.mark.parametrize(
    ("precision", "tol"), [(Precision.FP32, 1e-4), (Precision.FP16, 2e-2), (Precision.BF16, 5e-2)]
)
def test_engine_serves_every_case(tmp_path: Path, precision: Precision, tol: float) -> None:
    provider = TensorRTProvider(precision)
    _require(provider)
    model, workload, context = _setup(tmp_path)
    with provider.build(model, context) as plan, torch.inference_mode():
        # Shapes between the cases run on the same dynamic-batch engine.
        for x in [*(c.args[0] for c in workload.cases), torch.randn(5, 3, 32, 32, device="cuda")]:
            torch.testing.assert_close(plan(x).float(), model(x), rtol=tol, atol=tol)


def test_saved_engine_serves_every_case_shape(tmp_path: Path) -> None:
    """The loaded program keeps the engine's dynamic batch: every case's shape and one
    between them run, not only the max shape it was saved with."""
    provider = TensorRTProvider(Precision.FP16)
    _require(provider)
    model, workload, context = _setup(tmp_path)
    context.options = TensorRTOptions(save_engine=True)
    with provider.build(model, context) as plan, torch.inference_mode():
        loaded = load_engine(plan.artifacts["engine"])
        for x in [*(c.args[0] for c in workload.cases), torch.randn(5, 3, 32, 32, device="cuda")]:
            torch.testing.assert_close(loaded(x), plan(x))


def test_target_without_an_index_builds_on_the_current_device(tmp_path: Path) -> None:
    """Target ``cuda`` (no index) once became ``cuda:None`` inside Torch-TensorRT."""
    provider = TensorRTProvider(Precision.FP32)
    _require(provider)
    model, workload, context = _setup(tmp_path)
    assert context.target.device == "cuda"
    with provider.build(model, context) as plan, torch.inference_mode():
        out = plan(workload.cases[0].args[0])
    assert out.device == torch.device("cuda", torch.cuda.current_device())
    assert plan.metadata["compile_options"]["device"] == f"cuda:{torch.cuda.current_device()}"
    # The timing cache is the plan's own, not a file in /tmp shared by every build.
    timing_cache = Path(plan.metadata["compile_options"]["timing_cache_path"])
    assert timing_cache.parent == tmp_path / provider.name
