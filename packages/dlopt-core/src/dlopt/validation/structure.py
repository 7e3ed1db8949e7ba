"""Match a candidate's nested outputs against the reference, leaf by leaf, with paths.

Outputs may be tensors, tuples, lists, dicts (any mapping), namedtuples, dataclasses,
``None``, Python scalars and strings, nested to any depth. Paths are written the way a
user would index the output, rooted at ``out``: ``out["logits"][1]``, ``out.hidden``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import attrs
import torch

ROOT = "out"

_SCALAR_TYPES = (bool, int, float, complex)


@attrs.frozen
class LeafPair:
    """One numeric leaf present in both structures (tensors or Python number scalars)."""

    path: str
    candidate: Any
    reference: Any


def key_path(parent: str, key: object) -> str:
    """``parent["key"]`` for string keys, ``parent[3]`` for ints, ``parent[repr]`` else."""
    if isinstance(key, str):
        return f"{parent}[{json.dumps(key)}]"
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{parent}[{key}]"
    return f"{parent}[{key!r}]"


def attr_path(parent: str, name: str) -> str:
    return f"{parent}.{name}"


def type_name(obj: object) -> str:
    if obj is None:
        return "None"
    if isinstance(obj, torch.Tensor):
        return "Tensor"
    return type(obj).__qualname__


def is_namedtuple(obj: object) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def is_dataclass_instance(obj: object) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def format_shape(shape: tuple[int, ...] | torch.Size) -> str:
    dims = tuple(int(d) for d in shape)
    return f"({dims[0]},)" if len(dims) == 1 else str(dims)


def iter_leaves(obj: Any, path: str = ROOT) -> list[tuple[str, Any]]:
    """Every leaf of ``obj`` with its path, in traversal order.

    Raises ``TypeError`` naming the path of the first value of an unsupported type.
    """
    found: list[tuple[str, Any]] = []

    def walk(node: Any, here: str) -> None:
        if node is None or isinstance(node, (torch.Tensor, str, bytes, *_SCALAR_TYPES)):
            found.append((here, node))
        elif is_namedtuple(node):
            for name in node._fields:
                walk(getattr(node, name), attr_path(here, name))
        elif isinstance(node, (tuple, list)):
            for index, item in enumerate(node):
                walk(item, key_path(here, index))
        elif isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, key_path(here, key))
        elif is_dataclass_instance(node):
            for f in dataclasses.fields(node):
                walk(getattr(node, f.name), attr_path(here, f.name))
        else:
            raise TypeError(
                f"{here}: unsupported output type {type(node).__module__}.{type(node).__qualname__}; "
                "outputs must be tensors, tuples, lists, dicts, namedtuples, dataclasses, "
                "None, numbers or strings"
            )

    walk(obj, path)
    return found


def find_path(obj: Any, path: str) -> Any:
    """The node of ``obj`` at ``path`` (a leaf or a whole subtree); ``KeyError`` if none."""
    if path == ROOT:
        return obj
    missing = object()
    found: list[Any] = []

    def walk(node: Any, here: str) -> None:
        if found:
            return
        if here == path:
            found.append(node)
            return
        if not path.startswith(here):
            return
        if is_namedtuple(node):
            children = [(attr_path(here, n), getattr(node, n)) for n in node._fields]
        elif isinstance(node, (tuple, list)):
            children = [(key_path(here, i), v) for i, v in enumerate(node)]
        elif isinstance(node, Mapping):
            children = [(key_path(here, k), v) for k, v in node.items()]
        elif is_dataclass_instance(node):
            children = [
                (attr_path(here, f.name), getattr(node, f.name)) for f in dataclasses.fields(node)
            ]
        else:
            return
        for child_path, child in children:
            walk(child, child_path)

    walk(obj, ROOT)
    result = found[0] if found else missing
    if result is missing:
        raise KeyError(path)
    return result


def _dtype_problem(
    candidate: torch.Tensor, reference: torch.Tensor, output_dtype: torch.dtype | None
) -> str | None:
    if candidate.dtype == reference.dtype:
        return None
    floating = reference.is_floating_point() or reference.is_complex()
    if (
        output_dtype is not None
        and floating
        and candidate.dtype == output_dtype
        and (candidate.is_floating_point() or candidate.is_complex())
    ):
        return None  # the plan declared a lower-precision output; compared after upcast
    hint = ""
    if floating and (candidate.is_floating_point() or candidate.is_complex()):
        declared = "no output_dtype" if output_dtype is None else f"output_dtype={output_dtype}"
        hint = f" (the plan declared {declared})"
    return f"dtype {candidate.dtype} vs reference {reference.dtype}{hint}"


def match_structure(
    candidate: Any,
    reference: Any,
    *,
    output_dtype: torch.dtype | None = None,
    path: str = ROOT,
) -> tuple[list[LeafPair], list[str]]:
    """Pair the numeric leaves of ``candidate`` and ``reference``.

    Returns ``(pairs, mismatches)``: ``mismatches`` lists every structural difference as
    ``"<path>: <what> vs reference <what>"``; the pairs are only meaningful when it is empty.
    ``output_dtype`` is the dtype a plan declared for its floating outputs.
    """
    pairs: list[LeafPair] = []
    problems: list[str] = []

    def walk(c: Any, r: Any, here: str) -> None:
        if r is None or c is None:
            if (r is None) != (c is None):
                problems.append(f"{here}: {type_name(c)} vs reference {type_name(r)}")
            return
        if isinstance(r, torch.Tensor):
            if not isinstance(c, torch.Tensor):
                problems.append(f"{here}: type {type_name(c)} vs reference Tensor")
                return
            if c.shape != r.shape:
                problems.append(
                    f"{here}: shape {format_shape(c.shape)} vs reference {format_shape(r.shape)}"
                )
                return
            dtype_problem = _dtype_problem(c, r, output_dtype)
            if dtype_problem is not None:
                problems.append(f"{here}: {dtype_problem}")
                return
            pairs.append(LeafPair(here, c, r))
            return
        if type(c) is not type(r):
            # bool is an int subclass and namedtuples are tuples: compare exact types.
            problems.append(f"{here}: type {type_name(c)} vs reference {type_name(r)}")
            return
        if isinstance(r, _SCALAR_TYPES):
            pairs.append(LeafPair(here, c, r))
        elif isinstance(r, (str, bytes)):
            if c != r:
                problems.append(f"{here}: value {c!r} vs reference {r!r}")
        elif is_namedtuple(r):
            for name in r._fields:
                walk(getattr(c, name), getattr(r, name), attr_path(here, name))
        elif isinstance(r, (tuple, list)):
            if len(c) != len(r):
                problems.append(f"{here}: length {len(c)} vs reference {len(r)}")
                return
            for index, (ci, ri) in enumerate(zip(c, r)):
                walk(ci, ri, key_path(here, index))
        elif isinstance(r, Mapping):
            missing = [k for k in r if k not in c]
            extra = [k for k in c if k not in r]
            if missing or extra:
                parts = []
                if missing:
                    parts.append(f"missing keys {missing!r}")
                if extra:
                    parts.append(f"unexpected keys {extra!r}")
                problems.append(f"{here}: {', '.join(parts)} vs reference keys {list(r)!r}")
                return
            for key in r:
                walk(c[key], r[key], key_path(here, key))
        elif is_dataclass_instance(r):
            for f in dataclasses.fields(r):
                walk(getattr(c, f.name), getattr(r, f.name), attr_path(here, f.name))
        else:
            problems.append(f"{here}: unsupported output type {type_name(r)}")

    walk(candidate, reference, path)
    return pairs, problems
