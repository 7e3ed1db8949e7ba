"""Ready-made user metrics (top-1 agreement, PSNR), the metric registry, and JSON hooks.

A :class:`~dlopt.settings.quality.UserMetric` holds a Python callable. JSON never names
code: a metric is written by the name it is registered under, with its parameters as
plain JSON values::

    "fn": {"metric": "top1_agreement", "params": {"dim": -1}}

Registered metrics are dlopt's own (``top1_agreement``, ``psnr``) and those plugins
register through the ``dlopt_register_metrics`` hook (an attrs class whose fields are
the parameters). Loading a name nobody registered is a
:class:`~dlopt.errors.ConfigurationError` that lists the known names. Any other
callable (a function, a lambda) is written by its name only,
``{"unregistered": "module:qualname"}``, and loads as a placeholder that says to pass
the metric in code: nothing named in a file is ever imported or called. Files written
with the older ``{"callable": "module:qualname", "params": ...}`` form still load: a
name that matches a registered metric's class gives that metric, anything else a
placeholder.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import torch
from attrs import frozen

from dlopt.errors import ConfigurationError
from dlopt.platform.serialization import NotJsonableError, converter, strict_jsonable
from dlopt.settings.quality import Direction, UserMetric
from dlopt.validation.metric_registry import known_metrics, register_builtin


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


# ---------------------------------------------------------------------------- registry

#: dlopt's own metrics, by the name JSON refers to them with.
BUILTIN_METRICS: Mapping[str, type] = {"top1_agreement": Top1AgreementFn, "psnr": PsnrFn}
for _name, _cls in BUILTIN_METRICS.items():
    register_builtin(_name, _cls)


def _metric_class(name: str) -> type:
    metrics = known_metrics()
    if name not in metrics:
        raise ConfigurationError(
            f"unknown user metric {name!r}; registered metrics: {', '.join(sorted(metrics))}. "
            "A plugin's metrics (its dlopt_register_metrics hook) are registered when the "
            "plugins are loaded: call dlopt.load_providers() before reading a policy that "
            "names one; any other function is passed in code as UserMetric(name, fn, limit)"
        )
    return metrics[name]


def metric_fn(name: str, params: Mapping[str, Any] | None = None) -> Any:
    """The registered metric ``name`` built with ``params``: ``metric_fn("psnr", {"data_range": 1})``."""
    metric_class = _metric_class(name)
    if params is not None and not isinstance(params, Mapping):
        raise ConfigurationError(f"metric {name!r}: params must be a JSON object, got {params!r}")
    try:
        return metric_class(**dict(params or {}))
    except Exception as exc:
        raise ConfigurationError(
            f"metric {name!r} cannot be built with params {dict(params or {})!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _registered_name(fn: Any) -> str | None:
    for name, metric_class in known_metrics().items():
        if type(fn) is metric_class:
            return name
    return None


# ---------------------------------------------------------------------------- JSON hooks


@frozen
class UnresolvedMetricFn:
    """Stands in for a metric function that JSON cannot (and must not) bring back."""

    callable: str

    def __call__(self, candidate: Any, reference: Any) -> float:
        raise ConfigurationError(
            f"the user metric function {self.callable!r} is not a registered metric, so it "
            "was not loaded from JSON (files never name code to run); pass the QualityPolicy "
            "with its UserMetric in code, or register the metric through a plugin's "
            "dlopt_register_metrics hook"
        )


def _callable_name(fn: Any) -> str:
    obj = type(fn) if attrs.has(type(fn)) else fn
    module = getattr(obj, "__module__", None) or "?"
    qualname = getattr(obj, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qualname}"


def _describe_fn(fn: Any) -> dict[str, Any]:
    if isinstance(fn, UnresolvedMetricFn):
        return {"unregistered": fn.callable}
    name = _registered_name(fn)
    if name is None:
        return {"unregistered": _callable_name(fn)}
    try:
        params = strict_jsonable(attrs.asdict(fn, recurse=False))
    except NotJsonableError:
        return {"unregistered": _callable_name(fn)}
    return {"metric": name, "params": params}


def _old_form(spec: str, params: Any) -> Any:
    # ``{"callable": "module:qualname"}`` from older files: compared as text with the
    # registered classes' names; never imported.
    for name, metric_class in known_metrics().items():
        if spec == f"{metric_class.__module__}:{metric_class.__qualname__}":
            try:
                return metric_fn(name, params if isinstance(params, Mapping) else None)
            except ConfigurationError:
                break
    return UnresolvedMetricFn(spec)


def _rebuild_fn(data: Any) -> Any:
    if isinstance(data, str):
        return UnresolvedMetricFn(data)
    if not isinstance(data, Mapping):
        raise ConfigurationError(
            f'a user metric\'s fn must be {{"metric": NAME, "params": {{...}}}}, got {data!r}'
        )
    if "metric" in data:
        name = data["metric"]
        if not isinstance(name, str):
            raise ConfigurationError(f"a user metric's fn names its metric as text, got {name!r}")
        return metric_fn(name, data.get("params"))
    if "unregistered" in data:
        return UnresolvedMetricFn(str(data["unregistered"]))
    if "callable" in data:
        return _old_form(str(data["callable"]), data.get("params"))
    raise ConfigurationError(
        f'a user metric\'s fn must be {{"metric": NAME, "params": {{...}}}}, got {data!r}'
    )


def _unstructure_metric(metric: UserMetric) -> dict[str, Any]:
    return {
        "name": metric.name,
        "fn": _describe_fn(metric.fn),
        "limit": metric.limit,
        "direction": metric.direction,
        "path": metric.path,
    }


def _structure_metric(data: Any, _: Any) -> UserMetric:
    if not isinstance(data, Mapping) or "name" not in data or "limit" not in data:
        raise ConfigurationError(
            'a user metric is {"name": ..., "fn": {"metric": NAME, "params": {...}}, '
            f'"limit": NUMBER, "direction": "higher"|"lower", "path": ...}}, got {data!r}'
        )
    direction: Direction = data.get("direction", "higher")
    return UserMetric(
        name=data["name"],
        fn=_rebuild_fn(data.get("fn")),
        limit=data["limit"],
        direction=direction,
        path=data.get("path"),
    )


converter.register_unstructure_hook(UserMetric, _unstructure_metric)
converter.register_structure_hook(UserMetric, _structure_metric)
