"""The reference's own fp32 rounding, measured against one float64 run of the model.

The fp32 limits were set on small networks, where eager fp32 lands within ~4e-7
(relative L2) of the exact result. Rounding grows with depth and width: resnet50's eager
fp32 logits are ~1.6e-5 from its float64 logits, so a correct fp32 rewrite (channels-last,
Inductor, ONNX Runtime), which rounds differently, lands 1.3e-5 to 2.5e-5 from the fp32
reference and would fail a fixed 1e-5. Measuring that rounding per output lets the fp32
limits widen to a multiple of what the reference itself cannot tell apart from the exact
result, and no further: a semantic error (a dropped bias, a tanh GELU) stays far above.

The float64 run is on a copy of the model; it is skipped, and the fixed limits hold,
when the copy would be large, the model cannot run in float64, or its float64 outputs
differ by more than rounding can explain (a forward that branches on the dtype).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch
from attrs import frozen

from dlopt.platform.tree import map_tensors
from dlopt.validation.metrics import as_tensor
from dlopt.validation.structure import iter_leaves

log = logging.getLogger(__name__)

#: Above this many bytes of float64 parameters and buffers the copy is not made.
FLOAT64_COPY_MAX_BYTES = 2 * 1024**3
#: A float64 run further than this (relative L2) from eager fp32 is not rounding: the model
#: computes something else in float64, and the measurement is not used.
MAX_PLAUSIBLE_ROUNDING = 1e-4


@frozen
class LeafRounding:
    """How far one eager fp32 output leaf is from the same leaf computed in float64."""

    rel_l2: float
    max_abs_error: float

    def describe(self) -> str:
        return f"rel_l2 {self.rel_l2:.3g}, max abs {self.max_abs_error:.3g}"


def _float64_inputs(value: Any) -> Any:
    return map_tensors(lambda t: t.to(torch.float64) if t.is_floating_point() else t, value)


def _model_bytes_in_float64(model: torch.nn.Module) -> int:
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * 8 for t in tensors if t.is_floating_point())


def _leaf_rounding(fp32: Any, fp64: Any) -> LeafRounding | None:
    if not all(isinstance(leaf, (torch.Tensor, float)) for leaf in (fp32, fp64)):
        return None  # None, strings, integers: nothing rounded
    a, b = as_tensor(fp32), as_tensor(fp64)
    if not (a.is_floating_point() and b.is_floating_point()) or a.shape != b.shape:
        return None
    a, b = a.to(torch.float64), b.to(torch.float64)
    if not bool(torch.isfinite(a).all() and torch.isfinite(b).all()):
        return None
    norm = float(torch.linalg.vector_norm(b))
    if norm == 0.0:
        return None
    diff = (a - b).abs()
    return LeafRounding(float(torch.linalg.vector_norm(diff)) / norm, float(diff.max()))


def measure_fp32_rounding(
    model: torch.nn.Module,
    cases: Sequence[tuple[tuple[Any, ...], dict[str, Any], Any]],
) -> tuple[list[dict[str, LeafRounding]], str | None]:
    """Per case ``(args, kwargs, fp32_outputs)``: each float output leaf's distance from a
    float64 run of a copy of ``model``, by output path.

    Returns ``(per_case, note)``: ``note`` says why nothing was measured (then every case
    maps to ``{}``); a leaf missing from a case's map was not measured (not floating,
    non-finite, or implausibly far for rounding).
    """
    empty: list[dict[str, LeafRounding]] = [{} for _ in cases]
    size = _model_bytes_in_float64(model)
    if size > FLOAT64_COPY_MAX_BYTES:
        return empty, f"a float64 copy would take {size / 1024**3:.1f} GiB"
    try:
        double = copy.deepcopy(model).to(torch.float64)
    except Exception as exc:
        return empty, f"the model could not be copied to float64 ({type(exc).__name__}: {exc})"
    per_case: list[dict[str, LeafRounding]] = []
    try:
        for args, kwargs, fp32_outputs in cases:
            with torch.inference_mode():
                fp64_outputs = double(*_float64_inputs(args), **_float64_inputs(kwargs))
            fp64_leaves = dict(iter_leaves(fp64_outputs))
            measured: dict[str, LeafRounding] = {}
            for path, leaf in iter_leaves(fp32_outputs):
                rounding = _leaf_rounding(leaf, fp64_leaves[path]) if path in fp64_leaves else None
                if rounding is not None and rounding.rel_l2 <= MAX_PLAUSIBLE_ROUNDING:
                    measured[path] = rounding
            per_case.append(measured)
    except Exception as exc:
        return empty, f"the model did not run in float64 ({type(exc).__name__}: {exc})"
    finally:
        del double
    return per_case, None
