"""Translate a workload's cases into Torch-TensorRT input specifications.

A TensorRT engine is built for a shape range per input: ``min``/``opt``/``max``. From the
cases (in a race: the prepared inputs, on the device plans are called with) we take, per
tensor argument, the smallest and largest size of every dimension over all cases, and as
``opt`` the shape of the case the ``opt_shape`` policy names (by default the one with the
most traffic: TensorRT tunes its kernels for that shape). A dimension that never varies
is static. Each input is traced with a case's own tensor where one has the maximum shape.
Pure Python: no SDK import; :func:`to_trt_input` converts using the SDK module handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from attrs import field, frozen

from dlopt.plugin import PreparedCase, WorkloadCase, WorkloadError, WorkloadProfile, iter_tensors

Case = PreparedCase | WorkloadCase

#: How the ``opt`` shape is chosen: by the cases' traffic weight, or by their size.
OPT_SHAPE_POLICIES = ("heaviest", "largest", "smallest")


@frozen
class InputSpec:
    """Shape range and dtype of one tensor argument.

    ``example``: the tensor to trace with, at ``max_shape`` (a case's own tensor when one
    has that shape, else one made on the cases' device); ``None`` for a spec made by hand.
    """

    name: str
    min_shape: tuple[int, ...]
    opt_shape: tuple[int, ...]
    max_shape: tuple[int, ...]
    dtype: torch.dtype
    example: torch.Tensor | None = field(default=None, eq=False, repr=False)

    @property
    def is_dynamic(self) -> bool:
        return self.min_shape != self.max_shape

    def describe(self) -> dict[str, Any]:
        """JSON-able form for plan metadata."""
        return {
            "name": self.name,
            "min_shape": list(self.min_shape),
            "opt_shape": list(self.opt_shape),
            "max_shape": list(self.max_shape),
            "dtype": str(self.dtype).replace("torch.", ""),
            "dynamic": self.is_dynamic,
        }


@frozen
class WorkloadInputs:
    """Specs for the positional and keyword tensor arguments, plus the ``opt`` case."""

    args: tuple[InputSpec, ...]
    kwargs: dict[str, InputSpec]
    opt_case: str

    @property
    def is_dynamic(self) -> bool:
        return any(s.is_dynamic for s in (*self.args, *self.kwargs.values()))

    def describe(self) -> list[dict[str, Any]]:
        return [s.describe() for s in (*self.args, *self.kwargs.values())]

    def shape_support(self) -> str:
        """How the engine serves the cases' shapes, in words (the report shows it): the
        shape range of each dynamic input and the case it is tuned for, or fixed shapes."""
        specs = [s for s in (*self.args, *self.kwargs.values()) if s.is_dynamic]
        if not specs:
            return "one TensorRT engine at fixed input shapes"
        ranges = ", ".join(
            f"{s.name} {list(s.min_shape)} to {list(s.max_shape)} (tuned for {list(s.opt_shape)})"
            for s in specs
        )
        return f"one TensorRT engine with a shape range: {ranges}, opt case {self.opt_case!r}"


def _tensor(case: Case, where: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise WorkloadError(
            f"case {case.name!r}: {where} is a {type(value).__name__}; TensorRT plans take "
            "tensor arguments only (wrap the model so that constants are not arguments)"
        )
    return value


def _spec(name: str, tensors: Sequence[tuple[Case, torch.Tensor]], opt: Case) -> InputSpec:
    ranks = {t.dim() for _, t in tensors}
    if len(ranks) != 1:
        raise WorkloadError(
            f"{name}: cases disagree on the number of dimensions ({sorted(ranks)}); one "
            "TensorRT engine needs one rank per input"
        )
    dtypes = {t.dtype for _, t in tensors}
    if len(dtypes) != 1:
        raise WorkloadError(
            f"{name}: cases disagree on dtype ({sorted(str(d) for d in dtypes)}); "
            "one TensorRT engine needs one dtype per input"
        )
    shapes = [tuple(t.shape) for _, t in tensors]
    min_shape = tuple(min(dims) for dims in zip(*shapes))
    max_shape = tuple(max(dims) for dims in zip(*shapes))
    opt_shape = next(tuple(t.shape) for case, t in tensors if case is opt)
    dtype = dtypes.pop()
    # torch.export specializes a dim traced at size 0 or 1, so the trace uses the maximum.
    example = next((t for _, t in tensors if tuple(t.shape) == max_shape), None)
    if example is None:
        example = _made(max_shape, dtype, tensors[0][1].device)
    return InputSpec(name, min_shape, opt_shape, max_shape, dtype, example)


def _size(case: Case) -> int:
    return sum(t.numel() for t in iter_tensors((case.args, case.kwargs)))


#: The key each ``opt_shape`` policy maximises (the first case wins ties).
_OPT_KEYS: dict[str, Callable[[Case], float]] = {
    "heaviest": lambda c: c.weight,
    "largest": _size,
    "smallest": lambda c: -_size(c),
}


def derive_inputs(
    workload: WorkloadProfile | Sequence[Case],
    arg_names: Sequence[str] = (),
    opt_shape: str = "heaviest",
) -> WorkloadInputs:
    """Shape ranges for every tensor argument across the cases of ``workload``.

    ``workload``: a :class:`WorkloadProfile` or its cases (in a race, the prepared
    ``context.cases``). ``arg_names`` are the model's positional parameter names:
    Torch-TensorRT names the dynamic dimensions it exports after them, so two inputs
    never share a symbol. ``opt_shape``: which case gives the shapes TensorRT tunes for
    (``"heaviest"`` traffic weight, ``"largest"`` or ``"smallest"`` input size).
    """
    if isinstance(workload, WorkloadProfile):
        cases: Sequence[Case] = workload.cases
        where = f"workload {workload.name!r}"
    else:
        cases, where = tuple(workload), "the workload"
    if not cases:
        raise WorkloadError(f"{where} has no cases; a TensorRT engine is built for their shapes")
    if opt_shape not in _OPT_KEYS:
        raise ValueError(f"opt_shape must be one of {', '.join(OPT_SHAPE_POLICIES)}")
    arg_counts = {len(c.args) for c in cases}
    if len(arg_counts) != 1:
        raise WorkloadError(
            f"{where}: cases pass different numbers of positional "
            f"arguments ({sorted(arg_counts)}); a TensorRT engine has one signature"
        )
    kwarg_names = {tuple(sorted(c.kwargs)) for c in cases}
    if len(kwarg_names) != 1:
        raise WorkloadError(
            f"{where}: cases pass different keyword arguments; a TensorRT engine has one signature"
        )
    opt = max(cases, key=_OPT_KEYS[opt_shape])
    args = tuple(
        _spec(
            arg_names[i] if i < len(arg_names) else f"arg{i}",
            [(c, _tensor(c, f"positional argument {i}", c.args[i])) for c in cases],
            opt,
        )
        for i in range(arg_counts.pop())
    )
    kwargs = {
        key: _spec(
            key, [(c, _tensor(c, f"keyword argument {key!r}", c.kwargs[key])) for c in cases], opt
        )
        for key in kwarg_names.pop()
    }
    return WorkloadInputs(args, kwargs, opt.name)


def _made(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, dtype=dtype, device=device)
    return torch.ones(shape, dtype=dtype, device=device)


def example_tensor(spec: InputSpec) -> torch.Tensor:
    """The tensor to trace ``spec``'s input with, at ``max_shape``.

    torch.export specializes a dimension traced at size 0 or 1, so tracing at an ``opt``
    of batch 1 would freeze the batch; every varying dimension is > 1 at its maximum.
    ``spec.example`` when set (a case's tensor, or one made beside the cases); else made
    on the CPU (Torch-TensorRT moves trace inputs to the compile device itself).
    """
    if spec.example is not None:
        return spec.example
    return _made(spec.max_shape, spec.dtype, "cpu")


def to_trt_input(spec: InputSpec, torch_tensorrt: Any) -> Any:
    """A ``torch_tensorrt.Input``: static when no dimension varies, else min/opt/max;
    either way with the tensor to trace with (:func:`example_tensor`)."""
    if not spec.is_dynamic:
        return torch_tensorrt.Input(
            shape=spec.opt_shape,
            dtype=spec.dtype,
            name=spec.name,
            torch_tensor=example_tensor(spec),
        )
    return torch_tensorrt.Input(
        min_shape=spec.min_shape,
        opt_shape=spec.opt_shape,
        max_shape=spec.max_shape,
        dtype=spec.dtype,
        name=spec.name,
        torch_tensor=example_tensor(spec),
    )
