"""Representative serving inputs: one signature or a weighted traffic mix of cases."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from attrs import field, frozen

from dlopt.errors import WorkloadError


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, list):
        return tuple(value)
    # A single tensor (or other value) is the one positional argument.
    return (value,)


def _as_dict(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value or {})


def _as_cases(value: Iterable[WorkloadCase]) -> tuple[WorkloadCase, ...]:
    return tuple(value)


@frozen(eq=False)
class WorkloadCase:
    """One request signature the model serves.

    ``args``/``kwargs`` are passed to the model exactly as given (nested tuples, lists,
    dicts and non-tensor values are fine). ``weight`` is this case's share of traffic,
    relative to the other cases.
    """

    name: str
    args: tuple[Any, ...] = field(default=(), converter=_as_tuple)
    kwargs: dict[str, Any] = field(factory=dict, converter=_as_dict)
    weight: float = 1.0

    def __attrs_post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise WorkloadError("every WorkloadCase needs a non-empty string name")
        if (
            not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight))
            or self.weight <= 0
        ):
            raise WorkloadError(
                f"case {self.name!r}: weight must be a finite number > 0, got {self.weight!r}"
            )


@frozen(eq=False)
class WorkloadProfile:
    """A weighted mix of request signatures, plus how many calls the deployment expects."""

    cases: tuple[WorkloadCase, ...] = field(converter=_as_cases)
    name: str = "workload"
    expected_calls: int | None = None

    def __attrs_post_init__(self) -> None:
        if not self.cases:
            raise WorkloadError(
                f"workload {self.name!r} has no cases: pass at least one WorkloadCase"
            )
        names = [case.name for case in self.cases]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise WorkloadError(
                f"workload {self.name!r}: case names must be unique, repeated: {duplicates}"
            )
        if self.expected_calls is not None and self.expected_calls < 0:
            raise WorkloadError(f"expected_calls must be >= 0, got {self.expected_calls}")

    @classmethod
    def single(cls, *args: Any, name: str = "default", **kwargs: Any) -> WorkloadProfile:
        """A profile of one signature: ``WorkloadProfile.single(x)``."""
        return cls(cases=(WorkloadCase(name, args=args, kwargs=kwargs),), name=name)

    @property
    def weights(self) -> tuple[float, ...]:
        """Traffic shares normalised to sum to 1, in case order."""
        total = float(sum(case.weight for case in self.cases))
        return tuple(case.weight / total for case in self.cases)
