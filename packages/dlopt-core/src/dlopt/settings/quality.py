"""Quality limits per precision class, user overrides, and the quality policy.

Limits are resolved in this order, each step overriding only the fields it sets:
defaults for the plan's precision -> ``QualityPolicy.limits`` (global) ->
``QualityPolicy.per_precision[precision]`` -> ``QualityPolicy.per_output[path]`` (a path
applies to its whole subtree; the most specific path wins). dlopt itself never changes
limits while a race runs: a plan that misses them is rejected.

The default numbers come from ``benchmarks/validation_limits.py``; docs/validation.md
records the measurements and how the limits were set from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Protocol

import attrs
from attrs import field, frozen

from dlopt.errors import ConfigurationError
from dlopt.platform.config_checks import boolean, instance_of, text
from dlopt.platform.serialization import user_document
from dlopt.precision import Precision


class LeafRounding(Protocol):
    """How far one eager fp32 output leaf is from float64 (measured by
    :mod:`dlopt.validation.rounding`): what widens an fp32 plan's limits."""

    @property
    def rel_l2(self) -> float: ...
    @property
    def max_abs_error(self) -> float: ...
    def describe(self) -> str: ...


Direction = Literal["higher", "lower"]

_LIMIT_FIELDS = (
    "atol",
    "rtol",
    "max_outside_fraction",
    "max_rel_l2",
    "min_cosine",
    "max_abs_error",
    "max_mismatch_fraction",
)


def _check_limit(name: str, value: float | None, *, optional: bool) -> None:
    if value is None:
        if optional:
            return
        raise ConfigurationError(f"quality limit {name} must be a number, got None")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"quality limit {name} must be a finite number, got {value!r}")
    if name == "min_cosine":
        if not -1.0 <= value <= 1.0:
            raise ConfigurationError(f"min_cosine must be in [-1, 1], got {value!r}")
    elif value < 0:
        raise ConfigurationError(f"quality limit {name} must be >= 0, got {value!r}")
    if name.endswith("_fraction") and value > 1:
        raise ConfigurationError(f"{name} is a fraction in [0, 1], got {value!r}")


@user_document
@frozen
class QualityLimits:
    """The limits one output leaf is held to.

    Float leaves: at most ``max_outside_fraction`` of the elements may fall outside
    ``|c - r| <= atol + rtol * |r|``; relative L2 error at most ``max_rel_l2``; cosine
    similarity at least ``min_cosine``; max absolute error at most ``max_abs_error`` when
    set. Integer/bool leaves: at most ``max_mismatch_fraction`` of the elements may differ.
    A non-finite value where the reference has a different value always fails.
    """

    atol: float
    rtol: float
    max_outside_fraction: float
    max_rel_l2: float
    min_cosine: float
    max_abs_error: float | None = None
    max_mismatch_fraction: float = 0.0

    def __attrs_post_init__(self) -> None:
        for name in _LIMIT_FIELDS:
            _check_limit(name, getattr(self, name), optional=name == "max_abs_error")

    def with_override(self, override: LimitOverride) -> QualityLimits:
        changes = {
            n: getattr(override, n) for n in _LIMIT_FIELDS if getattr(override, n) is not None
        }
        return attrs.evolve(self, **changes) if changes else self


@user_document
@frozen
class LimitOverride:
    """A partial :class:`QualityLimits`: only the fields set (not ``None``) override."""

    atol: float | None = None
    rtol: float | None = None
    max_outside_fraction: float | None = None
    max_rel_l2: float | None = None
    min_cosine: float | None = None
    max_abs_error: float | None = None
    max_mismatch_fraction: float | None = None

    def __attrs_post_init__(self) -> None:
        for name in _LIMIT_FIELDS:
            _check_limit(name, getattr(self, name), optional=True)

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, n) is None for n in _LIMIT_FIELDS)


# Defaults per precision class, set from benchmarks/validation_limits.py (see
# docs/validation.md): above what correct plans of the class showed on small real
# architectures, with margin, and below what broken plans showed.
_DEFAULT_COLUMNS = (
    "atol",
    "rtol",
    "max_outside_fraction",
    "max_rel_l2",
    "min_cosine",
    "max_mismatch_fraction",
)
_FP32, _FP16, _BF16, _INT8, _FP8, _INT4 = (
    QualityLimits(**dict(zip(_DEFAULT_COLUMNS, row, strict=True)))
    # atol  rtol  outside rel_l2 min_cosine mismatch
    for row in (
        (1e-5, 1e-4, 0.0, 1e-5, 0.999999, 0.0),
        (1e-3, 1e-2, 0.01, 5e-3, 0.99999, 0.01),
        (1e-2, 5e-2, 0.02, 3e-2, 0.9995, 0.03),
        (5e-2, 1e-1, 0.05, 8e-2, 0.995, 0.1),
        (5e-2, 1e-1, 0.05, 0.12, 0.993, 0.1),
        (1e-1, 2e-1, 0.1, 0.25, 0.97, 0.2),
    )
)

DEFAULT_LIMITS: Mapping[Precision, QualityLimits] = {
    Precision.FP32: _FP32,
    # TF32 keeps fp16's 10-bit mantissa in matmuls/convs: same error class as fp16.
    Precision.TF32: _FP16,
    Precision.FP16: _FP16,
    Precision.BF16: _BF16,
    # A mix of formats is held to the looser of the half-precision classes.
    Precision.MIXED: _BF16,
    Precision.INT8: _INT8,
    Precision.FP8: _FP8,
    Precision.INT4: _INT4,
}


def default_limits(precision: Precision | str) -> QualityLimits:
    """The built-in limits for a precision class (before any user override)."""
    return DEFAULT_LIMITS[Precision.parse(precision)]


# ---------------------------------------------------------------------------- user metrics


def _check_direction(_: Any, __: Any, value: str) -> None:
    if value not in ("higher", "lower"):
        raise ConfigurationError(
            f"user metric direction must be 'higher' (higher is better) or 'lower', got {value!r}"
        )


def _check_metric_limit(_: Any, __: Any, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"user metric limit must be a finite number, got {value!r}")


@frozen
class UserMetric:
    """A model-specific quality check, counted like the built-in ones.

    ``fn(candidate, reference) -> float`` gets the candidate's and the reference's outputs
    for one case (the subtree at ``path`` when set, else the whole output; tensors as the
    plan returned them). The case passes when the value is ``>= limit`` for
    ``direction="higher"`` (higher is better) or ``<= limit`` for ``"lower"``. A metric
    that raises or returns NaN fails the case with that reason.
    """

    name: str = field(validator=text())
    fn: Callable[[Any, Any], float] = field(eq=False)
    limit: float = field(validator=_check_metric_limit)
    direction: Direction = field(default="higher", validator=_check_direction)
    path: str | None = None

    def __attrs_post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigurationError(f"user metric {self.name!r}: fn must be callable")
        if self.path is not None:
            _check_path(self.path)

    def accepts(self, value: float) -> bool:
        return value >= self.limit if self.direction == "higher" else value <= self.limit


# ---------------------------------------------------------------------------- policy


def _check_path(path: str) -> None:
    if not isinstance(path, str) or not (path == "out" or path.startswith(("out[", "out."))):
        raise ConfigurationError(
            f"output path {path!r} must be written as in reports, starting at 'out': "
            "e.g. 'out', 'out[0]', 'out[\"logits\"]', 'out.hidden'"
        )


def _overrides(field_name: str, value: object) -> dict[Any, LimitOverride]:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(
            f"QualityPolicy.{field_name} must be a dict of LimitOverride, got {value!r}"
        )
    result = dict(value or {})
    for key, override in result.items():
        if not isinstance(override, LimitOverride):
            raise ConfigurationError(
                f"QualityPolicy.{field_name}[{key!r}] must be a LimitOverride, got "
                f"{type(override).__name__} {override!r}"
            )
    return result


def _per_precision(value: Mapping[Any, LimitOverride] | None) -> dict[Precision, LimitOverride]:
    result: dict[Precision, LimitOverride] = {}
    for key, override in _overrides("per_precision", value).items():
        try:
            precision = Precision.parse(key)
        except ValueError as exc:
            raise ConfigurationError(f"QualityPolicy.per_precision: {exc}") from None
        result[precision] = override
    return result


def _per_output(value: Mapping[str, LimitOverride] | None) -> dict[str, LimitOverride]:
    result = _overrides("per_output", value)
    for path in result:
        _check_path(path)
    return result


def _user_metrics(value: object) -> tuple[UserMetric, ...]:
    if isinstance(value, UserMetric):
        return (value,)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"QualityPolicy.user_metrics must be a list of UserMetric, got {value!r}"
        )
    metrics = tuple(value)
    for metric in metrics:
        if not isinstance(metric, UserMetric):
            raise ConfigurationError(
                "QualityPolicy.user_metrics must hold UserMetric objects (e.g. "
                f"dlopt.validation.top1_agreement()), got {type(metric).__name__} {metric!r}"
            )
    return metrics


def _training_mode(_: Any, __: Any, value: str) -> None:
    if value not in ("error", "warn"):
        raise ConfigurationError(f"training_mode must be 'error' or 'warn', got {value!r}")


def _widened_to_rounding(
    limits: QualityLimits, rounding: LeafRounding, factor: float
) -> QualityLimits:
    """``limits`` loosened (never tightened) to ``factor`` times the reference's rounding:
    two fp32 computations of one exact result differ by about their own rounding each."""
    rel_l2 = factor * rounding.rel_l2
    return attrs.evolve(
        limits,
        max_rel_l2=max(limits.max_rel_l2, rel_l2),
        min_cosine=min(limits.min_cosine, 1.0 - rel_l2**2),
        atol=max(limits.atol, factor * rounding.max_abs_error),
    )


def _is_under(path: str, prefix: str) -> bool:
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in "[.")


@user_document
@frozen
class QualityPolicy:
    """How candidates are held to the eager fp32 reference.

    ``limits`` overrides the defaults for every precision; ``per_precision`` for one
    precision class; ``per_output`` for one output path and everything under it
    (``'out["boxes"]'``). ``user_metrics`` adds model-specific checks.
    ``training_mode``: what to do with a model left in training mode ("error" refuses
    it; "warn" warns and relies on the determinism check).
    ``allow_nonfinite_reference``: accept NaN/inf in the reference (e.g. masked logits
    of -inf); candidates must then reproduce them exactly.
    ``reference_rel_tolerance``: relative L2 difference allowed between two reference
    runs (0 = bit-identical, right on CPU; raise it slightly for GPU kernels that use
    atomics, or better make them deterministic).
    ``snapshot_weights``: keep one CPU copy of the weights during a race so that a plan
    that mutates the model can be undone; ``False`` saves the memory, and a mutating plan
    then stops the race.
    ``fp32_rounding_factor``: the reference is also run once per case in float64 (on a
    copy of the model) to measure its own fp32 rounding; an fp32 plan's limits widen to
    this many times that rounding where it exceeds the fixed fp32 limits (deep networks:
    resnet50's eager fp32 is ~1.6e-5 from float64, above the fixed 1e-5). ``0`` skips the
    float64 run and keeps the fixed limits. Overrides still replace what they set.
    """

    limits: LimitOverride = field(factory=LimitOverride, validator=instance_of(LimitOverride))
    per_precision: dict[Precision, LimitOverride] = field(factory=dict, converter=_per_precision)
    per_output: dict[str, LimitOverride] = field(factory=dict, converter=_per_output)
    user_metrics: tuple[UserMetric, ...] = field(default=(), converter=_user_metrics)
    training_mode: Literal["error", "warn"] = field(default="error", validator=_training_mode)
    allow_nonfinite_reference: bool = field(default=False, validator=boolean())
    reference_rel_tolerance: float = 0.0
    snapshot_weights: bool = field(default=True, validator=boolean())
    fp32_rounding_factor: float = 10.0

    def __attrs_post_init__(self) -> None:
        names = [m.name for m in self.user_metrics]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigurationError(f"user metric names must be unique, repeated: {repeated}")
        _check_limit("reference_rel_tolerance", self.reference_rel_tolerance, optional=False)
        _check_limit("fp32_rounding_factor", self.fp32_rounding_factor, optional=False)

    def limits_for(
        self,
        precision: Precision | str,
        path: str = "out",
        rounding: LeafRounding | None = None,
    ) -> tuple[QualityLimits, str]:
        """The limits for a leaf at ``path`` of a plan computing in ``precision``.

        ``rounding``: the reference leaf's measured fp32 rounding, which widens the fp32
        defaults (see ``fp32_rounding_factor``). Returns ``(limits, label)``; the label
        says where they came from, e.g. ``"bf16 limits"`` or
        ``"bf16 limits + override for out[\\"boxes\\"]"``.
        """
        precision = Precision.parse(precision)
        limits = default_limits(precision)
        sources: list[str] = []
        if rounding is not None and precision is Precision.FP32:
            widened = _widened_to_rounding(limits, rounding, self.fp32_rounding_factor)
            if widened != limits:
                limits = widened
                sources.append(
                    f"widened to {self.fp32_rounding_factor:g}x the reference's own fp32 "
                    f"rounding ({rounding.describe()} from float64)"
                )
        if not self.limits.is_empty:
            limits = limits.with_override(self.limits)
            sources.append("global override")
        override = self.per_precision.get(precision)
        if override is not None and not override.is_empty:
            limits = limits.with_override(override)
            sources.append(f"{precision.value} override")
        for prefix in sorted((p for p in self.per_output if _is_under(path, p)), key=len):
            limits = limits.with_override(self.per_output[prefix])
            sources.append(f"override for {prefix}")
        label = f"{precision.value} limits"
        if sources:
            label += " + " + ", ".join(sources)
        return limits, label
