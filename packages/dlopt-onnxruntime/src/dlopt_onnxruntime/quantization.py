"""Int8 quantization with ONNX Runtime's tools, and what it did, counted from the graphs.

A plan labelled int8 is validated under the int8 limits and reported as an int8 result,
so it says how much of the model computes in int8: the compute ops of the exported fp32
graph (the denominator), the integer compute ops of the quantized graph, and the float
compute ops it left. ``quantize_dynamic`` rewrites Gemm as MatMul + Add before
quantizing, so integer ops are counted by their own types, not mapped back to one float
type. ``quantize_static`` in QDQ format keeps the float op between DequantizeLinear
inputs (ONNX Runtime fuses the group into QLinearConv/QLinearMatMul when it optimizes the
session); such an op is counted as ``"Conv (QDQ)"``.

Static quantization calibrates activation ranges on input batches
(:class:`CalibrationSet`): the workload's own prepared inputs, plus an optional ``.npz``
file read without pickle.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import field, frozen

from dlopt.plugin import PreparedCase, ProviderBuildError, iter_tensors, read_npz
from dlopt_onnxruntime.export import InputLayout, model_files, summarize_error

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


#: How a float compute op that runs on QDQ inputs is named in the counts.
QDQ_SUFFIX = " (QDQ)"


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


def _load_graph(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph


def op_counts(path: Path) -> Counter[str]:
    """Node count per op type of the ONNX model at ``path`` (weights are not loaded)."""
    return Counter(node.op_type for node in _nodes(_load_graph(path)))


def coverage(float_model: Path, quantized_model: Path) -> QuantizationCoverage:
    """Count what quantizing ``float_model`` into ``quantized_model`` changed.

    A float compute op of the quantized graph whose data and weight inputs both come from
    DequantizeLinear nodes (QDQ format) counts as quantized, under ``"<op> (QDQ)"``.
    """
    before = op_counts(float_model)
    nodes = list(_nodes(_load_graph(quantized_model)))
    dequantized = {
        out for node in nodes if node.op_type == "DequantizeLinear" for out in node.output
    }
    quantized: Counter[str] = Counter()
    unquantized: Counter[str] = Counter()
    for node in nodes:
        if node.op_type in INTEGER_COMPUTE_OPS:
            quantized[node.op_type] += 1
        elif node.op_type in FLOAT_COMPUTE_OPS:
            if len(node.input) >= 2 and all(name in dequantized for name in node.input[:2]):
                quantized[node.op_type + QDQ_SUFFIX] += 1
            else:
                unquantized[node.op_type] += 1
    return QuantizationCoverage(
        quantizable={op: n for op, n in before.items() if op in FLOAT_COMPUTE_OPS},
        quantized=quantized,
        unquantized=unquantized,
    )


# ---------------------------------------------------------------- calibration data


@frozen(eq=False)
class CalibrationSet:
    """Input batches the static plan calibrates activation ranges on, by input name."""

    #: One feed per batch: ONNX input name -> array.
    batches: tuple[dict[str, Any], ...]
    #: How many batches came from the workload's cases, and from the calibration file.
    workload_batches: int
    file_batches: int = 0
    file: str | None = None

    def digest(self) -> str:
        """A content hash of every batch: a saved plan is reused only for the same data."""
        digest = hashlib.blake2b(digest_size=16)
        for batch in self.batches:
            for name, array in sorted(batch.items()):
                digest.update(f"{name}:{array.dtype}:{array.shape}".encode())
                digest.update(memoryview(array.tobytes()))
        return digest.hexdigest()

    def record(self) -> dict[str, Any]:
        """The plan metadata entry (strict JSON)."""
        return {
            "workload_batches": self.workload_batches,
            "file": self.file,
            "file_batches": self.file_batches,
            "digest": self.digest(),
        }

    def reader(self, wanted: Sequence[str]) -> _BatchReader:
        """An ONNX Runtime calibration data reader feeding the inputs a model takes."""
        keep = set(wanted)
        return _BatchReader([{k: v for k, v in b.items() if k in keep} for b in self.batches])


class _BatchReader:
    """``CalibrationDataReader`` by its protocol (``get_next``; ONNX Runtime's abstract
    class accepts any such object), so onnxruntime is not imported to define it."""

    def __init__(self, batches: list[dict[str, Any]]) -> None:
        self._batches = iter(batches)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._batches, None)


def calibration_set(
    cases: Sequence[PreparedCase], layout: InputLayout, file: str | None = None
) -> CalibrationSet:
    """Every prepared case's inputs as one batch, then each entry of ``file`` (``.npz``).

    The file feeds a model with one input tensor: each entry is one batch of it, of its
    dtype, with the sizes of the dimensions that do not vary across the workload.
    """
    batches = []
    for case in cases:
        tensors = iter_tensors((case.args, case.kwargs))
        batches.append(
            {
                name: tensor.detach().cpu().contiguous().numpy()
                for name, tensor in zip(layout.names, tensors)
            }
        )
    if file is None:
        return CalibrationSet(tuple(batches), len(batches))
    extra = _read_calibration_file(Path(file), layout)
    return CalibrationSet(
        (*batches, *({layout.names[0]: array} for array in extra)),
        len(batches),
        len(extra),
        Path(file).name,
    )


def _read_calibration_file(path: Path, layout: InputLayout) -> list[Any]:
    option = f"calibration_file {str(path)!r}"
    if len(layout.names) != 1:
        raise ProviderBuildError(
            f"{option}: a calibration file feeds a model with one input tensor; this model "
            f"takes {len(layout.names)} ({', '.join(layout.names)}). Add calibration cases "
            "to the workload instead (every case is calibrated on)"
        )
    dtype, shape = layout.dtypes[0], layout.shapes[0]
    expected = ", ".join("any" if s is None else str(s) for s in shape)
    arrays = []
    for key, array in read_npz(path, where=option, error=ProviderBuildError):
        fits = array.ndim == len(shape) and all(
            s is None or s == n for s, n in zip(shape, array.shape)
        )
        if array.dtype.name != dtype or not fits:
            raise ProviderBuildError(
                f"{option}: entry {key!r} is {array.dtype.name} of shape "
                f"{tuple(array.shape)}, but the model's input is {dtype} of shape "
                f"({expected}) over this workload; save batches like the "
                "workload's inputs (array.astype(...) for the dtype)"
            )
        arrays.append(array)
    if not arrays:
        raise ProviderBuildError(f"{option} holds no arrays; save one entry per batch")
    return arrays


# ---------------------------------------------------------------- quantizing


class _DropMessage(logging.Filter):
    """Drops root-logger records ONNX Runtime's quantizers print on every call."""

    def __init__(self, *texts: str) -> None:
        super().__init__()
        self.texts = texts

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in self.texts)


def _quietly(what: str, run: Any) -> None:
    # quantize_dynamic/static log a pre-processing tip (and, on a QDQ model, an
    # "already quantized?" note) on the root logger on every call.
    quiet = _DropMessage("pre-processing before quantization", "already quantized")
    logging.getLogger().addFilter(quiet)
    try:
        run()
    except ProviderBuildError:
        raise
    except Exception as exc:
        raise ProviderBuildError(f"{what} failed: {summarize_error(exc)}") from exc
    finally:
        logging.getLogger().removeFilter(quiet)


def quantize_dynamic_int8(
    source: Path, target: Path, *, op_types: Sequence[str], per_channel: bool, reduce_range: bool
) -> Path:
    """``source`` with ``op_types`` nodes dynamically quantized (int8 weights) -> ``target``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for file in model_files(target):
        file.unlink()
    _quietly(
        "int8 dynamic quantization",
        lambda: quantize_dynamic(
            source,
            target,
            op_types_to_quantize=list(op_types),
            per_channel=per_channel,
            reduce_range=reduce_range,
            weight_type=QuantType.QInt8,
            use_external_data_format=True,
        ),
    )
    return target


def quantize_static_int8(
    source: Path,
    target: Path,
    calibration: CalibrationSet,
    *,
    op_types: Sequence[str],
    per_channel: bool,
    reduce_range: bool,
) -> Path:
    """``source`` with ``op_types`` nodes quantized in QDQ format -> ``target``.

    Activation ranges come from running ``calibration`` through the fp32 model (MinMax).
    Activations are uint8 and weights int8 (U8S8), ONNX Runtime's advice for x86 CPUs;
    ``reduce_range`` (7-bit weights) is for x86 without VNNI, where u8 x s8 saturates.
    """
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    inputs = [i.name for i in _load_graph(source).input]
    for file in model_files(target):
        file.unlink()
    _quietly(
        "int8 static quantization",
        lambda: quantize_static(
            source,
            target,
            calibration.reader(inputs),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(op_types),
            per_channel=per_channel,
            reduce_range=reduce_range,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            use_external_data_format=True,
        ),
    )
    return target
