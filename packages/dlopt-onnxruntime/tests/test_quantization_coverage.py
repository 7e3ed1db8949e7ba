"""Counting what int8 quantization did, on hand-built ONNX graphs (no export, no session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlopt_onnxruntime.quantization import QuantizationCoverage, coverage, describe

onnx = pytest.importorskip("onnx")
helper = onnx.helper


def _save(path: Path, nodes: list, subgraph_nodes: list | None = None) -> Path:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    if subgraph_nodes is not None:
        branch = helper.make_graph(subgraph_nodes, "branch", [], [y])
        nodes = [
            *nodes,
            helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch),
        ]
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y])), str(path))
    return path


def test_counts_compute_ops_inside_control_flow_subgraphs(tmp_path: Path) -> None:
    before = _save(
        tmp_path / "fp32.onnx",
        [helper.make_node("Conv", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["c"])],
        [helper.make_node("Gemm", ["x", "w2"], ["y"])],
    )
    after = _save(
        tmp_path / "int8.onnx",
        [
            helper.make_node("Conv", ["x", "w"], ["a"]),
            helper.make_node("DynamicQuantizeLinear", ["a"], ["q", "s", "z"]),
            helper.make_node("Relu", ["a"], ["c"]),
        ],
        [helper.make_node("MatMulInteger", ["x", "w2"], ["y"])],
    )
    found = coverage(before, after)
    # One Gemm in each of the If's two branches.
    assert found.quantizable == {"Conv": 1, "Gemm": 2}
    assert found.quantized == {"MatMulInteger": 2}  # DynamicQuantizeLinear is not compute
    assert found.unquantized == {"Conv": 1}
    meta = found.metadata()
    assert (meta["quantized_ops"], meta["quantizable_ops"]) == (2, 3)
    assert meta["quantized_fraction"] == 0.6667
    assert found.summary() == "quantized 2 of 3 compute ops (Conv x1, Gemm x2)"


def test_a_graph_without_compute_ops_has_fraction_zero() -> None:
    empty = QuantizationCoverage({}, {}, {})
    assert empty.fraction == 0.0 and describe(empty.quantizable) == "none"


def test_a_compute_op_between_dequantize_nodes_counts_as_qdq(tmp_path: Path) -> None:
    before = _save(
        tmp_path / "fp32.onnx",
        [helper.make_node("Conv", ["x", "w"], ["a"]), helper.make_node("Conv", ["a", "w2"], ["y"])],
    )
    after = _save(
        tmp_path / "qdq.onnx",
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
            helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"]),
            # Activation and weight both dequantized: ONNX Runtime fuses it (QLinearConv).
            helper.make_node("Conv", ["xd", "wd"], ["a"]),
            # Only the weight dequantized: the convolution still computes in fp32.
            helper.make_node("Conv", ["a", "wd"], ["y"]),
        ],
    )
    found = coverage(before, after)
    assert found.quantized == {"Conv (QDQ)": 1}
    assert found.unquantized == {"Conv": 1}
    assert found.summary() == "quantized 1 of 2 compute ops (Conv x2)"
