"""The one walker over nested inputs and outputs, built on ``torch.utils._pytree``.

A nested value is a tree: its containers are the types registered with pytree (tuples,
lists, dicts, namedtuples, ``OrderedDict``, ``defaultdict``, ``deque``, ``torch.return_types``
and whatever the user or a library registered), plus three kinds dlopt handles itself:

- dataclass instances, child per field (``dataclasses.fields``, ``init=False`` ones too).
  They are walked here rather than registered with pytree: pytree has one global registry,
  and registering a user's dataclass there would change how ``torch.export`` and
  ``torch.compile`` treat that type everywhere in the user's process;
- other mappings (a ``Mapping`` that is not a registered type, e.g. a ``dict`` subclass);
- other tuple and list subclasses (a user's ``list`` subclass). ``torch.Size`` stays a
  ``torch.Size`` even where ``torch.fx`` has registered it to be rebuilt as a ``tuple``.

Everything else is a leaf, ``None`` included (pytree would call it an empty container).
Each child is reached by a pytree key entry (``SequenceKey``, ``MappingKey``,
``GetAttrKey``), so a leaf's position is a pytree key path; :func:`path_str` writes it the
way a user would index the value: ``args[0]["mask"].field``.

Containers are rebuilt, never mutated: a registered type by its pytree ``unflatten``, a
dataclass by ``dataclasses.replace`` (fields outside ``__init__`` are set afterwards), a
mapping or sequence subclass by calling its type, falling back to ``dict``/``tuple``/``list``
when that type cannot be built from its items.
"""

from __future__ import annotations

import dataclasses
import json
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch
from torch.utils._pytree import (
    SUPPORTED_NODES,
    GetAttrKey,
    KeyEntry,
    MappingKey,
    SequenceKey,
    is_namedtuple_instance,
    keystr,
)

#: A leaf's position below the root: one pytree key entry per level.
KeyPath = tuple[KeyEntry, ...]


def is_dataclass_instance(obj: object) -> bool:
    """Whether ``obj`` is a dataclass instance (not a dataclass type)."""
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def key_path(parent: str, key: object) -> str:
    """``parent["key"]`` for string keys, ``parent[3]`` for ints, ``parent[repr]`` else."""
    if isinstance(key, str):
        return f"{parent}[{json.dumps(key)}]"
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{parent}[{key}]"
    return f"{parent}[{key!r}]"


def attr_path(parent: str, name: str) -> str:
    """``parent.name``."""
    return f"{parent}.{name}"


def child_path(parent: str, entry: KeyEntry) -> str:
    """The path of the child reached from ``parent`` by one key entry."""
    if isinstance(entry, SequenceKey):
        return key_path(parent, entry.idx)
    if isinstance(entry, MappingKey):
        return key_path(parent, entry.key)
    if isinstance(entry, GetAttrKey):
        return attr_path(parent, entry.name)
    return f"{parent}{entry}"  # a key entry of a user-registered type writes itself


def path_str(root: str, keys: KeyPath) -> str:
    """``keys`` written below ``root`` in dlopt's path syntax: ``args[0]["mask"].field``."""
    here = root
    for entry in keys:
        here = child_path(here, entry)
    return here


class Node:
    """One level of a container: its children, their key entries, and how to rebuild it.

    Key entries are made on first use: the walks that need no paths never build them.
    """

    __slots__ = ("_keys", "_make_keys", "rebuild", "values")

    def __init__(
        self,
        values: Sequence[Any],
        rebuild: Callable[[Sequence[Any]], Any],
        keys: Callable[[], Sequence[KeyEntry]],
    ) -> None:
        self.values = values
        self.rebuild = rebuild
        self._make_keys = keys
        self._keys: tuple[KeyEntry, ...] | None = None

    @property
    def keys(self) -> tuple[KeyEntry, ...]:
        if self._keys is None:
            self._keys = tuple(self._make_keys())
        return self._keys

    @property
    def children(self) -> tuple[tuple[KeyEntry, Any], ...]:
        return tuple(zip(self.keys, self.values, strict=True))


def expand(obj: Any) -> Node | None:
    """``obj``'s children if it is a container (see the module docstring), else ``None``."""
    if obj is None or isinstance(obj, torch.Tensor):
        return None
    kind = type(obj)
    # tuple, list, dict: what their pytree registrations give, without making key entries.
    if kind is tuple or kind is list:
        return Node(obj, kind, lambda: tuple(map(SequenceKey, range(len(obj)))))
    if kind is dict:
        names = list(obj)
        return Node(
            list(obj.values()),
            lambda values: dict(zip(names, values, strict=True)),
            lambda: tuple(map(MappingKey, names)),
        )
    if is_dataclass_instance(obj):
        return _dataclass_node(obj)
    generic = None
    if isinstance(obj, Mapping):
        generic = _mapping_node(obj)
    elif isinstance(obj, (tuple, list)) and not is_namedtuple_instance(obj):
        generic = _sequence_node(obj)
    node = _pytree_node(obj)
    if node is None:
        return generic  # not registered with pytree, or registered without key entries
    if generic is not None and generic.keys == node.keys:
        # Some registrations rebuild a subclass as its base (torch.Size as tuple, once
        # torch.fx registers it): the value keeps its own type.
        return Node(
            node.values, lambda values: _same_type(obj, values, node, generic), lambda: node.keys
        )
    return node


def _pytree_node(obj: Any) -> Node | None:
    """One level of ``obj`` by its pytree registration (what ``tree_flatten_with_path``
    does at each level), or ``None`` when pytree has no keyed registration for it."""
    # pytree registers every namedtuple under the ``namedtuple`` factory itself.
    node_type: Any = namedtuple if is_namedtuple_instance(obj) else type(obj)
    node_def = SUPPORTED_NODES.get(node_type)
    if node_def is None or node_def.flatten_with_keys_fn is None:
        return None
    keyed, context = node_def.flatten_with_keys_fn(obj)
    return Node(
        [child for _, child in keyed],
        lambda values: node_def.unflatten_fn(values, context),
        lambda: [entry for entry, _ in keyed],
    )


def _same_type(obj: Any, values: Sequence[Any], pytree: Node, generic: Node) -> Any:
    rebuilt = pytree.rebuild(values)
    return rebuilt if type(rebuilt) is type(obj) else generic.rebuild(values)


def _dataclass_node(obj: Any) -> Node:
    fields = dataclasses.fields(obj)

    def rebuild(values: Sequence[Any]) -> Any:
        new = dataclasses.replace(
            obj, **{f.name: v for f, v in zip(fields, values, strict=True) if f.init}
        )
        for f, value in zip(fields, values, strict=True):
            if not f.init and getattr(new, f.name) is not value:
                object.__setattr__(new, f.name, value)  # frozen dataclasses too
        return new

    return Node(
        [getattr(obj, f.name) for f in fields],
        rebuild,
        lambda: [GetAttrKey(f.name) for f in fields],
    )


def _mapping_node(obj: Mapping[Any, Any]) -> Node:
    names = list(obj.keys())

    def rebuild(values: Sequence[Any]) -> Any:
        mapped = dict(zip(names, values, strict=True))
        mapping_type: Any = type(obj)
        try:
            return mapping_type(mapped)
        except TypeError:
            return mapped

    return Node([obj[k] for k in names], rebuild, lambda: tuple(map(MappingKey, names)))


def _sequence_node(obj: tuple[Any, ...] | list[Any]) -> Node:
    def rebuild(values: Sequence[Any]) -> Any:
        try:
            return type(obj)(values)
        except TypeError:
            return tuple(values) if isinstance(obj, tuple) else list(values)

    return Node(obj, rebuild, lambda: tuple(map(SequenceKey, range(len(obj)))))


def _map(fn: Callable[[Any, Any], Any], obj: Any, keys: KeyPath | None) -> Any:
    """The recursion behind every map: ``keys`` is ``None`` when no caller needs paths."""
    level = expand(obj)
    if level is None:
        return fn(keys, obj)
    if keys is None:
        return level.rebuild([_map(fn, child, None) for child in level.values])
    return level.rebuild(
        [_map(fn, child, (*keys, entry)) for entry, child in zip(level.keys, level.values)]
    )


def map_with_keys(fn: Callable[[KeyPath, Any], Any], obj: Any) -> Any:
    """``obj`` with every leaf replaced by ``fn(key_path, leaf)``; containers rebuilt."""
    return _map(fn, obj, ())


def _leaves(obj: Any, keys: KeyPath | None, found: list[tuple[Any, Any]]) -> None:
    """Append ``(key_path, leaf)`` for every leaf; ``keys`` is ``None`` when unneeded."""
    level = expand(obj)
    if level is None:
        found.append((keys, obj))
    elif keys is None:
        for child in level.values:
            _leaves(child, None, found)
    else:
        for entry, child in zip(level.keys, level.values):
            _leaves(child, (*keys, entry), found)


def leaves_with_keys(obj: Any) -> list[tuple[KeyPath, Any]]:
    """Every leaf of ``obj`` with its key path, in traversal order."""
    found: list[tuple[Any, Any]] = []
    _leaves(obj, (), found)
    return found


def map_with_paths(fn: Callable[[str, Any], Any], obj: Any, root: str = "") -> Any:
    """``obj`` with every leaf (tensor or not) replaced by ``fn(path, leaf)``.

    Paths are rooted at ``root``: ``map_with_paths(f, {"a": [x]}, "out")`` calls
    ``f('out["a"][0]', x)``. Containers are rebuilt, never mutated.
    """
    return map_with_keys(lambda keys, leaf: fn(path_str(root, keys), leaf), obj)


def leaves_with_paths(obj: Any, root: str = "") -> list[tuple[str, Any]]:
    """Every leaf of ``obj`` (tensor or not) with its path below ``root``, in order."""
    return [(path_str(root, keys), leaf) for keys, leaf in leaves_with_keys(obj)]


def find(obj: Any, path: str, root: str = "") -> Any:
    """The node of ``obj`` at ``path`` (a leaf or a whole subtree); ``KeyError`` if none.

    Only children whose path begins ``path`` are visited.
    """
    missing = object()

    def search(node: Any, here: str) -> Any:
        if here == path:
            return node
        level = expand(node)
        if level is None:
            return missing
        for entry, child in level.children:
            below = child_path(here, entry)
            if path.startswith(below):  # ``out.x`` also begins ``out.xy``: keep looking
                found = search(child, below)
                if found is not missing:
                    return found
        return missing

    result = search(obj, root) if path.startswith(root) else missing
    if result is missing:
        raise KeyError(path)
    return result


@attrs.frozen
class Structure:
    """What :func:`unflatten` needs to rebuild a value from its leaves.

    Holds the flattened value itself (containers are rebuilt from it), so it keeps that
    value's leaves alive; ``paths`` are the leaves' paths in order.
    """

    template: Any = attrs.field(eq=False, repr=False)
    paths: tuple[str, ...]


def flatten(obj: Any, root: str = "") -> tuple[list[Any], Structure]:
    """``obj``'s leaves in traversal order and the structure to rebuild it from them."""
    pairs = leaves_with_paths(obj, root)
    return [leaf for _, leaf in pairs], Structure(obj, tuple(path for path, _ in pairs))


def unflatten(structure: Structure, leaves: Sequence[Any]) -> Any:
    """The value ``structure`` was flattened from, with ``leaves`` in place of its leaves."""
    if len(leaves) != len(structure.paths):
        raise ValueError(
            f"unflatten needs {len(structure.paths)} leaves for this structure, got {len(leaves)}"
        )
    it = iter(leaves)
    return map_with_keys(lambda _keys, _leaf: next(it), structure.template)


def map_tensors(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """Return ``obj`` with every tensor leaf replaced by ``fn(tensor)``; other leaves kept."""
    return _map(lambda _, leaf: fn(leaf) if isinstance(leaf, torch.Tensor) else leaf, obj, None)


def iter_tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor leaf of ``obj``, in traversal order."""
    found: list[tuple[Any, Any]] = []
    _leaves(obj, None, found)
    return [leaf for _, leaf in found if isinstance(leaf, torch.Tensor)]


def _describe_leaf(leaf: Any) -> str:
    if isinstance(leaf, torch.Tensor):
        return f"{str(leaf.dtype).replace('torch.', '')}{list(leaf.shape)}"
    text = repr(leaf)
    return text if len(text) <= 40 else text[:37] + "..."


def describe_inputs(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """``args[0]: float32[8, 3, 64, 64]; kwargs['mask']: bool[8, 64]`` for reports.

    Tensors by dtype and shape, other leaves by a repr cut at 40 characters. Keys are
    written as pytree writes them (``keystr``: ``['mask']``), the form reports have used.
    """
    leaves = [("args" + keystr(keys), leaf) for keys, leaf in leaves_with_keys(tuple(args))]
    for name, value in kwargs.items():
        leaves += [
            (f"kwargs[{name!r}]" + keystr(keys), leaf) for keys, leaf in leaves_with_keys(value)
        ]
    return "; ".join(f"{path}: {_describe_leaf(leaf)}" for path, leaf in leaves)
