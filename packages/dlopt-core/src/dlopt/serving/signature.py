"""Call signatures: what a call's inputs look like, as a key and as text.

Two calls have the same signature when their inputs have the same structure (container
types, keyword names), the same constants, and tensors of the same dtype, shape and
device. A compiled graph or an exported model was made for the signatures it raced; a
call with another one is *unseen*. A shape *family* forgets the sizes and keeps each
tensor's rank: a plan that serves dynamic shapes serves every signature of a raced
case's family. Whether a tensor is an inference tensor is not part of a signature (the
calling context handles it: :mod:`dlopt.contract.calling`).

:func:`signature_key` is computed on every served call, so it walks plain tuples, lists
and dicts without the general tree walker; :func:`describe` writes a key as the text
reports record (``(float32[8, 3, 64, 64]@cpu,)``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import torch

from dlopt.platform.tree import leaves_with_paths, map_tensors

_CONSTANTS = (bool, int, float, str, bytes, type(None))
_TEXT_LIMIT = 40


def _key(obj: Any) -> Hashable:
    if isinstance(obj, torch.Tensor):
        return ("T", obj.dtype, obj.shape, obj.device)
    kind = type(obj)
    if kind is tuple:
        return ("(", *map(_key, obj))
    if kind is list:
        return ("[", *map(_key, obj))
    if kind is dict:
        return ("{", *((key, _key(value)) for key, value in obj.items()))
    if kind in _CONSTANTS:
        return ("=", kind, obj)
    # Anything else (a namedtuple, a dataclass, a model-specific object) by its type and
    # its leaves, through the general walker.
    leaves = tuple(
        (path, _key(leaf) if isinstance(leaf, torch.Tensor) else _leaf_text(leaf))
        for path, leaf in leaves_with_paths(obj)
    )
    return ("o", f"{kind.__module__}.{kind.__qualname__}", leaves)


def _leaf_text(leaf: Any) -> str:
    if isinstance(leaf, _CONSTANTS):
        text = repr(leaf)
        return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."
    return f"<{type(leaf).__qualname__}>"


def signature_key(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Hashable:
    """A hashable key of a call's signature (equal keys: equal signatures)."""
    return ("sig", _key(tuple(args)), _key(dict(kwargs)) if kwargs else None)


def family_key(key: Any) -> Any:
    """``key`` with every tensor's shape replaced by its rank."""
    if not isinstance(key, tuple) or not key:
        return key
    tag = key[0]
    if tag == "sig":
        return ("sig", family_key(key[1]), family_key(key[2]))
    if tag == "T":
        return ("T", key[1], len(key[2]), key[3])
    if tag in ("(", "["):
        return (tag, *map(family_key, key[1:]))
    if tag == "{":
        return ("{", *((name, family_key(value)) for name, value in key[1:]))
    if tag == "o":
        return ("o", key[1], tuple((path, family_key(value)) for path, value in key[2]))
    return key  # a constant


def describe(key: Hashable) -> str:
    """The text of a signature key: ``(float32[8, 3, 64, 64]@cpu,) {'mask': bool[8]@cpu}``;
    a family's tensors read ``float32[4d]@cpu``."""
    assert isinstance(key, tuple) and key and key[0] == "sig", key
    _, args, kwargs = key
    text = _describe(args)
    return text if kwargs is None else f"{text} {_describe(kwargs)}"


def _describe(key: Any) -> str:
    if not isinstance(key, tuple):
        return str(key)
    tag = key[0]
    if tag == "T":
        dtype = str(key[1]).replace("torch.", "")
        dims = f"{key[2]}d" if isinstance(key[2], int) else ", ".join(map(str, key[2]))
        return f"{dtype}[{dims}]@{key[3]}"
    if tag == "(":
        items = [_describe(part) for part in key[1:]]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if tag == "[":
        return "[" + ", ".join(_describe(part) for part in key[1:]) + "]"
    if tag == "{":
        return "{" + ", ".join(f"{name!r}: {_describe(value)}" for name, value in key[1:]) + "}"
    if tag == "=":
        return _leaf_text(key[2])
    if tag == "o":
        fields = "; ".join(f"{path}: {_describe(value)}" for path, value in key[2])
        return f"{key[1]}{{{fields}}}"
    return str(key)


def batch_sizes_along(args: tuple[Any, ...], kwargs: Mapping[str, Any], dim: int) -> set[int]:
    """The sizes along ``dim`` of every tensor input that has that dimension."""
    sizes: set[int] = set()

    def record(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() > dim:
            sizes.add(int(tensor.shape[dim]))
        return tensor

    map_tensors(record, (tuple(args), dict(kwargs)))
    return sizes


def resize_batch(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], dim: int, size: int
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """A call's inputs at another batch size: every tensor whose size along ``dim`` is the
    call's batch size (the size most tensor inputs share there) takes rows of the original
    cyclically (real token ids, masks and pixels, never invented values); other tensors
    and constants are kept. ``None`` when the inputs have no tensor with that dimension."""
    counts: dict[int, int] = {}

    def count(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() > dim:
            counts[int(tensor.shape[dim])] = counts.get(int(tensor.shape[dim]), 0) + 1
        return tensor

    map_tensors(count, (tuple(args), dict(kwargs)))
    if not counts:
        return None
    batch = max(counts, key=lambda s: (counts[s], s))

    def resize(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() <= dim or tensor.shape[dim] != batch:
            return tensor
        rows = torch.arange(size, device=tensor.device) % batch
        with torch.inference_mode(tensor.is_inference()):
            return tensor.detach().index_select(dim, rows)

    return map_tensors(resize, tuple(args)), {k: map_tensors(resize, v) for k, v in kwargs.items()}


def held_out_size(raced: set[int]) -> int:
    """A batch size no raced case had, for the held-out check: small, and never 0 or 1
    (a compiler specialises those), so a plan that serves only its raced shapes fails it."""
    for size in (3, 5, 7, 6, 2, 9, 11, 13):
        if size not in raced:
            return size
    return max(raced) + 1
