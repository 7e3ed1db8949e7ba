"""Ready-made user metrics (top-1 agreement, PSNR) and JSON hooks for ``UserMetric``.

A :class:`~dlopt.validation.limits.UserMetric` holds a Python callable. In JSON it is
written as ``{"callable": "module:qualname", "params": {...}}``: a module-level function
(params ``null``) or an attrs callable class (its fields as params) is rebuilt on load;
anything else (a lambda, a closure) loads as a placeholder that explains it must be
passed in code again.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import attrs
import torch
from attrs import frozen

from dlopt.errors import ConfigurationError
from dlopt.serialization import converter
from dlopt.validation.limits import Direction, UserMetric


def _float64(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        return (t.dequantize() if t.is_quantized else t).to(torch.float64)
    return torch.as_tensor(value, dtype=torch.float64)


@frozen
class Top1AgreementFn:
    """Fraction of rows whose argmax over ``dim`` matches the reference's."""

    dim: int = -1

    def __call__(self, candidate: Any, reference: Any) -> float:
        c, r = _float64(candidate), _float64(reference)
        if c.shape != r.shape:
            raise ValueError(f"shape {tuple(c.shape)} vs reference {tuple(r.shape)}")
        if r.numel() == 0:
            return 1.0
        if r.dim() == 0:
            raise ValueError("top-1 agreement needs at least one dimension of classes")
        agree = c.argmax(dim=self.dim) == r.argmax(dim=self.dim)
        return float(agree.to(torch.float64).mean())


@frozen
class PsnrFn:
    """Peak signal-to-noise ratio in dB; ``data_range`` defaults to the reference's span.

    Identical outputs give ``inf`` (which passes any limit).
    """

    data_range: float | None = None

    def __call__(self, candidate: Any, reference: Any) -> float:
        c, r = _float64(candidate), _float64(reference)
        if c.shape != r.shape:
            raise ValueError(f"shape {tuple(c.shape)} vs reference {tuple(r.shape)}")
        if r.numel() == 0:
            return math.inf
        mse = float(((c - r) ** 2).mean())
        if mse == 0:
            return math.inf
        span = self.data_range if self.data_range is not None else float(r.max() - r.min())
        if span <= 0:
            span = max(float(r.abs().max()), 1.0)
        return 10.0 * math.log10(span * span / mse)


def top1_agreement(
    limit: float = 0.99, *, path: str | None = None, dim: int = -1, name: str = "top1_agreement"
) -> UserMetric:
    """A check that at least ``limit`` of the rows keep their argmax (classifiers)."""
    return UserMetric(
        name=name, fn=Top1AgreementFn(dim), limit=limit, direction="higher", path=path
    )


def psnr(
    limit: float = 40.0,
    *,
    path: str | None = None,
    data_range: float | None = None,
    name: str = "psnr",
) -> UserMetric:
    """A check that the PSNR against the reference is at least ``limit`` dB (images)."""
    return UserMetric(name=name, fn=PsnrFn(data_range), limit=limit, direction="higher", path=path)


# ---------------------------------------------------------------------------- JSON hooks


@frozen
class UnresolvedMetricFn:
    """Stands in for a metric function that could not be rebuilt from JSON."""

    callable: str

    def __call__(self, candidate: Any, reference: Any) -> float:
        raise ConfigurationError(
            f"the user metric function {self.callable!r} could not be rebuilt from JSON "
            "(lambdas and closures cannot); pass the QualityPolicy with its UserMetric in code"
        )


def _describe_fn(fn: Any) -> dict[str, Any]:
    if isinstance(fn, UnresolvedMetricFn):
        return {"callable": fn.callable, "params": None}
    target = fn if attrs.has(type(fn)) else None
    obj = type(fn) if target is not None else fn
    module = getattr(obj, "__module__", None) or "?"
    qualname = getattr(obj, "__qualname__", None) or type(fn).__qualname__
    params = converter.unstructure(attrs.asdict(fn, recurse=False)) if target is not None else None
    return {"callable": f"{module}:{qualname}", "params": params}


def _rebuild_fn(data: Any) -> Any:
    spec = str(data.get("callable", "?")) if isinstance(data, dict) else str(data)
    params = data.get("params") if isinstance(data, dict) else None
    module_name, _, qualname = spec.partition(":")
    if "<" in qualname or not qualname:
        return UnresolvedMetricFn(spec)
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        if params is not None:
            return obj(**params)
        return obj if callable(obj) else UnresolvedMetricFn(spec)
    except Exception:
        return UnresolvedMetricFn(spec)


def _unstructure_metric(metric: UserMetric) -> dict[str, Any]:
    return {
        "name": metric.name,
        "fn": _describe_fn(metric.fn),
        "limit": metric.limit,
        "direction": metric.direction,
        "path": metric.path,
    }


def _structure_metric(data: Any, _: Any) -> UserMetric:
    direction: Direction = data.get("direction", "higher")
    return UserMetric(
        name=data["name"],
        fn=_rebuild_fn(data.get("fn")),
        limit=float(data["limit"]),
        direction=direction,
        path=data.get("path"),
    )


converter.register_unstructure_hook(UserMetric, _unstructure_metric)
converter.register_structure_hook(UserMetric, _structure_metric)
