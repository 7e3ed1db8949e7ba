"""Representative serving inputs: one signature or a weighted traffic mix of cases."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from attrs import field, frozen

from dlopt.errors import WorkloadError
from dlopt.platform.config_checks import integer, number, text


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, list):
        return tuple(value)
    # A single tensor (or other value) is the one positional argument.
    return (value,)


def _as_dict(value: Mapping[str, Any] | None) -> dict[str, Any]:
    if value is not None and not isinstance(value, Mapping):
        raise WorkloadError(
            f"WorkloadCase.kwargs must be a dict of keyword arguments, got {value!r}"
        )
    result = dict(value or {})
    bad = [key for key in result if not isinstance(key, str)]
    if bad:
        raise WorkloadError(
            f"WorkloadCase.kwargs keys are the model's keyword argument names (strings), "
            f"got {bad[0]!r}"
        )
    return result


def _as_cases(value: Iterable[WorkloadCase]) -> tuple[WorkloadCase, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise WorkloadError(f"WorkloadProfile.cases must be a list of WorkloadCase, got {value!r}")
    cases = tuple(value)
    for case in cases:
        if not isinstance(case, WorkloadCase):
            raise WorkloadError(
                f"WorkloadProfile.cases must hold WorkloadCase objects, got "
                f"{type(case).__name__} {case!r}"
            )
    return cases


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
    weight: float = field(
        default=1.0,
        validator=number(
            minimum=0, low_open=True, hint=" (its share of traffic)", error=WorkloadError
        ),
    )

    def __attrs_post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise WorkloadError("every WorkloadCase needs a non-empty string name")
        for path, shape in _tensor_shapes(self.args, "args"):
            if 0 in shape:
                raise WorkloadError(
                    f"case {self.name!r}: {path} has shape {shape}, with no elements (a batch "
                    "of size 0); a plan cannot be timed on it: give at least one element per "
                    "dimension"
                )
        for key, value in self.kwargs.items():
            for path, shape in _tensor_shapes(value, f"kwargs[{key!r}]"):
                if 0 in shape:
                    raise WorkloadError(
                        f"case {self.name!r}: {path} has shape {shape}, with no elements (a "
                        "batch of size 0); give at least one element per dimension"
                    )


def _tensor_shapes(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, tuple[int, ...]]]:
    """``(path, shape)`` of every tensor-like leaf (it has a ``shape``) in nested
    tuples, lists and dicts; torch is not imported here."""
    if depth > 50:
        return
    if isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from _tensor_shapes(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _tensor_shapes(item, f"{path}[{key!r}]", depth + 1)
    elif hasattr(type(value), "shape") and hasattr(value, "numel"):
        yield path, tuple(int(d) for d in value.shape)


@frozen(eq=False)
class WorkloadProfile:
    """A weighted mix of request signatures, plus how many calls the deployment expects.

    ``inputs`` says where the example inputs came from (``"random tensors of the given
    shapes"``, ``"npz file x.npz, 2 entries"``...); the report records it.
    """

    cases: tuple[WorkloadCase, ...] = field(converter=_as_cases)
    name: str = field(default="workload", validator=text(error=WorkloadError))
    expected_calls: int | None = field(
        default=None, validator=integer(minimum=0, optional=True, error=WorkloadError)
    )
    inputs: str | None = field(default=None, validator=text(optional=True, error=WorkloadError))

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
        if not math.isfinite(sum(float(case.weight) for case in self.cases)):
            raise WorkloadError(
                f"workload {self.name!r}: the case weights overflow when summed (largest "
                f"{max(case.weight for case in self.cases):g}); weights are relative shares "
                "of traffic: scale them down, e.g. to percentages"
            )

    @classmethod
    def single(cls, *args: Any, name: str = "default", **kwargs: Any) -> WorkloadProfile:
        """A profile of one signature: ``WorkloadProfile.single(x)``."""
        return cls(cases=(WorkloadCase(name, args=args, kwargs=kwargs),), name=name)

    @property
    def weights(self) -> tuple[float, ...]:
        """Traffic shares normalised to sum to 1, in case order."""
        total = float(sum(case.weight for case in self.cases))
        return tuple(case.weight / total for case in self.cases)
