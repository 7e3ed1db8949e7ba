"""Fault class: a plan labelled with a lower precision than it actually computes in.

A quantizing plan is validated under its precision's looser limits and reported as a win
in that precision, so it must say how much of the model it quantized: every quantizing
plan reports ``quantized_*`` / ``quantizable_*`` counts and ``quantized_fraction`` in its
metadata, counted from what it built (the quantized ONNX graph, the quantized modules),
and a plan that quantized nothing is refused at build as equal to its full-precision
sibling.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from dlopt.contract.provider import ProviderContext
from dlopt.errors import ProviderBuildError
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadProfile
from dlopt.testing.models import MLP, SmallConvNet

pytestmark = pytest.mark.slow


# ------------------------------------------------------------------ models


class ConvGemmNet(torch.nn.Module):
    """Three convolutions and a Linear head (exported as a Gemm): the issue's conv net."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, padding=1),
            torch.nn.ReLU(),
        )
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


class ConvOnly(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def _model(make: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    torch.manual_seed(0)
    return make().eval()


def _mlp() -> torch.nn.Module:
    return MLP(64, 256, 32, activation="relu")


def _one_linear_one_conv() -> torch.nn.Module:
    return SmallConvNet(channels=64, outputs=32, batch_norm=False)


def _image() -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def _vector() -> torch.Tensor:
    return torch.randn(4, 64, generator=torch.Generator().manual_seed(1))


def _context(tmp_path: Path, x: torch.Tensor) -> ProviderContext:
    return ProviderContext(
        target=ExecutionTarget("cpu"), workload=WorkloadProfile.single(x), artifact_dir=tmp_path
    )


# ------------------------------------------------------------------ ONNX Runtime int8

# Counted here independently of the provider: float compute ops of the exported graph, and
# integer compute ops of the quantized one (Gemm may be rewritten to MatMul first).
_FLOAT_COMPUTE = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Attention", "LSTM", "GRU", "RNN"}
_INTEGER_COMPUTE = {
    "MatMulInteger",
    "ConvInteger",
    "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat",
    "QLinearMatMul",
    "QLinearConv",
    "QGemm",
    "QAttention",
    "DynamicQuantizeLSTM",
}


def _graph_ops(path: Path) -> Counter[str]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return Counter(node.op_type for node in graph.node)


def _ort_int8() -> Any:
    pytest.importorskip("onnxruntime.quantization")
    from dlopt_onnxruntime.plugin import default_providers

    return next(p for p in default_providers() if p.name == "onnxruntime_cpu_int8")


def _assert_counts_match_the_graphs(plan: Any) -> tuple[int, int]:
    meta = plan.metadata
    float_ops = _graph_ops(plan.artifacts["onnx_model"])
    int8_ops = _graph_ops(plan.artifacts["session_model"])
    quantizable = {op: n for op, n in float_ops.items() if op in _FLOAT_COMPUTE}
    quantized = {op: n for op, n in int8_ops.items() if op in _INTEGER_COMPUTE}
    left = {op: n for op, n in int8_ops.items() if op in _FLOAT_COMPUTE}
    assert meta["quantizable_ops"] == sum(quantizable.values())
    assert meta["quantizable_op_types"] == quantizable
    assert meta["quantized_ops"] == sum(quantized.values())
    assert meta["quantized_op_types"] == quantized
    assert meta["unquantized_op_types"] == left
    assert meta["quantized_ops"] + sum(left.values()) == meta["quantizable_ops"]
    assert meta["quantized_fraction"] == pytest.approx(
        meta["quantized_ops"] / meta["quantizable_ops"], abs=1e-4
    )
    return meta["quantized_ops"], meta["quantizable_ops"]


def test_ort_int8_on_a_conv_net_with_a_gemm_head_reports_the_part_it_quantized(
    tmp_path: Path,
) -> None:
    provider = _ort_int8()
    try:
        plan = provider.build(_model(ConvGemmNet), _context(tmp_path, _image()))
    except ProviderBuildError as exc:  # an onnxruntime that leaves the Gemm alone
        assert "quantized 0 of 4 compute ops (Conv x3, Gemm x1)" in str(exc)
        return
    try:
        quantized, quantizable = _assert_counts_match_the_graphs(plan)
        assert quantizable == 4
        assert 0 < quantized < quantizable, "the convolutions stay fp32: only part is int8"
        assert plan.metadata["unquantized_op_types"] == {"Conv": 3}
    finally:
        plan.close()


def test_ort_int8_that_quantizes_nothing_is_refused_as_the_fp32_plan(tmp_path: Path) -> None:
    with pytest.raises(ProviderBuildError) as info:
        _ort_int8().build(_model(ConvOnly), _context(tmp_path, _image()))
    message = str(info.value)
    assert "quantized 0 of 2 compute ops (Conv x2)" in message
    assert "onnxruntime_cpu" in message and "int8_op_types" in message


def test_ort_int8_on_an_mlp_quantizes_every_compute_op(tmp_path: Path) -> None:
    plan = _ort_int8().build(_model(_mlp), _context(tmp_path, _vector()))
    try:
        assert _assert_counts_match_the_graphs(plan) == (2, 2)
        assert plan.metadata["quantized_fraction"] == 1.0
    finally:
        plan.close()


def test_ort_int8_on_one_linear_and_one_conv_reports_half(tmp_path: Path) -> None:
    provider = _ort_int8()
    context = _context(tmp_path, _image())
    plan = provider.build(_model(_one_linear_one_conv), context)
    try:
        assert _assert_counts_match_the_graphs(plan) == (1, 2)
        assert plan.metadata["quantized_fraction"] == 0.5
        first = {k: plan.metadata[k] for k in ("quantized_ops", "quantizable_ops")}
    finally:
        plan.close()
    # Built again from the saved plan directory (no quantization run): the same counts.
    again = provider.build(_model(_one_linear_one_conv), context)
    try:
        assert again.metadata["export_source"] == "manifest"
        assert {k: again.metadata[k] for k in first} == first
    finally:
        again.close()


# ------------------------------------------------------------------ torchao


def _torchao(scheme: str) -> Any:
    pytest.importorskip("torchao")
    from dlopt_torchao import Scheme, TorchAOProvider

    provider = TorchAOProvider(Scheme(scheme))
    # Eager torchao on CPU is left out of races by default; the rule checked here is the
    # build's, so the probe is asked with the option that offers it everywhere.
    context = attrs.evolve(
        _context(Path("."), _vector()), options=provider.options_type(offer_everywhere=True)
    )
    if not provider.probe(context).available:
        pytest.skip(f"{provider.name} is unavailable here")
    return provider


CPU_SCHEMES = ["int8_dynamic", "int8_weight_only", "int4_weight_only"]


@pytest.mark.parametrize("scheme", CPU_SCHEMES)
def test_torchao_scheme_without_linear_layers_is_refused(tmp_path: Path, scheme: str) -> None:
    with pytest.raises(ProviderBuildError) as info:
        _torchao(scheme).build(_model(ConvOnly), _context(tmp_path, _image()))
    assert "quantized 0 of 2 compute layers (Conv2d x2)" in str(info.value)
    assert "eager" in str(info.value)


def test_torchao_scheme_whose_kernel_fits_no_layer_is_refused_by_the_same_rule(
    tmp_path: Path,
) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 5)).eval()
    with pytest.raises(ProviderBuildError) as info:
        _torchao("int4_weight_only").build(model, _context(tmp_path, torch.randn(1, 8)))
    assert "quantized 0 of 1 compute layers (Linear x1)" in str(info.value)


@pytest.mark.parametrize("scheme", ["int8_dynamic", "int8_weight_only"])
def test_torchao_scheme_reports_the_fraction_it_quantized(tmp_path: Path, scheme: str) -> None:
    provider = _torchao(scheme)
    plan = provider.build(_model(_one_linear_one_conv), _context(tmp_path, _image()))
    try:
        meta = plan.metadata
        assert (meta["quantized_layers"], meta["quantizable_layers"]) == (1, 2)
        assert meta["quantized_fraction"] == 0.5
        assert meta["quantizable_layer_types"] == {"Conv2d": 1, "Linear": 1}
        assert meta["quantized_layer_types"] == {"Linear": 1}
        assert meta["quantized_layer_names"] == ["head"]
        # Quantized, not a pass-through: the plan differs from eager.
        with torch.inference_mode():
            assert not torch.equal(plan(_image()), _model(_one_linear_one_conv)(_image()))
    finally:
        plan.close()
    mlp = provider.build(_model(_mlp), _context(tmp_path, _vector()))
    try:
        assert (mlp.metadata["quantized_layers"], mlp.metadata["quantized_fraction"]) == (2, 1.0)
    finally:
        mlp.close()


# ------------------------------------------------------------------ declared schemes


def test_every_shipped_integer_plan_declares_how_it_scales_activations():
    """The build schedule spares the other static int8 plans when one fails far over its
    limits (docs/selection.md): each shipped int8 plan must say which scheme it is."""
    from dlopt.plugins.discovery import load_providers

    declared = {
        info.name: getattr(getattr(info.provider, "quantization", None), "value", None)
        for info in load_providers().providers
        if getattr(info.provider, "precision", None) in ("int8", "int4")
    }
    expected = {
        "onnxruntime_cpu_int8": "dynamic",
        "onnxruntime_cpu_int8_static": "static",
        "openvino_cpu_int8": "static",
        "torchao_pt2e_int8_static": "static",
        "torchao_int8_dynamic_inductor": "dynamic",
        "torchao_int8_weight_only_inductor": "weight_only",
    }
    shipped = {name: declared[name] for name in expected if name in declared}
    assert shipped == {name: expected[name] for name in shipped}
    assert len(shipped) >= 3, f"too few shipped int8 plans installed: {sorted(declared)}"
