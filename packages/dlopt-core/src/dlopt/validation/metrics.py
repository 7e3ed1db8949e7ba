"""Per-leaf error metrics, computed in float64 on CPU.

Float leaves: non-finite counts, max absolute error, relative L2 error, cosine
similarity and the count/fraction of elements outside ``(atol, rtol)`` with
``torch.isclose`` semantics (``|c - r| <= atol + rtol * |r|``, equal infinities and
NaN-at-NaN count as close). Integer and bool leaves: mismatch count and fraction.

The error metrics (max abs, rel L2, cosine) are taken over the elements that are finite
in both outputs; a non-finite value where the reference has a different value is counted
in ``nonfinite_mismatch`` (and as outside tolerance), and always fails a leaf.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from attrs import field, frozen

from dlopt.platform.serialization import finite_or_none
from dlopt.validation.structure import format_shape

LeafKind = Literal["float", "integer", "bool"]


def _tuple_of_str(value: Any) -> tuple[str, ...]:
    return tuple(value)


@frozen
class LeafMetrics:
    """What one output leaf of a candidate looks like next to the reference.

    Numbers that do not apply to a leaf's kind are ``None``; so are undefined ones (rel
    L2 against an all-zero reference with a nonzero error, cosine against a zero vector),
    with the reason in ``notes``. ``passed``/``failures``/``limits_label`` are filled in
    when the leaf is checked against limits.
    """

    path: str
    kind: LeafKind
    dtype: str
    candidate_dtype: str
    shape: tuple[int, ...]
    numel: int
    candidate_nonfinite: int = 0
    reference_nonfinite: int = 0
    nonfinite_mismatch: int = 0
    max_abs_error: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None
    outside_count: int | None = None
    outside_fraction: float | None = None
    mismatch_count: int | None = None
    mismatch_fraction: float | None = None
    atol: float | None = None
    rtol: float | None = None
    limits_label: str | None = None
    passed: bool = True
    failures: tuple[str, ...] = field(default=(), converter=_tuple_of_str)
    notes: tuple[str, ...] = field(default=(), converter=_tuple_of_str)

    @property
    def shape_text(self) -> str:
        return format_shape(self.shape)


def as_tensor(value: Any) -> torch.Tensor:
    """A detached CPU tensor for a tensor leaf or a Python number leaf."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, bool):
        return torch.tensor(value, dtype=torch.bool)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    if isinstance(value, complex):
        return torch.tensor(value, dtype=torch.complex128)
    return torch.tensor(float(value), dtype=torch.float64)


def _to_float64(t: torch.Tensor) -> torch.Tensor:
    if t.is_quantized:
        t = t.dequantize()
    if t.is_complex():
        t = torch.view_as_real(t.to(torch.complex128))
    return t.to(torch.float64)


def _kind(t: torch.Tensor) -> LeafKind:
    if t.dtype == torch.bool:
        return "bool"
    if t.is_floating_point() or t.is_complex() or t.is_quantized:
        return "float"
    return "integer"


def compute_leaf_metrics(
    path: str, candidate: Any, reference: Any, *, atol: float, rtol: float
) -> LeafMetrics:
    """Metrics of one leaf pair (same shape; candidate may be a lower-precision float)."""
    c_raw, r_raw = as_tensor(candidate), as_tensor(reference)
    kind = _kind(r_raw)
    base: dict[str, Any] = {
        "path": path,
        "kind": kind,
        "dtype": str(r_raw.dtype).removeprefix("torch."),
        "candidate_dtype": str(c_raw.dtype).removeprefix("torch."),
        "shape": tuple(int(d) for d in r_raw.shape),
        "numel": int(r_raw.numel()),
    }
    numel = r_raw.numel()
    if kind != "float":
        mismatches = int((c_raw.reshape(-1) != r_raw.reshape(-1)).sum()) if numel else 0
        return LeafMetrics(
            **base,
            mismatch_count=mismatches,
            mismatch_fraction=mismatches / numel if numel else 0.0,
        )

    c, r = _to_float64(c_raw).reshape(-1), _to_float64(r_raw).reshape(-1)
    c_finite, r_finite = torch.isfinite(c), torch.isfinite(r)
    both = c_finite & r_finite
    # A non-finite value agrees only with the same value (NaN with NaN, +inf with +inf).
    same_special = (c == r) | (torch.isnan(c) & torch.isnan(r))
    nonfinite_mismatch = int((~both & ~same_special).sum())
    notes: list[str] = []

    cf, rf = c[both], r[both]
    diff = cf - rf
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    err_norm = float(torch.linalg.vector_norm(diff))
    ref_norm = float(torch.linalg.vector_norm(rf))
    cand_norm = float(torch.linalg.vector_norm(cf))

    rel_l2: float | None
    if ref_norm > 0:
        rel_l2 = err_norm / ref_norm
    elif err_norm == 0:
        rel_l2 = 0.0
    else:
        rel_l2 = None
        notes.append("rel_l2 undefined: the reference is all zeros (judged by atol/rtol instead)")

    cosine: float | None
    if err_norm == 0:
        cosine = 1.0  # identical (also when both are all zeros)
    elif ref_norm > 0 and cand_norm > 0:
        cosine = float(torch.dot(cf, rf)) / (cand_norm * ref_norm)
        cosine = max(-1.0, min(1.0, cosine))
    else:
        cosine = None
        which = "reference" if ref_norm == 0 else "candidate"
        notes.append(f"cosine undefined: the {which} is all zeros (judged by other metrics)")

    if numel:
        close = torch.isclose(c, r, rtol=rtol, atol=atol, equal_nan=True)
        outside = int((~close).sum())
    else:
        outside = 0
    return LeafMetrics(
        **base,
        candidate_nonfinite=int((~c_finite).sum()),
        reference_nonfinite=int((~r_finite).sum()),
        nonfinite_mismatch=nonfinite_mismatch,
        max_abs_error=finite_or_none(max_abs),
        rel_l2=finite_or_none(rel_l2),
        cosine=finite_or_none(cosine),
        outside_count=outside,
        outside_fraction=outside / numel if numel else 0.0,
        atol=atol,
        rtol=rtol,
        notes=tuple(notes),
    )


def fmt(value: float | None) -> str:
    """Compact number for reasons: ``0.034``, ``1.2e-06``."""
    if value is None:
        return "n/a"
    if value == 0:
        return "0"
    if math.isfinite(value) and float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


def pct(fraction: float | None) -> str:
    """A fraction as a percentage: ``0.0123`` -> ``1.23%``."""
    if fraction is None:
        return "n/a"
    return f"{fmt(fraction * 100)}%"
