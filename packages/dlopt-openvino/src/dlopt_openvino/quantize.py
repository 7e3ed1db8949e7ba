"""NNCF post-training int8 quantization, and what a compiled model runs in which precision.

``openvino_cpu_int8`` quantizes the converted fp32 model with ``nncf.quantize``,
calibrated on the workload's own prepared inputs (every case, once each). What it
quantized is read from the compiled model's runtime graph, where OpenVINO's CPU plugin
records the precision each layer runs in: the plan reports how many of the model's
compute layers run in int8, and refuses to be raced when none does.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from attrs import frozen

from dlopt.plugin import ProviderBuildError, capture_output, iter_tensors
from dlopt_openvino.options import OpenVinoInt8Options
from dlopt_openvino.probe import first_line, int8_saturates

#: Runtime layer types that carry a model's multiply-accumulate work on OpenVINO's CPU plugin.
COMPUTE_LAYERS = frozenset(
    {"Convolution", "Deconvolution", "FullyConnected", "MatMul", "GroupConvolution"}
)
#: Runtime precisions that are int8 arithmetic.
INT8_PRECISIONS = frozenset({"u8", "i8"})
#: Graph operations that make a model a transformer for NNCF's ``model_type``.
ATTENTION_OPS = frozenset({"Softmax", "ScaledDotProductAttention"})


@frozen
class QuantizeRecord:
    """How the model was quantized (part of the plan's metadata)."""

    preset: str
    model_type: str
    activation_ranges: str
    overflow_fix: str
    fast_bias_correction: bool
    calibration_cases: tuple[str, ...]
    seconds: float

    def metadata(self) -> dict[str, Any]:
        return {
            "tool": "nncf.quantize",
            "preset": self.preset,
            "model_type": self.model_type,
            "activation_ranges": self.activation_ranges,
            "overflow_fix": self.overflow_fix,
            "fast_bias_correction": self.fast_bias_correction,
            "calibration_cases": list(self.calibration_cases),
            "seconds": round(self.seconds, 4),
        }


def model_type_for(ov_model: Any, option: str) -> str:
    """``transformer`` or ``default``: the option, or for ``auto`` whether the graph has
    attention."""
    if option != "auto":
        return option
    kinds = {op.get_type_name() for op in ov_model.get_ops()}
    return "transformer" if kinds & ATTENTION_OPS else "default"


def quantize(
    ov_model: Any, cases: Sequence[Any], options: OpenVinoInt8Options
) -> tuple[Any, QuantizeRecord]:
    """``ov_model`` quantized to int8 by NNCF, calibrated on ``cases``' inputs (their flat
    tensors, as the runner feeds them). ``ProviderBuildError`` quotes NNCF's reason."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    samples = [
        [t.detach().cpu().contiguous().numpy() for t in iter_tensors((c.args, c.kwargs))]
        for c in cases
    ]
    model_type = model_type_for(ov_model, options.int8_model_type)
    advanced_options: dict[str, Any] = {}
    if options.int8_activation_ranges == "minmax":
        # Measured on an MLP calibrated on batches of 1 and 4 rows: NNCF's mean of the
        # per-sample maxima clipped the 4-row batch (rel. L2 error 0.10); min/max 0.008.
        advanced_options["activations_range_estimator_params"] = RangeEstimatorParametersSet.MINMAX
    overflow_fix = options.int8_overflow_fix or (
        "enable" if int8_saturates() else "first_layer_only"
    )
    # Without VNNI the u8 x s8 multiply-add saturates: NNCF's default fixes the first
    # layer only. With ONEDNN_MAX_CPU_ISA=AVX2 here the MLP's and BertModel's int8 outputs
    # were 11-14% off eager (limit 8%); fixing every layer kept them within it.
    advanced_options["overflow_fix"] = OverflowFix(overflow_fix)
    advanced = AdvancedQuantizationParameters(**advanced_options)
    start = time.perf_counter()
    try:
        # NNCF draws progress bars and logs while it works: kept out of the user's terminal.
        with capture_output("nncf quantize"):
            quantized = nncf.quantize(
                ov_model,
                nncf.Dataset(samples),
                preset=nncf.QuantizationPreset(options.int8_preset),
                target_device=nncf.TargetDevice.CPU,
                model_type=nncf.ModelType.TRANSFORMER if model_type == "transformer" else None,
                subset_size=len(samples),
                fast_bias_correction=options.int8_fast_bias_correction,
                advanced_parameters=advanced,
            )
    except Exception as exc:
        raise ProviderBuildError(
            f"NNCF could not quantize the converted model: {type(exc).__name__}: {first_line(exc)}"
        ) from exc
    record = QuantizeRecord(
        preset=options.int8_preset,
        model_type=model_type,
        activation_ranges=options.int8_activation_ranges,
        overflow_fix=overflow_fix,
        fast_bias_correction=options.int8_fast_bias_correction,
        calibration_cases=tuple(c.name for c in cases),
        seconds=time.perf_counter() - start,
    )
    return quantized, record


def layer_precisions(compiled: Any) -> dict[str, dict[str, int]] | None:
    """``{layer type: {runtime precision: count}}`` of the compute layers of a compiled
    model, as its device plugin ran them; ``None`` when the plugin does not say."""
    found: Counter[tuple[str, str]] = Counter()
    try:
        for op in compiled.get_runtime_model().get_ops():
            info = op.get_rt_info()
            kind = info["layerType"].astype(str)
            if kind in COMPUTE_LAYERS:
                found[(kind, info["runtimePrecision"].astype(str))] += 1
    except Exception:  # a device plugin without these runtime attributes
        return None
    table: dict[str, dict[str, int]] = {}
    for (kind, precision), count in sorted(found.items()):
        table.setdefault(kind, {})[precision] = count
    return table


def runtime_layer_types(compiled: Any) -> tuple[str, ...]:
    """Every runtime layer type of a compiled model, sorted (empty when the plugin does
    not say): what a refusal names when no compute layer was found."""
    try:
        return tuple(
            sorted(
                {
                    str(op.get_rt_info()["layerType"].astype(str))
                    for op in compiled.get_runtime_model().get_ops()
                }
            )
        )
    except Exception:  # a device plugin without these runtime attributes
        return ()


def count(table: dict[str, dict[str, int]], precisions: frozenset[str] | set[str]) -> int:
    """Compute layers of ``table`` running in one of ``precisions``."""
    return sum(n for by in table.values() for p, n in by.items() if p in precisions)


def total(table: dict[str, dict[str, int]]) -> int:
    """Every compute layer of ``table``."""
    return sum(n for by in table.values() for n in by.values())
