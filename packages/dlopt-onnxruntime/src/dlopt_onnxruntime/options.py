"""The options users can set per ONNX Runtime plan.

Pass them per plan name: ``OptimizationPolicy(plan_options={"onnxruntime_cpu":
{"graph_optimization_level": "basic", "intra_op_threads": 2}})``; ``dlopt providers
--options onnxruntime_cpu`` lists them. They are recorded in the report, and a loaded
plan gets the same session settings.
"""

from __future__ import annotations

from typing import Any

from attrs import field, frozen
from attrs.validators import ge, optional

from dlopt.plugin import one_of

#: ``graph_optimization_level`` values -> ONNX Runtime's ``GraphOptimizationLevel`` names.
OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
EXPORTER_CHOICES = ("auto", "dynamo", "torchscript")
#: Node types the int8 plan quantizes by default ("MatMul" covers Gemm: quantize_dynamic
#: rewrites Gemm as MatMul + Add). Conv is left out on purpose: ONNX Runtime's ConvInteger
#: ran the demo conv net 8x slower than fp32 Conv on x86 here (it passed the int8 limits).
DEFAULT_INT8_OP_TYPES = ("MatMul", "Attention", "LSTM")
#: Node types the static int8 plan quantizes with calibrated QDQ: convolutions, which
#: dynamic quantization only turns into the slow ConvInteger (QDQ Conv fuses into QLinearConv).
DEFAULT_STATIC_OP_TYPES = ("Conv",)
#: ONNX node types of the convolutions a profiled reference call counts as such: a model
#: that runs none has nothing for static op types within these to quantize.
CONVOLUTION_OP_TYPES = frozenset({"Conv", "ConvTranspose"})
#: Suffix of the calibration file the static int8 plan reads (numpy, without pickle).
CALIBRATION_SUFFIX = ".npz"


def _text_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


def _not_empty(_instance: object, attribute: Any, value: tuple[str, ...]) -> None:
    if not value:
        raise ValueError(f"{attribute.name} needs at least one ONNX op type, e.g. ['MatMul']")


def _calibration_file(_instance: object, attribute: Any, value: str | None) -> None:
    if value is not None and not value.lower().endswith(CALIBRATION_SUFFIX):
        raise ValueError(
            f"{attribute.name} must name a {CALIBRATION_SUFFIX} file (numpy.savez(path, "
            f"batch_name=array), one calibration batch per entry), not {value!r}"
        )


def _reduce_range_option() -> Any:
    """The int8 plans' ``int8_reduce_range`` option (one definition for both)."""
    return field(
        default=None,
        metadata={
            "help": "7-bit weights; default: on for x86 CPUs without VNNI, where the u8 x s8 "
            "multiply saturates"
        },
    )


@frozen
class OrtOptions:
    """Options of every ONNX Runtime plan."""

    graph_optimization_level: str = field(
        default="all",
        validator=one_of(OPTIMIZATION_LEVELS),
        metadata={
            "help": "ONNX Runtime graph optimizations before the first run: "
            "disable, basic, extended or all"
        },
    )
    intra_op_threads: int | None = field(
        default=None,
        validator=optional(ge(1)),
        metadata={
            "help": "threads of the session's intra-op pool; default: ExecutionTarget.threads, "
            "else torch.get_num_threads()"
        },
    )
    allow_spinning: bool | None = field(
        default=None,
        metadata={
            "help": "let idle intra-op threads busy-wait after a run "
            "(session.intra_op.allow_spinning); default: off on CPU-side plans, where "
            "spinning slows whatever runs next on those cores, ONNX Runtime's default "
            "elsewhere"
        },
    )
    exporter: str = field(
        default="auto",
        validator=one_of(EXPORTER_CHOICES),
        metadata={
            "help": "ONNX exporter: auto (TorchScript, then dynamo when TorchScript fails or "
            "its model does not serve every case), torchscript or dynamo"
        },
    )
    opset: int | None = field(
        default=None,
        validator=optional(ge(7)),
        metadata={"help": "ONNX opset to export with; default: the exporter's (TorchScript: 17)"},
    )
    session_config: dict[str, str] = field(
        factory=dict,
        converter=_text_map,
        metadata={"help": "extra ONNX Runtime session config entries (key -> value), applied last"},
    )


@frozen
class OrtInt8Options(OrtOptions):
    """Options of the dynamically quantized CPU plan: every plan option plus int8's own."""

    int8_op_types: tuple[str, ...] = field(
        default=DEFAULT_INT8_OP_TYPES,
        converter=tuple,
        validator=_not_empty,
        metadata={
            "help": "ONNX node types quantize_dynamic quantizes (MatMul covers Gemm); add "
            "Conv for convolutions (ConvInteger is often slower than fp32 Conv on x86)"
        },
    )
    int8_per_channel: bool = field(
        default=False, metadata={"help": "quantize weights per output channel"}
    )
    int8_reduce_range: bool | None = _reduce_range_option()


@frozen
class OrtInt8StaticOptions(OrtOptions):
    """Options of the statically quantized CPU plan: calibrated QDQ for convolutions,
    dynamic quantization for MatMul/Gemm, and the calibration data."""

    int8_static_op_types: tuple[str, ...] = field(
        default=DEFAULT_STATIC_OP_TYPES,
        converter=tuple,
        validator=_not_empty,
        metadata={
            "help": "ONNX node types quantized statically (QDQ, activation ranges calibrated "
            "on the workload's inputs); ONNX Runtime fuses QDQ Conv into QLinearConv"
        },
    )
    int8_dynamic_op_types: tuple[str, ...] = field(
        default=DEFAULT_INT8_OP_TYPES,
        converter=tuple,
        metadata={
            "help": "ONNX node types then quantized dynamically, as onnxruntime_cpu_int8 does "
            "(MatMul covers Gemm); [] for none"
        },
    )
    int8_per_channel: bool = field(
        default=True,
        metadata={"help": "quantize the statically quantized weights per output channel"},
    )
    int8_reduce_range: bool | None = _reduce_range_option()
    calibration_file: str | None = field(
        default=None,
        validator=optional(_calibration_file),
        metadata={
            "help": "a .npz file of more calibration batches for a model with one input "
            "tensor (one entry per batch, read without pickle); the workload's own inputs "
            "are always used"
        },
    )

    def __attrs_post_init__(self) -> None:
        # quantize_dynamic first rewrites every Gemm as Transpose + MatMul + Add, which
        # breaks a QDQ Gemm apart; and one op can be quantized one way only.
        static, dynamic = set(self.int8_static_op_types), set(self.int8_dynamic_op_types)
        if "Gemm" in static and dynamic:
            raise ValueError(
                "int8_static_op_types has Gemm, so int8_dynamic_op_types must be []: "
                "dynamic quantization rewrites every Gemm and would undo the static one"
            )
        if "MatMul" in static and "MatMul" in dynamic:
            raise ValueError(
                "MatMul is in both int8_static_op_types and int8_dynamic_op_types; "
                "remove it from one of them"
            )
