"""Match a candidate's nested outputs against the reference, leaf by leaf, with paths.

Outputs may be tensors, tuples, lists, dicts (any mapping), namedtuples, dataclasses,
``None``, Python scalars and strings, nested to any depth. Paths are written the way a
user would index the output, rooted at ``out``: ``out["logits"][1]``, ``out.hidden``.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from torch.utils._pytree import KeyEntry, SequenceKey

from dlopt.platform.tree import child_path, expand, find, leaves_with_paths

ROOT = "out"

_SCALAR_TYPES = (bool, int, float, complex)


@attrs.frozen
class LeafPair:
    """One numeric leaf present in both structures (tensors or Python number scalars)."""

    path: str
    candidate: Any
    reference: Any


def type_name(obj: object) -> str:
    if obj is None:
        return "None"
    if isinstance(obj, torch.Tensor):
        return "Tensor"
    return type(obj).__qualname__


def format_shape(shape: tuple[int, ...] | torch.Size) -> str:
    dims = tuple(int(d) for d in shape)
    return f"({dims[0]},)" if len(dims) == 1 else str(dims)


def _is_output_leaf(obj: object) -> bool:
    return obj is None or isinstance(obj, (torch.Tensor, str, bytes, *_SCALAR_TYPES))


def iter_leaves(obj: Any, path: str = ROOT) -> list[tuple[str, Any]]:
    """Every leaf of ``obj`` with its path, in traversal order.

    Raises ``TypeError`` naming the path of the first value of an unsupported type.
    """
    found = leaves_with_paths(obj, path)
    for here, leaf in found:
        if not _is_output_leaf(leaf):
            raise TypeError(
                f"{here}: unsupported output type {type(leaf).__module__}.{type(leaf).__qualname__}; "
                "outputs must be tensors, tuples, lists, dicts, namedtuples, dataclasses, "
                "None, numbers or strings"
            )
    return found


def find_path(obj: Any, path: str) -> Any:
    """The node of ``obj`` at ``path`` (a leaf or a whole subtree); ``KeyError`` if none."""
    return find(obj, path, ROOT)


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
            return
        if isinstance(r, (str, bytes)):
            if c != r:
                problems.append(f"{here}: value {c!r} vs reference {r!r}")
            return
        r_node, c_node = expand(r), expand(c)
        if r_node is None or c_node is None:
            problems.append(f"{here}: unsupported output type {type_name(r)}")
            return
        difference = _key_difference(c_node.keys, r_node.keys)
        if difference is not None:
            problems.append(f"{here}: {difference}")
            return
        by_key = dict(c_node.children)
        for entry, ri in r_node.children:
            walk(by_key[entry], ri, child_path(here, entry))

    walk(candidate, reference, path)
    return pairs, problems


def _key_difference(candidate: tuple[KeyEntry, ...], reference: tuple[KeyEntry, ...]) -> str | None:
    """How two containers of one type differ in their children, or ``None``."""
    if set(candidate) == set(reference):
        return None
    if all(isinstance(k, SequenceKey) for k in (*candidate, *reference)):
        return f"length {len(candidate)} vs reference {len(reference)}"
    names = [_key_name(k) for k in reference]
    missing = [_key_name(k) for k in reference if k not in candidate]
    extra = [_key_name(k) for k in candidate if k not in reference]
    parts = []
    if missing:
        parts.append(f"missing keys {missing!r}")
    if extra:
        parts.append(f"unexpected keys {extra!r}")
    return f"{', '.join(parts)} vs reference keys {names!r}"


def _key_name(entry: KeyEntry) -> Any:
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return getattr(entry, attribute)
    return str(entry)
