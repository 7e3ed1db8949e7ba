"""Translate a dlopt workload into Torch-TensorRT input specifications.

A TensorRT engine is built for a shape range per input: ``min``/``opt``/``max``. From the
workload we take, per tensor argument, the smallest and largest size of every dimension
over all cases, and the shape of the case with the most traffic as ``opt`` (TensorRT
tunes its kernels for that shape). A dimension that never varies is static. Pure Python:
no SDK import; :func:`to_trt_inputs` converts using the SDK module handed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from attrs import frozen

from dlopt.errors import WorkloadError
from dlopt.workload import WorkloadCase, WorkloadProfile


@frozen
class InputSpec:
    """Shape range and dtype of one tensor argument."""

    name: str
    min_shape: tuple[int, ...]
    opt_shape: tuple[int, ...]
    max_shape: tuple[int, ...]
    dtype: torch.dtype

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


def _tensor(case: WorkloadCase, where: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise WorkloadError(
            f"case {case.name!r}: {where} is a {type(value).__name__}; TensorRT plans take "
            "tensor arguments only (wrap the model so that constants are not arguments)"
        )
    return value


def _spec(
    name: str, tensors: Sequence[tuple[WorkloadCase, torch.Tensor]], opt: WorkloadCase
) -> InputSpec:
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
    return InputSpec(name, min_shape, opt_shape, max_shape, dtypes.pop())


def derive_inputs(workload: WorkloadProfile, arg_names: Sequence[str] = ()) -> WorkloadInputs:
    """Shape ranges for every tensor argument across ``workload``'s cases.

    ``arg_names`` are the model's positional parameter names: Torch-TensorRT names the
    dynamic dimensions it exports after them, so two inputs never share a symbol.
    """
    cases = workload.cases
    arg_counts = {len(c.args) for c in cases}
    if len(arg_counts) != 1:
        raise WorkloadError(
            f"workload {workload.name!r}: cases pass different numbers of positional "
            f"arguments ({sorted(arg_counts)}); a TensorRT engine has one signature"
        )
    kwarg_names = {tuple(sorted(c.kwargs)) for c in cases}
    if len(kwarg_names) != 1:
        raise WorkloadError(
            f"workload {workload.name!r}: cases pass different keyword arguments; "
            "a TensorRT engine has one signature"
        )
    # Heaviest traffic first; the first such case on ties.
    opt = max(cases, key=lambda c: c.weight)
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


def example_tensor(spec: InputSpec) -> torch.Tensor:
    """A tensor at ``max_shape`` for tracing a dynamic input.

    torch.export specializes a dimension traced at size 0 or 1, so tracing at an ``opt``
    of batch 1 would freeze the batch; every varying dimension is > 1 at its maximum.
    Made on the CPU: Torch-TensorRT moves trace inputs to the compile device itself.
    """
    if spec.dtype.is_floating_point or spec.dtype.is_complex:
        return torch.randn(spec.max_shape, dtype=spec.dtype)
    return torch.ones(spec.max_shape, dtype=spec.dtype)


def to_trt_input(spec: InputSpec, torch_tensorrt: Any) -> Any:
    """A ``torch_tensorrt.Input``: static when no dimension varies, else min/opt/max."""
    if not spec.is_dynamic:
        return torch_tensorrt.Input(shape=spec.opt_shape, dtype=spec.dtype, name=spec.name)
    return torch_tensorrt.Input(
        min_shape=spec.min_shape,
        opt_shape=spec.opt_shape,
        max_shape=spec.max_shape,
        dtype=spec.dtype,
        name=spec.name,
        torch_tensor=example_tensor(spec),
    )
