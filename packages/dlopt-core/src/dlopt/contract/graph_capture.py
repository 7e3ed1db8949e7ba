"""Value-dependent graphs: found while a plan traces or exports the model.

A tracer (``torch.jit.trace``, which ONNX Runtime's TorchScript exporter and OpenVINO's
PyTorch frontend use) records the tensor operations of one call. Python control flow is
not recorded: where the model turns a tensor computed from its inputs' *values* into a
Python value (``if x.sum() > 0:``, ``range(int(n))``, ``.item()``, ``.tolist()``), the
graph keeps the branch or the count that the example took and serves it to every later
input. The race cannot see this (its inputs took the same branch); a request that takes
the other branch gets a silently wrong answer.

:func:`watch_value_dependence` follows which tensors derive from the inputs' values while
a tracer runs (a :class:`~torch.overrides.TorchFunctionMode`: every tensor a torch
function computes from a followed tensor is followed; shapes, dtypes and devices are not
values, so ``x.shape[0] > 1`` is no finding), and records each conversion of a followed
tensor to a Python value with the model's own source line.
:func:`check_value_independence` traces the model itself under the watch, for plans whose
own capture cannot host it. A plan built from such a graph is refused with
:class:`ValueDependentGraph` quoting the line; eager fp32, or a guarded plan (Inductor's
guards recompile or fall back), serves the model instead. Watching runs inside the tracer
the plan uses, so library code that takes another path when traced
(``torch.jit.is_tracing()``) is judged on the path the graph holds.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import Any

import attrs
import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from dlopt.errors import ValueDependentGraph
from dlopt.platform.tree import iter_tensors, map_tensors

#: Functions whose result reads only a tensor's metadata (shape, dtype, device, layout,
#: identity), never its values: a Python value made by one is no finding.
_METADATA = frozenset(
    {
        "size",
        "dim",
        "ndimension",
        "numel",
        "nelement",
        "stride",
        "storage_offset",
        "element_size",
        "get_device",
        "data_ptr",
        "nbytes",
        "itemsize",
        "dim_order",
        "shape",
        "ndim",
        "dtype",
        "device",
        "layout",
        "requires_grad",
        "names",
    }
)
#: Tensors made from another's shape alone: only their other arguments (a fill value)
#: can carry values.
_SHAPED_LIKE = frozenset(
    {
        "zeros_like",
        "ones_like",
        "empty_like",
        "full_like",
        "rand_like",
        "randn_like",
        "randint_like",
        "new_zeros",
        "new_ones",
        "new_empty",
        "new_full",
    }
)


def _reads_metadata(name: str) -> bool:
    """Whether a Python value made by a function of this name reads a tensor's metadata
    or identity only (``is_contiguous``, ``__len__``, ``__hash__``), never its values."""
    if name in _KINDS:
        return False
    return name in _METADATA or name.startswith(("is_", "has_", "_"))


#: Python values a graph cannot hold: a branch, a count or a constant is baked in.
_PYTHON_VALUES = (bool, int, float, complex, list)
#: What a Python value is made by, for the message.
_KINDS = {
    "__bool__": "a Python bool (a branch)",
    "__int__": "a Python int",
    "__index__": "a Python int (an index or a count)",
    "__float__": "a Python float",
    "__complex__": "a Python complex",
    "item": "a Python number (.item())",
    "tolist": "a Python list (.tolist())",
    "numpy": "a numpy array",
    "__array__": "a numpy array",
    "__contains__": "a Python bool (`in`)",
    "is_nonzero": "a Python bool (is_nonzero)",
}
#: In-place methods without the trailing underscore.
_IN_PLACE = frozenset(
    {
        "__setitem__",
        "__iadd__",
        "__isub__",
        "__imul__",
        "__itruediv__",
        "__ifloordiv__",
        "__imod__",
        "__ipow__",
        "__iand__",
        "__ior__",
        "__ixor__",
        "__ilshift__",
        "__irshift__",
        "__imatmul__",
    }
)
#: Source lines quoted per finding in a message, and findings kept.
_KEPT = 8


@attrs.frozen
class ValueConversion:
    """One place where the model turned a tensor computed from its inputs' values into a
    Python value: ``where`` (``model.py:12``), the source ``line`` and what it made."""

    where: str
    line: str
    made: str

    def describe(self) -> str:
        """``model.py:12: if x.sum() > 0: (a Python bool (a branch))``."""
        code = f" `{self.line}`" if self.line else ""
        return f"{self.where}:{code} makes {self.made}"


class ValueWatch:
    """What :func:`watch_value_dependence` found (read it after the block)."""

    def __init__(self) -> None:
        self.conversions: list[ValueConversion] = []
        self._seen: set[tuple[str, str]] = set()

    @property
    def found(self) -> bool:
        """Whether the traced call turned an input-derived tensor into a Python value."""
        return bool(self.conversions)

    def record(self, conversion: ValueConversion) -> None:
        key = (conversion.where, conversion.made)
        if key in self._seen or len(self.conversions) >= _KEPT:
            return
        self._seen.add(key)
        self.conversions.append(conversion)

    def message(self, what: str) -> str:
        """Why ``what`` (``"the ONNX export"``) cannot serve, quoting every line found."""
        places = "; ".join(c.describe() for c in self.conversions)
        return (
            f"{what} depends on the input values: {places}. A traced graph keeps the branch, "
            "count or constant the example inputs took and would serve it to every other "
            "input (a silently wrong answer), so this plan is refused; eager fp32 or a "
            "guarded plan (Inductor) serves this model. To make it traceable, compute the "
            "branch with tensor operations (torch.where) instead of Python control flow"
        )

    def raise_if_found(self, what: str) -> None:
        """Raise :class:`ValueDependentGraph` when anything was found."""
        if self.conversions:
            raise ValueDependentGraph(self.message(what))


def _name(func: Any) -> str:
    name = getattr(func, "__name__", "")
    if name in ("__get__", "__set__"):
        # A property (x.shape, x.T): the descriptor names it.
        return str(getattr(getattr(func, "__self__", None), "__name__", name))
    return str(name)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors of a call's arguments or results: plain containers walked quickly,
    anything else through dlopt's walker."""
    if isinstance(value, torch.Tensor):
        yield value
    elif type(value) in (tuple, list):
        for item in value:
            yield from _tensors(item)
    elif type(value) is dict:
        for item in value.values():
            yield from _tensors(item)
    elif value is not None and not isinstance(value, (bool, int, float, str, torch.dtype)):
        with contextlib.suppress(Exception):
            yield from iter_tensors(value)


#: Modules between the model's line and the watch: torch's dispatch, context managers.
_PASSED_THROUGH = ("torch", "contextlib", "functools")


def _model_frame(start: FrameType | None) -> FrameType | None:
    """The innermost frame outside torch and this module: the line that asked for the
    Python value (a tensor method is called from it directly)."""
    frame = start
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module != __name__ and module.partition(".")[0] not in _PASSED_THROUGH:
            return frame
        frame = frame.f_back
    return None


def _where(frame: FrameType | None) -> tuple[str, str]:
    if frame is None:
        return "an unknown line", ""
    filename = frame.f_code.co_filename
    try:
        shown = os.path.relpath(filename)
        if shown.startswith(".."):
            shown = filename
    except ValueError:  # another drive
        shown = filename
    line = linecache.getline(filename, frame.f_lineno).strip()
    return f"{shown}:{frame.f_lineno}", line


class _Arrivals:
    """The model's forward pre-hook: whatever tensors reach the model are its inputs (a
    tracer may wrap or copy the example tensors on the way in). A tracer that deep-copies
    the model copies this hook as itself, so the copy reports here too; once the watch is
    over the hook does nothing (a copy may outlive it)."""

    def __init__(self, follow: _Follow) -> None:
        self.follow: _Follow | None = follow

    def __call__(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if self.follow is not None:
            self.follow.follow_values((args, kwargs))

    def __deepcopy__(self, memo: dict[int, Any]) -> _Arrivals:
        return self


class _Follow(TorchFunctionMode):
    """Follows input-derived tensors through every torch function and records their
    conversions to Python values (see the module docstring)."""

    def __init__(self, watch: ValueWatch) -> None:
        super().__init__()
        self.watch = watch
        self.followed: WeakIdKeyDictionary = WeakIdKeyDictionary()
        #: Storages written in place with followed values, by address; the tensor kept
        #: here holds the storage alive, so no other tensor takes its address meanwhile.
        self.written: dict[int, torch.Tensor] = {}

    def _is_followed(self, tensor: torch.Tensor) -> bool:
        if tensor in self.followed:
            return True
        if self.written:
            with contextlib.suppress(Exception):
                return tensor.untyped_storage().data_ptr() in self.written
        return False

    def follow_values(self, value: Any) -> None:
        for tensor in _tensors(value):
            self.followed[tensor] = True

    def _written(self, tensor: torch.Tensor) -> None:
        self.followed[tensor] = True
        with contextlib.suppress(Exception):
            address = tensor.untyped_storage().data_ptr()
            if address:  # an empty storage has none
                self.written.setdefault(address, tensor)

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        name = _name(func)
        if name in _METADATA:
            # A shape is no value: under a tracer its sizes may be tensors, never followed.
            return func(*args, **kwargs)
        if name in _SHAPED_LIKE:
            # Only the arguments after the tensor read (a fill value) can carry values.
            followed = any(self._is_followed(t) for t in _tensors((args[1:], kwargs)))
        else:
            followed = any(self._is_followed(t) for t in _tensors((args, kwargs)))
        out = func(*args, **kwargs)
        if not followed:
            return out
        if name == "__iter__":
            items = list(out)  # rows of a followed tensor are followed
            self.follow_values(items)
            return iter(items)
        if isinstance(out, _PYTHON_VALUES) or name in ("numpy", "__array__"):
            if not _reads_metadata(name):
                where, line = _where(_model_frame(sys._getframe(1)))
                made = _KINDS.get(name, f"a Python {type(out).__name__} ({name})")
                self.watch.record(ValueConversion(where, line, made))
            return out
        self.follow_values(out)
        in_place = (name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE
        if in_place and args and isinstance(args[0], torch.Tensor):
            self._written(args[0])
        target = kwargs.get("out")
        for tensor in _tensors(target):
            self._written(tensor)
        return out


@contextlib.contextmanager
def watch_value_dependence(model: torch.nn.Module) -> Iterator[ValueWatch]:
    """Watch ``model``'s inputs while the block traces or exports it: the
    :class:`ValueWatch` yielded lists every input-derived tensor the model turned into a
    Python value, with its source line. Wrap the tracer's own call, e.g.::

        with watch_value_dependence(model) as watch:
            torch.onnx.export(wrapper_of_model, example, path, dynamo=False)
        watch.raise_if_found("the ONNX export")

    The tensors the model receives (through a forward pre-hook, removed afterwards) are
    followed, whoever calls it: a wrapper flattening the inputs, the tracer itself.
    """
    watch = ValueWatch()
    follow = _Follow(watch)
    arrivals = _Arrivals(follow)
    hook = model.register_forward_pre_hook(arrivals, with_kwargs=True)
    try:
        with follow, warnings.catch_warnings():
            # The tracer's own warning about Python values is what the watch reports, with
            # the model's line and without the shapes it also warns about.
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
            yield watch
    finally:
        arrivals.follow = None
        hook.remove()


@contextlib.contextmanager
def refuse_value_dependence(model: torch.nn.Module, what: str) -> Iterator[ValueWatch]:
    """:func:`watch_value_dependence` that refuses what it finds: on leaving the block,
    :class:`~dlopt.errors.ValueDependentGraph` names ``what`` (``"the model's ONNX
    export"``) and quotes every line found, also when the tracer itself failed after
    taking a value (the finding explains the failure). What a tracing provider wraps
    around its trace::

        with refuse_value_dependence(model, "the model's MyNPU trace"):
            graph = torch.jit.trace(wrapper, example)
    """
    with watch_value_dependence(model) as watch:
        try:
            yield watch
        except Exception as exc:
            if watch.found:
                raise ValueDependentGraph(watch.message(what)) from exc
            raise
    watch.raise_if_found(what)


def check_value_independence(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None
) -> ValueWatch:
    """Trace ``model`` on ``(args, kwargs)`` with ``torch.jit.trace`` under the watch, for a
    plan whose own capture cannot host it (an exporter that captures through
    ``torch.export``, a vendor SDK); the trace is discarded. Inputs are copied (inference
    tensors cannot be traced) and the model's training flags are put back.

    Returns the watch; a model the tracer cannot take is judged on the calls it made
    before it stopped (an eager call is made under the watch as well, so a model that
    cannot be traced at all is judged on its eager path).
    """
    kwargs = dict(kwargs or {})
    with torch.inference_mode(False), torch.no_grad():
        own_args, own_kwargs = map_tensors(lambda t: t.detach().clone(), (tuple(args), kwargs))
        flat = tuple(iter_tensors((own_args, own_kwargs)))
        wrapper = _Flat(model, own_args, own_kwargs)
        modes = {module: module.training for module in model.modules()}
        try:
            with watch_value_dependence(model) as watch, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the tracer's own warnings
                try:
                    torch.jit.trace(wrapper, flat, check_trace=False, strict=False)
                except Exception:  # not traceable: the eager path is what is left to judge
                    model(*own_args, **own_kwargs)
        finally:
            for module, training in modes.items():
                module.training = training
    return watch


class _Flat(torch.nn.Module):
    """``model`` taking its tensor inputs as one flat tuple (what a tracer takes)."""

    def __init__(self, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]):
        super().__init__()
        self.model = model
        self._template = (args, kwargs)

    def forward(self, *flat: torch.Tensor) -> Any:
        leaves = iter(flat)
        args, kwargs = map_tensors(lambda _: next(leaves), self._template)
        return tuple(iter_tensors(self.model(*args, **kwargs)))
