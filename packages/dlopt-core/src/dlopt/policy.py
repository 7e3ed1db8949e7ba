"""What the user asks of a selection: objective, constraints, measurement and quality."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from attrs import field, frozen

from dlopt.errors import ConfigurationError

if TYPE_CHECKING:
    from dlopt.measurement import MeasurementPolicy
    from dlopt.validation import QualityPolicy

Objective = Literal["steady_state_latency", "lifecycle_latency"]
OBJECTIVES: tuple[str, ...] = ("steady_state_latency", "lifecycle_latency")


def _positive_or_none(name: str):
    def check(instance: object, attribute: object, value: float | None) -> None:
        if value is not None and not (
            isinstance(value, (int, float)) and math.isfinite(value) and value > 0
        ):
            raise ConfigurationError(f"{name} must be a number > 0 or None, got {value!r}")

    return check


@frozen
class DeploymentConstraints:
    """Limits a plan must respect to be deployable, and the bar a challenger must clear.

    ``min_speedup``: a challenger replaces the baseline only when the lower confidence
    bound of its speedup is at least this (1.02 = "2% faster, with confidence").
    ``expected_calls``: how many requests the deployment will serve (lifecycle objective).
    Time limits are per plan; ``max_first_call_time_s`` applies to each workload case.
    ``max_latency_ms`` bounds the traffic-weighted mean steady-state latency and
    ``max_p99_latency_ms`` the traffic-weighted p99.
    """

    min_speedup: float = field(default=1.02, validator=_positive_or_none("min_speedup"))
    expected_calls: int | None = None
    max_setup_time_s: float | None = field(
        default=None, validator=_positive_or_none("max_setup_time_s")
    )
    max_first_call_time_s: float | None = field(
        default=None, validator=_positive_or_none("max_first_call_time_s")
    )
    max_peak_memory_mb: float | None = field(
        default=None, validator=_positive_or_none("max_peak_memory_mb")
    )
    max_latency_ms: float | None = field(
        default=None, validator=_positive_or_none("max_latency_ms")
    )
    max_p99_latency_ms: float | None = field(
        default=None, validator=_positive_or_none("max_p99_latency_ms")
    )

    def __attrs_post_init__(self) -> None:
        if self.expected_calls is not None and self.expected_calls < 0:
            raise ConfigurationError(f"expected_calls must be >= 0, got {self.expected_calls}")


def _default_measurement() -> MeasurementPolicy:
    from dlopt.measurement import MeasurementPolicy

    return MeasurementPolicy()


def _default_quality() -> QualityPolicy:
    from dlopt.validation import QualityPolicy

    return QualityPolicy()


def _check_objective(instance: object, attribute: object, value: str) -> None:
    if value not in OBJECTIVES:
        raise ConfigurationError(f"objective must be one of {', '.join(OBJECTIVES)}; got {value!r}")


def _names(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)  # type: ignore[arg-type]


@frozen
class OptimizationPolicy:
    """The whole selection policy.

    ``objective`` is used exactly as given: ``steady_state_latency`` (traffic-weighted mean
    request latency) or ``lifecycle_latency`` (setup + first calls + remaining expected
    calls x steady latency). ``include``/``exclude`` filter providers by name.
    """

    objective: str = field(default="steady_state_latency", validator=_check_objective)
    constraints: DeploymentConstraints = field(factory=DeploymentConstraints)
    measurement: MeasurementPolicy = field(factory=_default_measurement)
    quality: QualityPolicy = field(factory=_default_quality)
    include: tuple[str, ...] | None = field(default=None, converter=_names)
    exclude: tuple[str, ...] = field(default=(), converter=lambda v: _names(v) or ())

    def wants(self, provider_name: str) -> bool:
        if provider_name in self.exclude:
            return False
        return self.include is None or provider_name in self.include
