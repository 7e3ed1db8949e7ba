"""``GuardPolicy``: how a decision guards its plan in production (docs/serving.md).

The race proves a plan on the inputs it saw. Serving meets others, and a plan that
passed can fail later (a device lost, a driver reset) or turn wrong or slow. The guard
is what a decision does about it, per call: inputs outside the raced domain (NaN or
infinity) take the policy's route, a plan that raises is replaced by eager fp32 for
that call and disabled after ``max_failures`` in a row, and a ``shadow_rate`` share of
calls is run by eager fp32 too, off the caller's path, and compared within the plan's
own validation limits (``max_mismatches`` of them disable the plan).

``OptimizationPolicy`` carries these as flat fields (``on_nonfinite_input=...``);
:meth:`GuardPolicy.of` gathers them, and :func:`dlopt.load_bundle` takes one directly.
They change how a decision serves, not what it decided, so they are not part of the plan
cache's key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import field, frozen

from dlopt.platform.config_checks import integer, number, one_of
from dlopt.platform.serialization import user_document
from dlopt.vocabulary import NonFiniteInput, PlanFailure

#: A production value for ``shadow_rate``: one call in a hundred is also run by eager
#: fp32 in the background (docs/serving.md measures what it costs the caller).
PRODUCTION_SHADOW_RATE = 0.01


def _nonfinite(value: Any) -> Any:
    return NonFiniteInput.lookup(value) or value


def _failure(value: Any) -> Any:
    return PlanFailure.lookup(value) or value


#: The guard's fields, declared once: :class:`GuardPolicy` holds them, and
#: ``OptimizationPolicy`` carries them flat (``guard_field("shadow_rate")`` in both).
_FIELDS: dict[str, Callable[[], Any]] = {
    "on_nonfinite_input": lambda: field(
        default=NonFiniteInput.FALLBACK,
        converter=_nonfinite,
        validator=one_of(v.value for v in NonFiniteInput),
    ),
    "on_plan_failure": lambda: field(
        default=PlanFailure.FALLBACK,
        converter=_failure,
        validator=one_of(v.value for v in PlanFailure),
    ),
    "max_failures": lambda: field(
        default=3, validator=integer(minimum=1, hint=" (failures in a row)")
    ),
    "shadow_rate": lambda: field(
        default=0.0, validator=number(minimum=0, maximum=1, hint=" (a share of calls, e.g. 0.01)")
    ),
    "max_mismatches": lambda: field(
        default=3, validator=integer(minimum=1, hint=" (shadow mismatches)")
    ),
}


def guard_field(name: str) -> Any:
    """The attrs field of the guard setting ``name`` (its default, converter, validator)."""
    return _FIELDS[name]()


@user_document
@frozen
class GuardPolicy:
    """How a decision guards its plan (see the module docstring).

    ``on_nonfinite_input``: a call whose floating inputs hold NaN or infinity is served
    by eager fp32 (``"fallback"``, default; a warning the first time, counted), refused
    (``"raise"``: :class:`~dlopt.errors.NonFiniteInputError`) or served by the plan
    unchecked (``"serve"``). ``on_plan_failure``: a call on which the plan raises is
    served by eager fp32 (``"fallback"``, default; warned once, counted) or the exception
    reaches the caller (``"raise"``); under ``"fallback"``, ``max_failures`` consecutive
    failures disable the plan and eager fp32 serves every later call. ``shadow_rate``:
    the share of plan calls also run by eager fp32 on a copy of the inputs, in a
    background thread, and compared within the plan's validation limits (0 = off;
    :data:`PRODUCTION_SHADOW_RATE` is a production value); ``max_mismatches`` mismatches
    disable the plan.
    """

    on_nonfinite_input: NonFiniteInput = guard_field("on_nonfinite_input")  # noqa: RUF009
    on_plan_failure: PlanFailure = guard_field("on_plan_failure")  # noqa: RUF009
    max_failures: int = guard_field("max_failures")
    shadow_rate: float = guard_field("shadow_rate")
    max_mismatches: int = guard_field("max_mismatches")

    @classmethod
    def of(cls, policy: Any) -> GuardPolicy:
        """The guard an :class:`~dlopt.settings.policy.OptimizationPolicy` asks for."""
        return cls(**{name: getattr(policy, name) for name in _FIELDS})
