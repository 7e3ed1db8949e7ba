"""``ServingInterface``: a decision's inputs and outputs as named tensors, for servers.

An HTTP endpoint (``dlopt serve``) and a Triton binding
(:mod:`dlopt.serving.triton`) speak flat, named arrays, not Python call signatures. The
interface is read from the raced cases: positional tensor arguments are ``arg0``,
``arg1``...; keyword tensor arguments keep their names. Outputs are ``out0``, ``out1``...
in the order of the model's output tensors, or their keys when the model returns a
mapping of tensors (a dict, a Hugging Face ``ModelOutput``). Each has a dtype and a shape
with ``-1`` wherever the raced cases differ (the batch dimension, a sequence length).

A model that takes anything but tensors at the top level (a nested structure, a flag)
has no wire interface: ``note`` says why, and servers refuse to start with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import torch
from attrs import frozen

from dlopt.errors import ServingError
from dlopt.platform.arrays import NUMPY_DTYPES, numpy_view
from dlopt.platform.npz import npz_bytes, read_npz_bytes
from dlopt.platform.tree import iter_tensors

#: numpy dtype names of the tensors an interface can carry.
WIRE_DTYPES = {str(d).removeprefix("torch."): d for d in NUMPY_DTYPES}


class BadRequest(ServingError):
    """A request that does not fit the interface (names, dtypes, shapes, the archive)."""


@frozen
class TensorSpec:
    """One named tensor of the interface: its dtype name and shape (-1: varies)."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def fits(self, array: np.ndarray) -> str | None:
        """Why ``array`` does not fit (``None`` when it does)."""
        if str(array.dtype) != self.dtype:
            return f"{self.name} is {array.dtype}, expected {self.dtype}"
        if array.ndim != len(self.shape):
            return f"{self.name} has {array.ndim} dimensions, expected {len(self.shape)}"
        for axis, (size, expected) in enumerate(zip(array.shape, self.shape)):
            if expected != -1 and size != expected:
                return (
                    f"{self.name} has size {size} in dimension {axis}, expected {expected} "
                    f"(shape {_shape_text(self.shape)})"
                )
        return None


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join("*" if s == -1 else str(s) for s in shape) + "]"


@frozen
class ServingInterface:
    """The named inputs and outputs a server exchanges with clients (see the module
    docstring); ``note`` says why there are none."""

    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    #: How many positional inputs come first among ``inputs`` (the rest are keywords).
    positional: int = 0
    note: str | None = None

    @property
    def usable(self) -> bool:
        return bool(self.inputs) and self.note is None

    def describe(self) -> str:
        """``arg0: float32[*, 3, 64, 64] -> out0: float32[*, 10]``."""
        if not self.usable:
            return f"no wire interface: {self.note}"
        ins = ", ".join(f"{s.name}: {s.dtype}{_shape_text(s.shape)}" for s in self.inputs)
        outs = ", ".join(f"{s.name}: {s.dtype}{_shape_text(s.shape)}" for s in self.outputs)
        return f"{ins} -> {outs}"

    # -- requests ---------------------------------------------------------------------------
    def call_arguments(self, arrays: Mapping[str, np.ndarray]) -> tuple[tuple[Any, ...], dict]:
        """The decision's ``(args, kwargs)`` from named arrays; :class:`BadRequest` names
        what is missing, extra or of the wrong dtype or shape."""
        expected = [s.name for s in self.inputs]
        missing = [n for n in expected if n not in arrays]
        extra = [n for n in arrays if n not in expected]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing)}")
            if extra:
                parts.append(f"unexpected {', '.join(extra)}")
            raise BadRequest(f"{'; '.join(parts)}: send {', '.join(expected)}")
        tensors = []
        for spec in self.inputs:
            problem = spec.fits(arrays[spec.name])
            if problem is not None:
                raise BadRequest(problem)
            tensors.append(torch.from_numpy(np.ascontiguousarray(arrays[spec.name])))
        names = [s.name for s in self.inputs[self.positional :]]
        kwargs = dict(zip(names, tensors[self.positional :]))
        return tuple(tensors[: self.positional]), kwargs

    def read_request(self, body: bytes) -> tuple[tuple[Any, ...], dict]:
        """The decision's ``(args, kwargs)`` from an ``.npz`` request body (never
        unpickled); :class:`BadRequest` says what is wrong with it."""
        entries = read_npz_bytes(body, where="the request body", error=BadRequest)
        return self.call_arguments(dict(entries))

    # -- responses --------------------------------------------------------------------------
    def write_response(self, outputs: Any) -> bytes:
        """The decision's outputs as ``.npz`` bytes."""
        return npz_bytes(output_arrays(self.outputs, outputs))


def output_arrays(specs: Sequence[TensorSpec], outputs: Any) -> list[tuple[str, np.ndarray]]:
    """A decision's outputs as named numpy arrays in the order of ``specs``, each in its
    spec's dtype: a plan computing in bf16 or fp16 answers in the dtype the interface
    announces (the reference's), which numpy and the wire can carry."""
    tensors = output_tensors(outputs)
    return [
        (spec.name, numpy_view(t.detach().to(WIRE_DTYPES[spec.dtype])).copy())
        for spec, t in zip(specs, tensors.values())
    ]


def output_tensors(outputs: Any) -> dict[str, torch.Tensor]:
    """Outputs by wire name: a mapping's keys when it maps names to tensors, else
    ``out0``... in the walker's order."""
    if isinstance(outputs, Mapping) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in outputs.items()
    ):
        return dict(outputs)
    return {f"out{i}": t for i, t in enumerate(iter_tensors(outputs))}


def _merged_shape(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    """One shape with -1 where the shapes differ (``None``: their ranks differ)."""
    if len({len(s) for s in shapes}) != 1:
        return None
    return tuple(sizes[0] if len(set(sizes)) == 1 else -1 for sizes in zip(*shapes))


def interface_of(cases: Sequence[Any]) -> ServingInterface:
    """The interface of raced cases (each with ``args``, ``kwargs`` and ``outputs``)."""
    first = cases[0]
    for where, value in [*((f"args[{i}]", a) for i, a in enumerate(first.args)),
                         *((f"kwargs[{k!r}]", v) for k, v in first.kwargs.items())]:  # fmt: skip
        if not isinstance(value, torch.Tensor):
            return ServingInterface(
                note=f"the model takes {where} = {type(value).__name__}, not a tensor; a "
                "server sends named tensors only"
            )
    names = [f"arg{i}" for i in range(len(first.args))] + list(first.kwargs)
    inputs = []
    for index, name in enumerate(names):
        values = [(c.args[index] if index < len(first.args) else c.kwargs[name]) for c in cases]
        spec = _spec(name, values)
        if isinstance(spec, str):
            return ServingInterface(note=spec)
        inputs.append(spec)
    per_case = [output_tensors(c.outputs) for c in cases]
    outputs = []
    for name in per_case[0]:
        spec = _spec(name, [found[name] for found in per_case if name in found])
        if isinstance(spec, str):
            return ServingInterface(note=spec)
        outputs.append(spec)
    return ServingInterface(tuple(inputs), tuple(outputs), positional=len(first.args))


def _spec(name: str, tensors: Sequence[Any]) -> TensorSpec | str:
    dtypes = {t.dtype for t in tensors if isinstance(t, torch.Tensor)}
    if len(dtypes) != 1 or len(tensors) == 0:
        return f"{name} is not one tensor dtype in every case"
    (dtype,) = dtypes
    text = str(dtype).removeprefix("torch.")
    if text not in WIRE_DTYPES:
        return f"{name} is {text}, which numpy cannot carry; send float32/float16/int/bool"
    shape = _merged_shape([tuple(t.shape) for t in tensors])
    if shape is None:
        return f"{name} has another rank in some case"
    return TensorSpec(name, text, shape)


def with_batch_free(interface: ServingInterface, dim: int) -> ServingInterface:
    """``interface`` with dimension ``dim`` of every input and output of that rank marked
    as varying (a server takes any batch size the decision serves)."""

    def free(spec: TensorSpec) -> TensorSpec:
        if len(spec.shape) <= dim:
            return spec
        shape = (*spec.shape[:dim], -1, *spec.shape[dim + 1 :])
        return attrs.evolve(spec, shape=shape)

    return attrs.evolve(
        interface,
        inputs=tuple(free(s) for s in interface.inputs),
        outputs=tuple(free(s) for s in interface.outputs),
    )
