"""The calling context: the grad mode a call runs in and the kind of tensors it gets.

A compiled graph guards on both: the same plan called inside ``torch.inference_mode()``
with inference tensors, inside it with ordinary tensors, under ``torch.no_grad()`` or with
autograd on is four different compiles (and a compile at serving time can fail where the
judged one did not). So dlopt judges every plan in one context, the workload's
:class:`~dlopt.vocabulary.GradMode`, on inputs made the way serving code in that context
makes them (inference tensors under ``inference_mode``), and the decision serves a plan
bound to that context by entering it around each call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from dlopt.platform.tree import iter_tensors, map_tensors
from dlopt.vocabulary import GradMode


def grad_mode_scope(mode: GradMode) -> contextlib.AbstractContextManager[None]:
    """A context manager that runs its block in ``mode``, whatever the caller's mode is
    (``no_grad`` and ``enabled`` leave an enclosing ``inference_mode``)."""
    if mode is GradMode.INFERENCE_MODE:
        return torch.inference_mode()
    return _outside_inference_mode(grad=mode is GradMode.ENABLED)


@contextlib.contextmanager
def _outside_inference_mode(grad: bool) -> Iterator[None]:
    with torch.inference_mode(False), torch.set_grad_enabled(grad):
        yield


def caller_grad_mode() -> GradMode:
    """The grad mode of the calling thread, now."""
    if torch.is_inference_mode_enabled():
        return GradMode.INFERENCE_MODE
    return GradMode.ENABLED if torch.is_grad_enabled() else GradMode.NO_GRAD


def makes_inference_tensors(mode: GradMode) -> bool:
    """Whether a tensor made in ``mode`` is an inference tensor."""
    return mode is GradMode.INFERENCE_MODE


def _as_kind(inference: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    def convert(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_inference() == inference:
            return tensor
        # A copy is the only way to change a tensor's kind: an inference tensor is made
        # inside inference_mode, an ordinary one outside it.
        with torch.inference_mode(inference):
            return tensor.detach().clone()

    return convert


def _all_tensors(obj: Any, test: Callable[[torch.Tensor], bool]) -> bool:
    """``test`` holds for every tensor in ``obj`` (plain containers walked fast)."""
    if isinstance(obj, torch.Tensor):
        return test(obj)
    kind = type(obj)
    if kind is tuple or kind is list:
        return all(_all_tensors(item, test) for item in obj)
    if kind is dict:
        return all(_all_tensors(item, test) for item in obj.values())
    if obj is None or kind in (bool, int, float, str):
        return True
    return all(test(t) for t in iter_tensors(obj))


def inputs_of_kind(
    mode: GradMode, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` with every tensor of the kind ``mode`` makes: inference tensors
    for ``inference_mode``, ordinary ones otherwise. Tensors of that kind already are
    passed as they are; the others are copied (the call's inputs only, never in place)."""
    inference = makes_inference_tensors(mode)
    if _all_tensors((args, kwargs), lambda t: t.is_inference() == inference):
        return args, kwargs
    convert = _as_kind(inference)
    return map_tensors(convert, args), {k: map_tensors(convert, v) for k, v in kwargs.items()}


def outputs_for_caller(outputs: Any, caller: GradMode) -> Any:
    """Outputs a plan made inside ``inference_mode``, as a caller outside it can use them.

    Inference tensors cannot be written in place or saved for backward outside
    inference mode; a caller who is not in it gets ordinary copies of those leaves."""
    if caller is GradMode.INFERENCE_MODE or _all_tensors(outputs, lambda t: not t.is_inference()):
        return outputs
    return map_tensors(_as_kind(False), outputs)


def needs_gradients(caller: GradMode, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the caller asks for gradients: autograd on and an input that requires grad."""
    if caller is not GradMode.ENABLED:
        return False
    return not _all_tensors((args, kwargs), lambda t: not t.requires_grad)
