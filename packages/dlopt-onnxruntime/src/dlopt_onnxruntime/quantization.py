"""What int8 quantization did to a model, counted from the ONNX graphs themselves.

A plan labelled int8 is validated under the int8 limits and reported as an int8 result,
so it says how much of the model computes in int8: the compute ops of the exported fp32
graph (the denominator), the integer compute ops of the quantized graph, and the float
compute ops it left. ``quantize_dynamic`` rewrites Gemm as MatMul + Add before
quantizing, so integer ops are counted by their own types, not mapped back to one float
type.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from attrs import field, frozen

#: Float ops that carry a model's multiply-accumulate work (what int8 could take over).
FLOAT_COMPUTE_OPS = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "Gemm",
        "MatMul",
        "Einsum",
        "Attention",
        "MultiHeadAttention",
        "LSTM",
        "GRU",
        "RNN",
    }
)

#: Integer compute ops written by ONNX Runtime's quantizers (dynamic, QOperator, fused).
#: DynamicQuantizeLinear only converts activations and is not a compute op.
INTEGER_COMPUTE_OPS = frozenset(
    {
        "MatMulInteger",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "QLinearMatMul",
        "QGemm",
        "ConvInteger",
        "QLinearConv",
        "QLinearConvTranspose",
        "QAttention",
        "DynamicQuantizeLSTM",
    }
)


def _counts(value: Mapping[str, int]) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(value.items()) if v}


def describe(counts: Mapping[str, int]) -> str:
    """``"Conv x3, Gemm x1"`` (``"none"`` when empty)."""
    return ", ".join(f"{op} x{n}" for op, n in sorted(counts.items())) or "none"


@frozen
class QuantizationCoverage:
    """Compute ops of the fp32 graph, and which of them the quantized graph runs in int8."""

    #: Compute op types of the fp32 graph.
    quantizable: dict[str, int] = field(converter=_counts)
    #: Integer compute op types of the quantized graph.
    quantized: dict[str, int] = field(converter=_counts)
    #: Float compute op types left in the quantized graph.
    unquantized: dict[str, int] = field(converter=_counts)

    @property
    def quantizable_ops(self) -> int:
        return sum(self.quantizable.values())

    @property
    def quantized_ops(self) -> int:
        return sum(self.quantized.values())

    @property
    def fraction(self) -> float:
        """Share of the fp32 graph's compute ops that run in int8 (0.0 when it has none)."""
        if not self.quantizable_ops:
            return 0.0
        return round(min(1.0, self.quantized_ops / self.quantizable_ops), 4)

    def metadata(self) -> dict[str, Any]:
        """The plan metadata entries (strict JSON)."""
        return {
            "quantized_ops": self.quantized_ops,
            "quantizable_ops": self.quantizable_ops,
            "quantized_fraction": self.fraction,
            "quantized_op_types": dict(self.quantized),
            "quantizable_op_types": dict(self.quantizable),
            "unquantized_op_types": dict(self.unquantized),
        }

    def summary(self) -> str:
        """``"quantized 1 of 4 compute ops (Conv x3, Gemm x1)"``."""
        return (
            f"quantized {self.quantized_ops} of {self.quantizable_ops} compute ops "
            f"({describe(self.quantizable)})"
        )


def _nodes(graph: Any) -> Iterator[Any]:
    """Every node of ``graph`` and of the subgraphs its control-flow nodes hold."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)


def op_counts(path: Path) -> Counter[str]:
    """Node count per op type of the ONNX model at ``path`` (weights are not loaded)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return Counter(node.op_type for node in _nodes(model.graph))


def coverage(float_model: Path, quantized_model: Path) -> QuantizationCoverage:
    """Count what quantizing ``float_model`` into ``quantized_model`` changed."""
    before = op_counts(float_model)
    after = op_counts(quantized_model)
    return QuantizationCoverage(
        quantizable={op: n for op, n in before.items() if op in FLOAT_COMPUTE_OPS},
        quantized={op: n for op, n in after.items() if op in INTEGER_COMPUTE_OPS},
        unquantized={op: n for op, n in after.items() if op in FLOAT_COMPUTE_OPS},
    )
