"""Put a workload case's inputs on the target device, with paths in every error."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch
from attrs import frozen

from dlopt.errors import WorkloadError
from dlopt.platform.tree import key_path, map_with_paths
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase
from dlopt.validation.fingerprint import hash_tensor

CaseLike = WorkloadCase | tuple[tuple[Any, ...], Mapping[str, Any]]


def _device(target: ExecutionTarget | torch.device | str | None) -> torch.device | None:
    if target is None:
        return None
    if isinstance(target, ExecutionTarget):
        return target.torch_device()
    return torch.device(target)


def _same_device(tensor: torch.Tensor, device: torch.device) -> bool:
    if tensor.device.type != device.type:
        return False
    if device.index is None or tensor.device.index is None:
        # "cuda" means the current device; a tensor on cuda:N with N current is fine.
        if device.type == "cuda" and tensor.device.index is not None:
            return tensor.device.index == torch.cuda.current_device()
        return True
    return tensor.device.index == device.index


def case_parts(case: CaseLike | Any) -> tuple[str | None, tuple[Any, ...], dict[str, Any]]:
    """``(name, args, kwargs)`` of a ``WorkloadCase`` or an ``(args, kwargs)`` pair."""
    if isinstance(case, WorkloadCase):
        return case.name, tuple(case.args), dict(case.kwargs)
    if isinstance(case, tuple) and len(case) == 2 and isinstance(case[1], Mapping):
        args = case[0]
        args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        return None, args, dict(case[1])
    raise WorkloadError(
        f"a workload case must be a WorkloadCase or an (args, kwargs) pair, got {type(case).__name__}"
    )


def map_input_tensors(
    obj: Any, fn: Callable[[torch.Tensor, str], Any], *, path: str = "args"
) -> Any:
    """``obj`` with every tensor replaced by ``fn(tensor, path)``; containers are rebuilt.

    Walks tuples, lists, dicts, namedtuples and dataclasses (see :mod:`dlopt.platform.tree`); other
    values pass through untouched (inputs may hold any Python object). ``path`` names the
    root, and each tensor's path reads like ``args[0]["mask"]``.
    """
    return map_with_paths(
        lambda here, leaf: fn(leaf, here) if isinstance(leaf, torch.Tensor) else leaf, obj, path
    )


def move_to_device(
    obj: Any,
    device: torch.device | str | None,
    *,
    path: str = "args",
    on_wrong_device: Literal["move", "error"] = "move",
) -> Any:
    """``obj`` with every tensor on ``device``; containers are rebuilt, never mutated.

    Walks tuples, lists, dicts, namedtuples and dataclasses; other values pass through.
    Raises ``WorkloadError`` naming the path of a tensor that is on the wrong device
    (``on_wrong_device="error"``) or cannot be moved.
    """
    target = None if device is None else torch.device(device)

    def move(node: torch.Tensor, here: str) -> torch.Tensor:
        if target is None or _same_device(node, target):
            return node
        if on_wrong_device == "error":
            raise WorkloadError(
                f"{here}: tensor is on {node.device} but the target is {target}; "
                f"create the workload inputs on {target} (or let dlopt move them)"
            )
        try:
            return node.to(target)
        except Exception as exc:
            raise WorkloadError(
                f"{here}: cannot move tensor of shape {tuple(node.shape)} from "
                f"{node.device} to {target}: {exc}"
            ) from exc

    return map_input_tensors(obj, move, path=path)


def copy_inputs(
    args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A private copy of a call's inputs: every tensor cloned, containers rebuilt.

    A candidate's first calls and validation run on their own copy, so a plan that writes
    into its inputs cannot change what the plans judged after it see.

    Each copy is the same kind of tensor as its source: a clone made under
    ``torch.inference_mode`` would be an inference tensor, whose dispatch keys differ, and
    a compiled plan guards on them: its first calls on such copies and its raced calls on
    the originals would compile twice, and the second compile would land in the race.
    """

    def clone(tensor: torch.Tensor, _: str) -> torch.Tensor:
        with torch.inference_mode(tensor.is_inference()):
            return tensor.detach().clone()

    return tuple(map_input_tensors(tuple(args), clone)), {
        k: map_input_tensors(v, clone, path=key_path("kwargs", k)) for k, v in kwargs.items()
    }


@frozen
class InputFingerprint:
    """Content hashes of every tensor in a call's inputs, keyed by path."""

    digests: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> InputFingerprint:
        found: list[tuple[str, str]] = []

        def record(tensor: torch.Tensor, here: str) -> torch.Tensor:
            found.append((here, hash_tensor(tensor)))
            return tensor

        map_input_tensors(tuple(args), record)
        for k, v in kwargs.items():
            map_input_tensors(v, record, path=key_path("kwargs", k))
        return cls(tuple(found))

    def changed_paths(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[str]:
        """Paths of the input tensors whose contents differ from this fingerprint."""
        now = dict(InputFingerprint.of(args, kwargs).digests)
        return [path for path, digest in self.digests if now.get(path) != digest]


def prepare_inputs(
    case: CaseLike | Any,
    target: ExecutionTarget | torch.device | str | None = None,
    *,
    on_wrong_device: Literal["move", "error"] = "move",
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The ``(args, kwargs)`` of a case with every tensor on ``target``'s device.

    ``case`` is a ``WorkloadCase`` or an ``(args, kwargs)`` pair; nested structures and
    non-tensor values are kept as they are. Prepare each case once and reuse the result:
    moving copies the tensors. Errors name the case and the path, e.g.
    ``case 'batch-8': kwargs["mask"]: cannot move tensor ...``.
    """
    name, args, kwargs = case_parts(case)
    device = _device(target)
    try:
        moved_args = tuple(
            move_to_device(args, device, path="args", on_wrong_device=on_wrong_device)
        )
        moved_kwargs = {
            k: move_to_device(
                v, device, path=key_path("kwargs", k), on_wrong_device=on_wrong_device
            )
            for k, v in kwargs.items()
        }
    except WorkloadError as exc:
        if name is None:
            raise
        raise WorkloadError(f"case {name!r}: {exc}") from exc.__cause__
    return moved_args, moved_kwargs
