"""The options users can set per OpenVINO plan.

Pass them per plan name: ``OptimizationPolicy(plan_options={"openvino_cpu":
{"performance_hint": "throughput", "num_streams": 2}})``; ``dlopt providers --options
openvino_cpu`` lists them. They are recorded in the report, and a loaded plan compiles
with the same settings.
"""

from __future__ import annotations

from attrs import field, frozen
from attrs.validators import ge, optional

from dlopt.plugin import one_of

#: ``performance_hint`` values; ``auto`` follows the race's objective.
PERFORMANCE_HINTS = ("auto", "latency", "throughput")
#: ``int8_model_type`` values; ``auto`` picks ``transformer`` for a graph with attention.
MODEL_TYPES = ("auto", "transformer", "default")
#: ``int8_preset`` values (NNCF's ``QuantizationPreset``).
PRESETS = ("performance", "mixed")
#: ``int8_activation_ranges`` values.
ACTIVATION_RANGES = ("minmax", "nncf")
#: ``int8_overflow_fix`` values (NNCF's ``OverflowFix``).
OVERFLOW_FIXES = ("enable", "first_layer_only", "disable")


@frozen
class OpenVinoOptions:
    """Options of every OpenVINO plan."""

    performance_hint: str = field(
        default="auto",
        validator=one_of(PERFORMANCE_HINTS),
        metadata={
            "help": "OpenVINO's performance hint: latency (one stream, every thread on one "
            "call), throughput (several streams, a batched call split across them as "
            "asynchronous infer requests) or auto (throughput for the max_throughput "
            "objective, latency otherwise)"
        },
    )
    num_streams: int | None = field(
        default=None,
        validator=optional(ge(1)),
        metadata={
            "help": "streams under the throughput hint (OpenVINO caps them at the cores); "
            "default: OpenVINO's choice for this device"
        },
    )
    inference_threads: int | None = field(
        default=None,
        validator=optional(ge(1)),
        metadata={
            "help": "CPU threads OpenVINO computes with; default: ExecutionTarget.threads, "
            "else torch.get_num_threads()"
        },
    )
    split_batch: bool = field(
        default=True,
        metadata={
            "help": "under the throughput hint, split a call's batch (dimension 0 of every "
            "input and output) across one asynchronous infer request per stream; false: "
            "one infer request per call"
        },
    )
    model_cache: bool = field(
        default=True,
        metadata={
            "help": "keep OpenVINO's compiled model (its CACHE_DIR blob) with the plan, so a "
            "plan cache hit or load_bundle imports it instead of compiling again"
        },
    )


@frozen
class OpenVinoInt8Options(OpenVinoOptions):
    """Options of the int8 plan: every plan option plus NNCF's post-training quantization."""

    int8_preset: str = field(
        default="performance",
        validator=one_of(PRESETS),
        metadata={
            "help": "NNCF quantization preset: performance (symmetric weights and "
            "activations) or mixed (asymmetric activations: closer on ReLU-free models)"
        },
    )
    int8_model_type: str = field(
        default="auto",
        validator=one_of(MODEL_TYPES),
        metadata={
            "help": "NNCF model type: transformer keeps the attention's softmax and "
            "normalizations in fp32 (more accurate on transformers); auto: transformer when "
            "the converted graph has attention (Softmax or ScaledDotProductAttention)"
        },
    )
    int8_activation_ranges: str = field(
        default="minmax",
        validator=one_of(ACTIVATION_RANGES),
        metadata={
            "help": "how activation ranges are taken from the calibration cases: minmax (the "
            "smallest minimum and largest maximum over every case: a workload has few cases "
            "and serves their whole range) or nncf (NNCF's default, the mean over samples, "
            "robust to outliers in large calibration sets but clipping a larger batch's "
            "extremes when the cases are few)"
        },
    )
    int8_overflow_fix: str | None = field(
        default=None,
        validator=optional(one_of(OVERFLOW_FIXES)),
        metadata={
            "help": "NNCF's overflow fix (weights kept to 7 bits so that int8 sums do not "
            "saturate): enable (every layer), first_layer_only (NNCF's default) or disable; "
            "default: enable on x86 CPUs without VNNI or AMX, where the u8 x s8 "
            "multiply-add saturates, NNCF's default elsewhere"
        },
    )
    int8_fast_bias_correction: bool = field(
        default=True,
        metadata={
            "help": "NNCF's fast bias correction (false: the slower full bias correction, "
            "sometimes more accurate)"
        },
    )
