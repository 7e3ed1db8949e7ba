"""Representative serving inputs: one signature or a weighted traffic mix of cases."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from attrs import field, frozen

from dlopt.errors import WorkloadError
from dlopt.platform.config_checks import integer, number, text
from dlopt.vocabulary import GradMode


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


def _grad_mode(value: GradMode | str) -> GradMode:
    return GradMode.coerce(
        value,
        "grad_mode",
        error=WorkloadError,
        hint=" (the calling context your serving code calls the model in: inference_mode "
        "for `with torch.inference_mode():`)",
    )


@frozen(eq=False)
class WorkloadProfile:
    """A weighted mix of request signatures, plus how many calls the deployment expects.

    ``inputs`` says where the example inputs came from (``"random tensors of the given
    shapes"``, ``"npz file x.npz, 2 entries"``...); the report records it.

    ``grad_mode`` is the calling context the deployment serves in: ``inference_mode``
    (default: calls inside ``torch.inference_mode()`` on inputs made there), ``no_grad``
    or ``enabled``. Every plan's first calls, validation, race and revalidation run in it,
    so what is judged is what serves; the decision still serves callers in the other two
    (docs/serving.md).
    """

    cases: tuple[WorkloadCase, ...] = field(converter=_as_cases)
    name: str = field(default="workload", validator=text(error=WorkloadError))
    expected_calls: int | None = field(
        default=None, validator=integer(minimum=0, optional=True, error=WorkloadError)
    )
    inputs: str | None = field(default=None, validator=text(optional=True, error=WorkloadError))
    #: A batched profile (:meth:`batched`): the batch size of each case, in case order.
    batch_sizes: tuple[int, ...] | None = None
    #: The dimension the batched profile stacks requests along.
    batch_dim: int = 0
    #: Whether the selection drops the batch sizes from the first one that runs out of
    #: memory on the reference (``batched(max_batch_size=...)``).
    fit_to_memory: bool = False
    #: Why batch sizes were dropped for memory (set by the selection), else ``None``.
    memory_note: str | None = None
    #: The calling context plans are judged and served in.
    grad_mode: GradMode = field(default=GradMode.INFERENCE_MODE, converter=_grad_mode)

    def __attrs_post_init__(self) -> None:
        if self.batch_sizes is not None and len(self.batch_sizes) != len(self.cases):
            raise WorkloadError(
                f"workload {self.name!r}: batch_sizes has {len(self.batch_sizes)} entries for "
                f"{len(self.cases)} cases; build a batched profile with WorkloadProfile.batched"
            )
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
        """A profile of one signature: ``WorkloadProfile.single(x)`` (keyword arguments
        are the model's; set ``grad_mode`` with ``attrs.evolve`` or the constructor)."""
        return cls(cases=(WorkloadCase(name, args=args, kwargs=kwargs),), name=name)

    @classmethod
    def batched(
        cls,
        sample: Any,
        *,
        batch_sizes: Iterable[int] | None = None,
        max_batch_size: int | None = None,
        batch_dim: int = 0,
        kwargs: Mapping[str, Any] | None = None,
        name: str = "batched",
        grad_mode: GradMode | str = GradMode.INFERENCE_MODE,
    ) -> WorkloadProfile:
        """A profile of one request served at several batch sizes (one case per size).

        ``sample`` is ONE request, batch 1 along ``batch_dim``: a tensor, or a tuple/list
        of positional arguments (nested tuples, lists and dicts are fine); ``kwargs`` its
        keyword arguments. Every tensor in it is repeated along ``batch_dim``; other
        leaves (numbers, strings, booleans, ``None``) are constants passed unchanged.
        ``batch_sizes`` (default ``1, 2, 4, 8, 16, 32``) or ``max_batch_size`` (powers of
        two up to it, the selection stopping at the first size that runs out of memory
        on the reference, with the reason in the report). Case ``batch_B`` carries weight
        ``1/B``: the race's aggregate score is then the summed cost per item.
        """
        if batch_sizes is not None and max_batch_size is not None:
            raise WorkloadError(
                "give batch_sizes or max_batch_size, not both: batch_sizes lists the sizes "
                "to race, max_batch_size races powers of two up to it"
            )
        if max_batch_size is not None:
            if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int):
                raise WorkloadError(
                    f"max_batch_size must be a whole number >= 1 (e.g. 64), got {max_batch_size!r}"
                )
            sizes = _powers_of_two_up_to(max_batch_size)
        else:
            sizes = _checked_batch_sizes(
                (1, 2, 4, 8, 16, 32) if batch_sizes is None else batch_sizes
            )
        if isinstance(batch_dim, bool) or not isinstance(batch_dim, int) or batch_dim < 0:
            raise WorkloadError(
                f"batch_dim must be a dimension index >= 0 (0: the first), got {batch_dim!r}"
            )
        args = _as_tuple(sample)
        named = _as_dict(kwargs)
        _check_batchable(args, "args", batch_dim)
        _check_batchable(named, "kwargs", batch_dim)
        cases = tuple(
            WorkloadCase(
                f"batch_{size}",
                args=_repeat(args, size, batch_dim),
                kwargs=_repeat(named, size, batch_dim),
                weight=1.0 / size,
            )
            for size in sizes
        )
        return cls(
            cases=cases,
            name=name,
            inputs=f"one request repeated along dim {batch_dim} at batch sizes "
            + ", ".join(map(str, sizes)),
            batch_sizes=sizes,
            batch_dim=batch_dim,
            fit_to_memory=max_batch_size is not None,
            grad_mode=grad_mode,
        )

    def as_batched(
        self,
        batch_sizes: Iterable[int] | None = None,
        *,
        max_batch_size: int | None = None,
    ) -> WorkloadProfile:
        """This profile's one request served at several batch sizes (:meth:`batched`).

        A profile of one case: that case is the request (batch 1 along dim 0). A batched
        profile: itself when no sizes are given, else its batch-1 case at the new sizes.
        Anything else (several signatures) is a :class:`~dlopt.errors.WorkloadError`.
        """
        if self.batch_sizes is not None:
            if batch_sizes is None and max_batch_size is None:
                return self
            cases = self.cases[:1] if self.batch_sizes[0] == 1 else ()
        else:
            cases = self.cases
        if len(cases) != 1:
            raise WorkloadError(
                f"workload {self.name!r} has {len(self.cases)} cases, and serving at several "
                "batch sizes starts from ONE request: give a profile of one signature "
                "(WorkloadProfile.single(x[:1])) or WorkloadProfile.batched(sample)"
            )
        (case,) = cases
        profile = WorkloadProfile.batched(
            tuple(case.args),  # a tuple: the positional arguments, as given
            batch_sizes=batch_sizes,
            max_batch_size=max_batch_size,
            batch_dim=self.batch_dim,
            kwargs=case.kwargs,
            name=self.name,
        )
        import attrs

        profile = attrs.evolve(profile, grad_mode=self.grad_mode)
        if self.inputs and self.batch_sizes is None:
            profile = attrs.evolve(profile, inputs=f"{self.inputs}; {profile.inputs}")
        return profile

    def batch_size_of(self, index: int) -> int:
        """The batch size of case ``index`` (1 for a profile that is not batched)."""
        return 1 if self.batch_sizes is None else self.batch_sizes[index]

    def first_cases(self, count: int, memory_note: str | None = None) -> WorkloadProfile:
        """This profile cut to its first ``count`` cases (a batched profile: its smallest
        batch sizes), with ``memory_note`` saying why."""
        import attrs

        return attrs.evolve(
            self,
            cases=self.cases[:count],
            batch_sizes=None if self.batch_sizes is None else self.batch_sizes[:count],
            memory_note=memory_note if memory_note is not None else self.memory_note,
        )

    @property
    def weights(self) -> tuple[float, ...]:
        """Traffic shares normalised to sum to 1, in case order."""
        total = float(sum(case.weight for case in self.cases))
        return tuple(case.weight / total for case in self.cases)


#: Leaves a batched sample passes unchanged to every batch size.
_CONSTANT_TYPES = (bool, int, float, complex, str, bytes, type(None))
#: The largest batch size a batched profile accepts: beyond it a repeated sample is
#: certain to exhaust any memory.
MAX_BATCH_SIZE = 1 << 20


def _checked_batch_sizes(values: Iterable[int]) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise WorkloadError(f"batch_sizes must be a list of whole numbers >= 1, got {values!r}")
    sizes = tuple(values)
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
            raise WorkloadError(
                f"batch_sizes must be whole numbers from 1 to {MAX_BATCH_SIZE}, got {size!r} "
                "(e.g. batch_sizes=(1, 2, 4, 8))"
            )
    if not sizes:
        raise WorkloadError("batch_sizes is empty: give at least one, e.g. (1, 2, 4, 8)")
    if len(set(sizes)) != len(sizes):
        raise WorkloadError(f"batch_sizes repeats a size: {list(sizes)}; list each size once")
    return tuple(sorted(sizes))


def _powers_of_two_up_to(limit: int) -> tuple[int, ...]:
    if not 1 <= limit <= MAX_BATCH_SIZE:
        raise WorkloadError(
            f"max_batch_size must be from 1 to {MAX_BATCH_SIZE} (e.g. 64), got {limit!r}"
        )
    sizes = [1]
    while sizes[-1] * 2 <= limit:
        sizes.append(sizes[-1] * 2)
    if sizes[-1] != limit:
        sizes.append(limit)  # the limit itself is raced too, so the cap is honoured exactly
    return tuple(sizes)


def _check_batchable(value: Any, path: str, dim: int, depth: int = 0) -> None:
    """Refuse a sample that cannot be repeated along ``dim``, naming the leaf."""
    if depth > 50:
        raise WorkloadError(f"{path} is nested more than 50 levels deep: flatten the sample")
    if isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            _check_batchable(item, f"{path}[{index}]", dim, depth + 1)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_batchable(item, f"{path}[{key!r}]", dim, depth + 1)
        return
    if isinstance(value, _CONSTANT_TYPES):
        return
    if not (hasattr(type(value), "shape") and hasattr(value, "numel")):
        raise WorkloadError(
            f"the batched sample's {path} is a {type(value).__name__}, which cannot be "
            "batched: give tensors (batched along batch_dim) or constants (numbers, strings, "
            "booleans, None); pass anything else through a WorkloadCase per batch size"
        )
    shape = tuple(int(d) for d in value.shape)
    if len(shape) <= dim:
        raise WorkloadError(
            f"the batched sample's {path} has shape {list(shape)}, with no dimension {dim} to "
            f"batch along: give it a batch dimension of size 1 (x.unsqueeze({dim})) or choose "
            "another batch_dim"
        )
    if shape[dim] != 1:
        raise WorkloadError(
            f"the batched sample's {path} has size {shape[dim]} along batch_dim {dim}: the "
            f"sample is ONE request, so every tensor needs size 1 there (take x[:1]) or "
            "choose the batch_dim its requests are stacked along"
        )


def _repeat(value: Any, size: int, dim: int) -> Any:
    """``value`` with every tensor repeated ``size`` times along ``dim`` (a fresh copy)."""
    if isinstance(value, tuple):
        return tuple(_repeat(item, size, dim) for item in value)
    if isinstance(value, list):
        return [_repeat(item, size, dim) for item in value]
    if isinstance(value, Mapping):
        return {key: _repeat(item, size, dim) for key, item in value.items()}
    if isinstance(value, _CONSTANT_TYPES):
        return value
    repeats = [1] * len(value.shape)
    repeats[dim] = size
    return value.repeat(*repeats)
