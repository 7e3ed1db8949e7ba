"""The nested-structure walker: round trips, unique paths, pytree agreement, dataclasses."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import given
from hypothesis import strategies as st

from dlopt.platform.tree import (
    describe_inputs,
    find,
    flatten,
    iter_tensors,
    leaves_with_keys,
    leaves_with_paths,
    map_tensors,
    map_with_paths,
    unflatten,
)

Pair = namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class Box:
    value: Any
    other: Any = None


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: Any


@dataclasses.dataclass
class Derived:
    """A field outside ``__init__``, set by ``__post_init__``."""

    value: Any
    twice: Any = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.twice = [self.value, self.value]


class Batch(dict):
    """A dict subclass pytree does not know."""


class Items(list):
    """A list subclass pytree does not know."""


def same(a: Any, b: Any) -> bool:
    """Exact equality written without the walker: types, values, and tensor contents."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list, deque)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=3),
    st.lists(st.integers(-5, 5), max_size=4).map(lambda v: torch.tensor(v, dtype=torch.int64)),
    st.lists(st.floats(-1, 1, width=32), max_size=3).map(torch.tensor),
)
keys = st.one_of(st.text(max_size=4), st.integers(-2, 5))


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    small = st.lists(children, max_size=3)
    mapping = st.dictionaries(keys, children, max_size=3)
    return st.one_of(
        small.map(tuple),
        small,
        mapping,
        mapping.map(OrderedDict),
        mapping.map(lambda d: defaultdict(list, d)),
        mapping.map(Batch),
        small.map(Items),
        small.map(deque),
        st.tuples(children, children).map(lambda t: Pair(*t)),
        st.tuples(children, children).map(lambda t: Box(*t)),
        children.map(Frozen),
        children.map(Derived),
    )


trees = st.recursive(leaves, containers, max_leaves=12)


@given(trees)
def test_map_identity_rebuilds_an_equal_structure(obj):
    copy = map_with_paths(lambda _path, leaf: leaf, obj, "out")
    assert same(copy, obj)
    assert same(map_tensors(lambda t: t, obj), obj)


@given(trees)
def test_paths_are_unique_and_find_their_leaf(obj):
    pairs = leaves_with_paths(obj, "out")
    paths = [path for path, _ in pairs]
    assert len(set(paths)) == len(paths)
    for path, leaf in pairs:
        assert find(obj, path, "out") is leaf


@given(trees)
def test_flatten_then_unflatten_round_trips(obj):
    values, structure = flatten(obj, "args")
    assert list(structure.paths) == [path for path, _ in leaves_with_paths(obj, "args")]
    assert same(unflatten(structure, values), obj)
    doubled = unflatten(structure, [v * 2 if isinstance(v, torch.Tensor) else v for v in values])
    assert same(doubled, map_tensors(lambda t: t * 2, obj))


@given(trees)
def test_tensors_in_leaf_order(obj):
    tensors = [leaf for _, leaf in leaves_with_paths(obj) if isinstance(leaf, torch.Tensor)]
    assert [id(t) for t in iter_tensors(obj)] == [id(t) for t in tensors]


def _containers(children: Any, keys: Any) -> list[Any]:
    """Tuples, lists and dicts (keyed by ``keys``) of up to three ``children``."""
    return [
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3),
        st.dictionaries(keys, children, max_size=3),
    ]


pytree_trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        *_containers(children, keys), st.tuples(children, children).map(lambda t: Pair(*t))
    ),
    max_leaves=12,
)


@given(pytree_trees)
def test_agrees_with_pytree_on_its_own_types(obj):
    expected = pytree.tree_leaves_with_path(obj, is_leaf=lambda node: node is None)
    got = leaves_with_keys(obj)
    assert [k for k, _ in got] == [k for k, _ in expected]
    assert [id(v) for _, v in got] == [id(v) for _, v in expected]


def test_dataclasses_are_not_registered_with_pytree():
    walked = Box(torch.zeros(1), Frozen(torch.ones(1)))
    map_tensors(lambda t: t + 1, walked)
    assert Box not in pytree.SUPPORTED_NODES and Frozen not in pytree.SUPPORTED_NODES
    assert pytree.tree_is_leaf(walked)


def test_dataclass_fields_outside_init_are_walked_and_kept():
    obj = Derived(torch.ones(1))
    assert [p for p, _ in leaves_with_paths(obj, "out")] == [
        "out.value",
        "out.twice[0]",
        "out.twice[1]",
    ]
    moved = map_tensors(lambda t: t * 3, obj)
    assert torch.equal(moved.value, torch.full((1,), 3.0))
    assert all(torch.equal(t, torch.full((1,), 3.0)) for t in moved.twice)
    frozen = map_tensors(lambda t: t + 1, Frozen(torch.zeros(2)))
    assert isinstance(frozen, Frozen) and torch.equal(frozen.value, torch.ones(2))


def test_container_types_are_kept():
    d = defaultdict(list, a=torch.zeros(1))
    out = map_tensors(lambda t: t + 1, {"size": torch.Size([2, 3]), "d": d, "q": deque([1], 2)})
    assert type(out["size"]) is torch.Size and out["size"] == torch.Size([2, 3])
    assert type(out["d"]) is defaultdict and out["d"].default_factory is list
    assert out["q"].maxlen == 2
    mx = torch.max(torch.zeros(2, 3), 1)
    assert type(map_tensors(lambda t: t, mx)) is type(mx)
    assert [p for p, _ in leaves_with_paths(mx, "out")] == ["out[0]", "out[1]"]


def test_find_does_not_stop_at_a_prefix():
    Named = namedtuple("Named", ["x", "xy"])
    obj = Named(1, 2)
    assert find(obj, "out.xy", "out") == 2
    assert find({"a": [0, 5]}, 'out["a"]', "out") == [0, 5]
    with pytest.raises(KeyError):
        find(obj, "out.z", "out")
    with pytest.raises(KeyError):
        find(obj, "other.x", "out")


def test_unflatten_needs_one_value_per_leaf():
    _, structure = flatten((torch.zeros(1), 2))
    with pytest.raises(ValueError, match="needs 2 leaves for this structure, got 1"):
        unflatten(structure, [torch.zeros(1)])


def test_describe_inputs_walks_namedtuples_and_dataclasses():
    text = describe_inputs(
        (torch.zeros(2, 3), Pair(torch.ones(1, dtype=torch.bool), "x" * 50)),
        {"scale": 0.5, "box": Box(torch.zeros(4)), "mask": {"m": torch.zeros(1)}},
    )
    assert text == (
        "args[0]: float32[2, 3]; args[1].left: bool[1]; "
        f"args[1].right: {repr('x' * 50)[:37]}...; kwargs['scale']: 0.5; "
        "kwargs['box'].value: float32[4]; kwargs['box'].other: None; "
        "kwargs['mask']['m']: float32[1]"
    )


def _described_before(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """How reports described inputs before the walker (tuples, lists and dicts only)."""
    parts: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, torch.Tensor):
            parts.append(f"{path}: {str(value.dtype).replace('torch.', '')}{list(value.shape)}")
        elif isinstance(value, (tuple, list)):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}[{key!r}]")
        else:
            text = repr(value)
            parts.append(f"{path}: {text if len(text) <= 40 else text[:37] + '...'}")

    walk(tuple(args), "args")
    for key, value in kwargs.items():
        walk(value, f"kwargs[{key!r}]")
    return "; ".join(parts)


plain_trees = st.recursive(
    leaves,
    lambda children: st.one_of(*_containers(children, keys)),
    max_leaves=10,
)


@given(st.lists(plain_trees, max_size=3), st.dictionaries(st.text(max_size=3), plain_trees))
def test_describe_inputs_is_unchanged_for_plain_containers(args, kwargs):
    assert describe_inputs(tuple(args), kwargs) == _described_before(tuple(args), kwargs)
