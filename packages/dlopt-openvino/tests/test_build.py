"""Building OpenVINO plans: what is refused and why, what the saved files hold, and the
output structures a saved plan can describe."""

from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from dlopt.plugin import (
    ExecutionTarget,
    Precision,
    ProviderBuildError,
    ProviderContext,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt.testing.models import Elementwise
from dlopt_openvino import OpenVinoProvider
from dlopt_openvino.outputs import NotSavable, OutputStructure, to_json


def _context(tmp: Path, *cases: WorkloadCase) -> ProviderContext:
    return ProviderContext(
        target=ExecutionTarget("cpu"), workload=WorkloadProfile(cases=cases), artifact_dir=tmp
    )


CPU = OpenVinoProvider("openvino_cpu", "CPU", Precision.FP32)
INT8 = OpenVinoProvider("openvino_cpu_int8", "CPU", Precision.INT8)


class Unconvertible(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.zeta(x, x)


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.linear(x) * scale


def test_a_model_openvino_cannot_convert_is_refused_with_its_reason(tmp_path: Path) -> None:
    context = _context(tmp_path, WorkloadCase("a", args=(torch.rand(2, 3) + 1.5,)))
    with pytest.raises(ProviderBuildError) as info:
        CPU.build(Unconvertible(), context)
    message = str(info.value)
    assert message.startswith("OpenVINO could not convert the model: OpConversionFailure:")
    assert "No conversion rule found for operations: aten::special_zeta" in message
    assert "src/frontends" not in message  # OpenVINO's source locations are left out


def test_conversion_traces_once_without_torchs_trace_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trace check calls the model and its trace again and imports
    # torch.distributed.tensor for the comparison; the race validates every case anyway.
    traces: list[dict[str, Any]] = []
    trace = torch.jit.trace

    def recorded(*args: Any, **kwargs: Any) -> Any:
        traces.append(kwargs)
        return trace(*args, **kwargs)

    monkeypatch.setattr(torch.jit, "trace", recorded)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).eval()
    x = torch.randn(3, 4)
    plan = CPU.build(model, _context(tmp_path, WorkloadCase("a", args=(x,))))
    try:
        assert [t.get("check_trace") for t in traces] == [False]
        torch.testing.assert_close(plan(x), model(x), rtol=1e-4, atol=1e-5)
    finally:
        plan.close()


def test_a_model_in_training_mode_is_refused(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    context = _context(tmp_path, WorkloadCase("a", args=(torch.randn(2, 4),)))
    with pytest.raises(ProviderBuildError, match=r"1 is in training mode.*model\.eval\(\)"):
        CPU.build(model, context)


def test_conversion_leaves_the_callers_training_flags_alone(tmp_path: Path) -> None:
    """OpenVINO's tracer calls eval() on what it converts; a module in training mode
    that computes the same either way (a Linear) keeps its flag."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    assert model.training
    with CPU.build(model, _context(tmp_path, WorkloadCase("a", args=(torch.randn(2, 4),)))):
        pass
    assert all(module.training for module in model.modules())


def test_cases_that_differ_in_a_non_tensor_argument_are_refused(tmp_path: Path) -> None:
    x = torch.randn(2, 4)
    context = _context(
        tmp_path,
        WorkloadCase("a", args=(x,), kwargs={"scale": 1.0}),
        WorkloadCase("b", args=(x,), kwargs={"scale": 2.0}),
    )
    with pytest.raises(ProviderBuildError, match="bakes non-tensor arguments in as constants"):
        CPU.build(Scaled().eval(), context)


def test_inputs_openvino_cannot_take_are_refused(tmp_path: Path) -> None:
    context = _context(tmp_path, WorkloadCase("a", args=(torch.randn(2, 4).bfloat16(),)))
    with pytest.raises(ProviderBuildError, match=r"input tensor 0 is torch\.bfloat16"):
        CPU.build(Scaled().eval().bfloat16(), context)


def test_int8_refuses_a_model_without_compute_layers(tmp_path: Path) -> None:
    context = _context(tmp_path, WorkloadCase("a", args=(torch.randn(2, 8),)))
    with pytest.raises(
        ProviderBuildError, match="has no layer of the types int8 runs in"
    ) as refused:
        INT8.build(Elementwise(), context)
    # The reason names the layer types OpenVINO did run (fused elementwise work comes back
    # as a Subgraph), so it stays true whatever the model and the CPU.
    assert re.search(r"the layer types it ran: (\w+, )*Input", str(refused.value))


def test_the_saved_ir_keeps_fp32_weights(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256)).eval()
    context = _context(tmp_path, WorkloadCase("a", args=(torch.randn(2, 256),)))
    with CPU.build(model, context) as plan:
        weights = plan.artifacts["weights"].stat().st_size
        assert weights >= 4 * (256 * 256 + 256), weights  # not compressed to fp16
        assert plan.artifacts["model_cache"].is_dir()
        assert any(plan.artifacts["model_cache"].iterdir()), "no compiled-model blob was kept"
        assert plan.metadata["layer_precisions"] == {"FullyConnected": {"f32": 1}}


@pytest.mark.parametrize(
    ("precision", "table", "needle"),
    [
        (Precision.FP32, {"FullyConnected": {"bf16": 1, "f32": 1}}, "1 of 2 compute layers"),
        (Precision.BF16, {"Convolution": {"f32": 3}}, "none of the 3 compute layers in bf16"),
        (Precision.INT8, {"MatMul": {"f32": 2}}, "quantized none of the 2 compute layers"),
    ],
)
def test_a_plan_not_computing_in_its_precision_is_refused(
    precision: Precision, table: dict[str, dict[str, int]], needle: str
) -> None:
    provider = OpenVinoProvider(f"p_{precision.value}", "CPU", precision)
    with pytest.raises(ProviderBuildError, match=needle):
        provider._check_precisions(table)


def test_int8_coverage_is_reported() -> None:
    table = {"Convolution": {"u8": 3}, "FullyConnected": {"f32": 1}}
    evidence = INT8._check_precisions(table)
    assert evidence["quantized_ops"] == 3 and evidence["quantizable_ops"] == 4
    assert evidence["quantized_fraction"] == 0.75
    assert evidence["quantized_op_types"] == {"Convolution": 3, "FullyConnected": 0}


def test_gpu_and_npu_offer_fp16_only() -> None:
    with pytest.raises(ValueError, match="GPU: fp16"):
        OpenVinoProvider("x", "GPU", Precision.FP32)


# ------------------------------------------------------------------ output structures

Pair = collections.namedtuple("Pair", ["a", "b"])


def test_nested_outputs_round_trip_through_json() -> None:
    reference = {"logits": torch.ones(2, 3), "extra": [torch.zeros(2, dtype=torch.int64), 7, None]}
    rebuilt = OutputStructure.from_json(to_json(reference))
    out = rebuilt([torch.full((2, 3), 5.0), torch.ones(2, dtype=torch.int64)])
    assert list(out) == ["logits", "extra"]
    assert out["extra"][1:] == [7, None]
    assert out["extra"][0].dtype == torch.int64
    # A device that hands back another width is cast to the model's dtype.
    assert rebuilt([torch.ones(2, 3, dtype=torch.float16), torch.ones(2)])["extra"][0].dtype == (
        torch.int64
    )


def test_a_model_output_round_trips_as_its_class() -> None:
    transformers = pytest.importorskip("transformers")
    reference = transformers.modeling_outputs.BaseModelOutputWithPooling(
        last_hidden_state=torch.ones(1, 2, 4), pooler_output=torch.ones(1, 4)
    )
    out = OutputStructure.from_json(to_json(reference))([torch.zeros(1, 2, 4), torch.zeros(1, 4)])
    assert type(out) is type(reference) and list(out.keys()) == list(reference.keys())


def test_structures_json_cannot_describe_say_so() -> None:
    with pytest.raises(NotSavable, match="namedtuple"):
        to_json(Pair(torch.ones(1), torch.ones(1)))


def test_a_saved_type_unknown_here_names_what_to_import() -> None:
    saved = to_json({"a": torch.ones(1)})
    saved["treespec"] = saved["treespec"].replace("builtins.dict", "somepackage.Outputs")
    with pytest.raises(ValueError, match="import the module that defines it"):
        OutputStructure.from_json(saved)


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        ({"ir": "../model.xml"}, "not a plain .xml file name"),
        ({"ir": "model.xml"}, "are missing"),
        ({"ir": "model.xml", "device_type": "GPU"}, "device_type 'GPU'"),
    ],
)
def test_load_refuses_what_it_cannot_trust_or_find(
    tmp_path: Path, metadata: dict[str, Any], needle: str
) -> None:
    saved = {"device_type": "CPU", "precision": "fp32", **metadata}
    context = ProviderContext(target=ExecutionTarget("cpu"), artifact_dir=tmp_path / "load")
    with pytest.raises(ProviderBuildError, match=needle):
        CPU.load(tmp_path, saved, context)
