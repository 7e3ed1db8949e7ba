"""The model's outputs rebuilt in its own structure from OpenVINO's flat output tensors.

A built plan takes the structure from the reference outputs (a tuple, a dict, a Hugging
Face ``ModelOutput``...), filling its tensor leaves in :func:`dlopt.plugin.iter_tensors`
order. A saved plan keeps the structure as JSON: ``torch.utils._pytree``'s serialized
tree spec plus one descriptor per leaf (a tensor's dtype, or a plain JSON value). Reading
it back imports nothing: a container type is found only among the types already
registered with pytree in this process (``transformers`` registers every ``ModelOutput``
class when it is imported), so a ``ModelOutput`` comes back as one wherever its module is
imported, and otherwise the loader says which module to import. A structure pytree
cannot describe (a namedtuple or a dataclass it does not know) is rebuilt only from the
model's own reference outputs, which a plan cache hit has.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from dlopt.plugin import iter_tensors, map_tensors

_PLAIN = (type(None), bool, int, float, str)
#: Output dtypes by their JSON names (read back from a table, never by attribute lookup).
DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
        torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    )
}  # fmt: skip


class NotSavable(ValueError):
    """The outputs' structure cannot be written as JSON (the reason is the message)."""


def signature(reference: Any) -> dict[str, Any]:
    """What outputs must share with the saved ones: the top-level type's qualified name
    and the tensors' dtypes in order. Plain JSON; compared, never imported."""
    kind = type(reference)
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "tensors": [str(t.dtype).removeprefix("torch.") for t in iter_tensors(reference)],
    }


class OutputStructure:
    """Rebuilds the outputs from the flat tensors, casting each to the reference's dtype."""

    def __init__(self, rebuild: Callable[[list[torch.Tensor]], Any], dtypes: Sequence[torch.dtype]):
        self._rebuild = rebuild
        self.dtypes = tuple(dtypes)

    def __call__(self, tensors: list[torch.Tensor]) -> Any:
        # A device may hand back another width (GPU plugins return f16 for f32 outputs).
        fixed = [t if t.dtype == d else t.to(d) for t, d in zip(tensors, self.dtypes)]
        return self._rebuild(fixed)

    @classmethod
    def from_reference(cls, reference: Any) -> OutputStructure:
        """The structure of ``reference`` (the eager outputs of one case)."""
        template = map_tensors(lambda t: torch.empty(0, dtype=t.dtype), reference)

        def rebuild(tensors: list[torch.Tensor]) -> Any:
            leaves = iter(tensors)
            return map_tensors(lambda _: next(leaves), template)

        return cls(rebuild, [t.dtype for t in iter_tensors(reference)])

    @classmethod
    def from_json(cls, data: Any) -> OutputStructure:
        """The structure :func:`to_json` wrote. ``ValueError`` when it is malformed, and
        one naming the module to import when a container type is unknown here."""
        if not isinstance(data, dict) or not isinstance(data.get("treespec"), str):
            raise ValueError(f"not a saved output structure: {data!r:.100}")
        leaves = data.get("leaves")
        if not isinstance(leaves, list):
            raise ValueError("a saved output structure without its leaves")
        try:
            spec = pytree.treespec_loads(data["treespec"])
        except (KeyError, NotImplementedError) as exc:
            raise ValueError(
                f"the outputs are of a type this process has not registered ({exc}); import "
                "the module that defines it (for a Hugging Face model: import transformers "
                "and the model's module) before loading"
            ) from None
        except Exception as exc:
            raise ValueError(f"unreadable output tree spec ({type(exc).__name__}: {exc})") from None
        slots: list[tuple[bool, Any]] = []
        dtypes = []
        for leaf in leaves:
            if isinstance(leaf, dict) and set(leaf) == {"tensor"}:
                dtype = DTYPES.get(leaf["tensor"]) if isinstance(leaf["tensor"], str) else None
                if dtype is None:
                    raise ValueError(f"unknown output dtype {leaf['tensor']!r:.40}")
                slots.append((True, None))
                dtypes.append(dtype)
            elif (
                isinstance(leaf, dict) and set(leaf) == {"value"} and type(leaf["value"]) in _PLAIN
            ):
                slots.append((False, leaf["value"]))
            else:
                raise ValueError(f"not an output leaf: {leaf!r:.100}")
        if spec.num_leaves != len(slots):
            raise ValueError(f"the tree spec has {spec.num_leaves} leaves, the JSON {len(slots)}")

        def rebuild(tensors: list[torch.Tensor]) -> Any:
            given = iter(tensors)
            return pytree.tree_unflatten([next(given) if t else v for t, v in slots], spec)

        return cls(rebuild, dtypes)


def to_json(reference: Any) -> dict[str, Any]:
    """The structure of ``reference`` as JSON; :class:`NotSavable` with the reason when
    pytree cannot describe it as dlopt walks it."""
    leaves, spec = pytree.tree_flatten(reference)
    walked = iter_tensors(reference)
    tensor_leaves = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    if len(tensor_leaves) != len(walked) or any(a is not b for a, b in zip(tensor_leaves, walked)):
        kinds = sorted(
            {type(leaf).__qualname__ for leaf in leaves if not isinstance(leaf, torch.Tensor)}
        )
        raise NotSavable(
            "torch's pytree does not see the output tensors as dlopt does (a container it "
            f"does not know: {', '.join(kinds) or 'unknown'})"
        )
    described: list[dict[str, Any]] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if leaf.dtype not in DTYPES.values():
                raise NotSavable(f"an output tensor is {leaf.dtype}")
            described.append({"tensor": str(leaf.dtype).removeprefix("torch.")})
        elif type(leaf) in _PLAIN and not (isinstance(leaf, float) and not math.isfinite(leaf)):
            described.append({"value": leaf})
        else:
            raise NotSavable(f"the outputs hold a {type(leaf).__qualname__} leaf JSON cannot hold")
    try:
        text = pytree.treespec_dumps(spec)
    except Exception as exc:  # a namedtuple or a type registered without a serialized name
        raise NotSavable(f"{type(exc).__name__}: {exc}") from None
    return {"treespec": text, "leaves": described}
