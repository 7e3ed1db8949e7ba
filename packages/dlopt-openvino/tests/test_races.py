"""Every OpenVINO CPU plan races and validates on four models: the demo conv net, an MLP,
a transformer encoder layer and a tiny random Hugging Face BertModel called with keyword
inputs. One short race per model (module-scoped), against eager fp32.

Timing on a shared CPU decides nothing here: the tests check that each plan built,
validated against eager within its precision's limits and was measured, and what it
recorded, never which plan won.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dlopt import InferenceOptimizer, OptimizationPolicy, WorkloadCase, WorkloadProfile
from dlopt.cli.demo import demo_convnet, demo_mlp
from dlopt.measurement import MeasurementPolicy
from dlopt.plugin import ExecutionTarget, ProviderContext, iter_tensors
from dlopt_openvino.plugin import default_providers
from dlopt_openvino.probe import int8_saturates

pytestmark = pytest.mark.slow

CPU_PLANS = ("openvino_cpu", "openvino_cpu_bf16", "openvino_cpu_int8")


def _race(model: torch.nn.Module, workload: WorkloadProfile, artifacts: Path) -> Any:
    policy = OptimizationPolicy(
        include=CPU_PLANS,
        # A few rounds: enough to measure every plan once validated, no more.
        measurement=MeasurementPolicy(
            max_time_s=1.0, max_rounds=3, seed=5, bootstrap_resamples=0, warmup_max_time_s=0.3
        ),
        exhaustive=True,  # every plan is built and measured, whatever its prior
    )
    return InferenceOptimizer("cpu", policy, artifact_dir=artifacts).select(model, workload)


def _encoder() -> tuple[torch.nn.Module, WorkloadProfile]:
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    gen = torch.Generator().manual_seed(1)
    return model, WorkloadProfile(
        name="encoder",
        cases=tuple(
            WorkloadCase(f"batch-{n}", args=(torch.randn(n, 16, 64, generator=gen),))
            for n in (1, 4)
        ),
    )


def _bert() -> tuple[torch.nn.Module, WorkloadProfile]:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    gen = torch.Generator().manual_seed(2)

    def case(batch: int) -> WorkloadCase:
        ids = torch.randint(0, 128, (batch, 16), generator=gen)
        mask = torch.ones(batch, 16, dtype=torch.long)
        mask[:, 12:] = 0  # padding: the mask changes the outputs
        return WorkloadCase(f"batch-{batch}", kwargs={"input_ids": ids, "attention_mask": mask})

    return model, WorkloadProfile(name="bert", cases=(case(1), case(4)))


MODELS = {
    "demo_convnet": demo_convnet,
    "mlp": demo_mlp,
    "encoder": _encoder,
    "bert": _bert,
}


@pytest.fixture(scope="module", params=list(MODELS))
def raced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    model, workload = MODELS[request.param]()
    decision = _race(model, workload, tmp_path_factory.mktemp(request.param))
    yield request.param, model, workload, decision
    decision.close()


def test_every_cpu_plan_validates_and_is_measured(raced: Any) -> None:
    name, _, workload, decision = raced
    by_name = {c.name: c for c in decision.report.candidates}
    for plan in CPU_PLANS:
        evidence = by_name[plan]
        if plan == "openvino_cpu_bf16" and evidence.status.value == "unavailable":
            # An AVX2-only CPU: the probe says why (the probe logic is tested elsewhere).
            assert "AVX512-BF16" in (evidence.availability_reason or ""), evidence
            continue
        assert evidence.error is None, f"{name}: {plan}: {evidence.error}"
        assert (
            evidence.validation.first_calls is not None and evidence.validation.first_calls.passed
        ), (name, plan)
        assert [c.name for c in evidence.cases] == [c.name for c in workload.cases]
        assert all(c.latency is not None for c in evidence.cases), (name, plan)
        meta = evidence.metadata
        # One model serves both batch sizes: the batch is the one dynamic dimension.
        assert list(meta["dynamic_dims"].values()) == [[0]] * len(meta["input_names"]), meta
        assert meta["compile_config"]["PERFORMANCE_HINT"] == "LATENCY"
        assert meta["model_cache"] == "model_cache"


def test_int8_plan_says_what_it_quantized(raced: Any) -> None:
    name, _, _, decision = raced
    int8 = decision.report.candidate("openvino_cpu_int8")
    meta = int8.metadata
    assert meta["quantization"]["calibration_cases"] == ["batch-1", int8.cases[1].name]
    assert 0 < meta["quantized_ops"] <= meta["quantizable_ops"], meta
    expected_type = "transformer" if name in ("encoder", "bert") else "default"
    assert meta["quantization"]["model_type"] == expected_type
    # Every layer's sums kept from saturating where the CPU has no VNNI or AMX.
    fix = "enable" if int8_saturates() else "first_layer_only"
    assert meta["quantization"]["overflow_fix"] == fix


def test_the_decision_serves_like_the_model(raced: Any) -> None:
    _, model, workload, decision = raced
    case = workload.cases[-1]
    with torch.inference_mode():
        got = decision(*case.args, **case.kwargs)
        expected = model(*case.args, **case.kwargs)
    for g, e in zip(iter_tensors(got), iter_tensors(expected)):
        torch.testing.assert_close(g, e, rtol=0.1, atol=0.1)


def test_bert_plan_returns_the_model_output_class(tmp_path: Path) -> None:
    model, workload = _bert()
    provider = next(p for p in default_providers() if p.name == "openvino_cpu")
    context = ProviderContext(
        target=ExecutionTarget("cpu"), workload=workload, artifact_dir=tmp_path
    )
    with provider.build(model, context) as plan:
        case = workload.cases[1]
        with torch.inference_mode():
            got = plan(**case.kwargs)
            expected = model(**case.kwargs)
        assert type(got) is type(expected)
        assert list(got.keys()) == list(expected.keys())
        torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state)
        # The saved form names the class, so a bundle can rebuild it where it is imported.
        assert "BaseModelOutputWithPooling" in plan.metadata["outputs"]["treespec"]
