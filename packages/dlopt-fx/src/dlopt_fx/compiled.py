"""TorchInductor plumbing: per-plan compiled objects, dynamic dims, cache directory seam.

Isolation. Dynamo keeps compiled code per Python *code object*, and caps how many
variants one code object may hold (``recompile_limit``, 8 by default) before it silently
runs eager. Compiling ``model`` directly would make every compiled plan (and every other
provider that calls ``torch.compile``) share the cap of the model class's ``forward``.
Each plan therefore compiles its own entry function with a fresh code object: its cache
entries belong to that plan alone, and closing the plan clears exactly those entries
(``torch._dynamo.reset_code``) instead of a global ``torch._dynamo.reset()``, which would
throw away every other live plan's compiled code and make it pay its compile again in
the middle of a measurement.

Laziness. ``torch.compile`` compiles on the first call, so building a plan costs only the
copy (and the fx rewrites for ``fx_inductor``); compile time shows up as first-call time.

Nothing here is imported by the plugin module: ``torch._dynamo`` is imported by ``build``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from dlopt.plugin import PreparedCase, ProviderContext, WorkloadCase

#: Sub-directory of a plan's artifact directory that holds Inductor's caches.
CACHE_SUBDIR = "inductor-cache"

_entry_ids = itertools.count()


def plan_cache_dir(context: ProviderContext, plan_name: str) -> Path:
    """Where plan ``plan_name`` keeps Inductor's on-disk caches: inside dlopt's artifacts.

    With the plan cache enabled, a cache hit on the plan then also finds the compiled
    kernels (FX graph cache, C++/Triton kernels) and the first call skips most of the
    compile.
    """
    path = context.plan_dir(plan_name) / CACHE_SUBDIR
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def inductor_cache_scope(directory: Path) -> Iterator[None]:
    """Point Inductor's (and Triton's) on-disk caches at ``directory`` for the duration.

    Inductor reads ``TORCHINDUCTOR_CACHE_DIR`` when it compiles, and memoises some paths
    derived from it, so those memos are cleared on entry and exit. The previous
    environment is restored on exit; other plans keep the default directory.
    """
    from torch._inductor.utils import clear_caches

    directory.mkdir(parents=True, exist_ok=True)
    keys = {
        "TORCHINDUCTOR_CACHE_DIR": str(directory),
        "TRITON_CACHE_DIR": str(directory / "triton"),
    }
    previous = {key: os.environ.get(key) for key in keys}
    os.environ.update(keys)
    clear_caches()
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        clear_caches()


def _leaf_shapes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten((args, kwargs))
    return spec, leaves


def varying_dims(
    cases: Iterable[PreparedCase | WorkloadCase] | None,
) -> tuple[str, dict[int, tuple[int, ...]]]:
    """How to treat shapes for ``cases``: ``(policy, {leaf index: dims})``.

    ``"static"``: every case has the same input shapes, so compile for exactly those.
    ``"marked"``: the cases share a structure and differ in some dims; only those dims
    are marked dynamic, so one artifact can serve them (dims of size 0/1 stay
    specialised by Dynamo and cost an honest recompile).
    ``"automatic"``: structures differ (or no cases); Dynamo's automatic dynamic
    shapes decide after the first recompile.
    """
    cases = list(cases or ())
    if not cases:
        return "automatic", {}
    specs = []
    leaves_per_case = []
    for case in cases:
        spec, leaves = _leaf_shapes(case.args, case.kwargs)
        specs.append(spec)
        leaves_per_case.append(leaves)
    if any(spec != specs[0] for spec in specs[1:]):
        return "automatic", {}
    dims: dict[int, tuple[int, ...]] = {}
    for index, first in enumerate(leaves_per_case[0]):
        if not isinstance(first, torch.Tensor):
            continue
        column = [leaves[index] for leaves in leaves_per_case]
        if not all(isinstance(t, torch.Tensor) and t.dim() == first.dim() for t in column):
            return "automatic", {}
        varying = tuple(d for d in range(first.dim()) if len({t.shape[d] for t in column}) > 1)
        if varying:
            dims[index] = varying
    return ("marked" if dims else "static"), dims


def _fresh_entry(module: Callable[..., Any], tag: str) -> types.FunctionType:
    """A function calling ``module`` whose code object is new, so Dynamo's per-code cache
    (and its recompile limit) belongs to this plan only."""

    def entry(*args: Any, **kwargs: Any) -> Any:
        return module(*args, **kwargs)

    name = f"dlopt_{tag}_{next(_entry_ids)}"
    changes: dict[str, Any] = {"co_name": name}
    if sys.version_info >= (3, 11):
        changes["co_qualname"] = name
    code = entry.__code__.replace(**changes)
    return types.FunctionType(code, entry.__globals__, name, None, entry.__closure__)


class CompiledRunner:
    """Calls one plan's compiled entry under ``no_grad`` (Inductor freezing needs grad off,
    and one grad mode keeps Dynamo's guards stable).

    On the first call, the dims that vary across the cases are marked dynamic on
    aliases of the inputs (the caller's tensors are not annotated, so other plans that
    see the same tensors are not affected). With ``cache_dir``, every call with a new
    input signature (the calls that can compile) runs inside :func:`inductor_cache_scope`.
    """

    def __init__(
        self,
        compiled: Callable[..., Any],
        entry: types.FunctionType,
        marks: dict[int, tuple[int, ...]],
        cache_dir: Path | None,
    ) -> None:
        self._compiled = compiled
        self._code: types.CodeType | None = entry.__code__
        self._marks: dict[int, tuple[int, ...]] | None = marks or None
        self._cache_dir = cache_dir
        self._seen: set[Any] = set()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            if self._marks is not None:
                args, kwargs = self._mark(args, kwargs)
            if self._cache_dir is not None:
                signature = _signature(args, kwargs)
                if signature not in self._seen:
                    self._seen.add(signature)
                    with inductor_cache_scope(self._cache_dir):
                        return self._compiled(*args, **kwargs)
            return self._compiled(*args, **kwargs)

    def _mark(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        from torch.utils._pytree import tree_flatten, tree_unflatten

        marks, self._marks = self._marks, None
        assert marks is not None
        leaves, spec = tree_flatten((args, kwargs))
        for index, dims in marks.items():
            if index >= len(leaves) or not isinstance(leaves[index], torch.Tensor):
                return args, kwargs  # not the cases' structure: leave it to Dynamo
            if max(dims) >= leaves[index].dim():
                return args, kwargs
        for index, dims in marks.items():
            alias = leaves[index].detach()
            for dim in dims:
                torch._dynamo.maybe_mark_dynamic(alias, dim)
            leaves[index] = alias
        return tree_unflatten(leaves, spec)

    def close(self) -> None:
        """Drop this plan's compiled code (only its own Dynamo cache entries)."""
        code, self._code = self._code, None
        self._compiled = _closed
        if code is not None:
            reset_code = getattr(torch._dynamo, "reset_code", None)
            if reset_code is not None:
                reset_code(code)


def _closed(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this compiled plan was closed; build it again to run it")


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    spec, leaves = _leaf_shapes(args, kwargs)
    return (
        str(spec),
        tuple(
            (tuple(leaf.shape), leaf.dtype, leaf.device.type)
            if isinstance(leaf, torch.Tensor)
            else (type(leaf).__name__, leaf if isinstance(leaf, (int, float, bool, str)) else None)
            for leaf in leaves
        ),
    )


def compile_lazily(
    module: Callable[..., Any],
    *,
    tag: str,
    options: dict[str, Any],
    cases: Iterable[PreparedCase | WorkloadCase] | None,
    dynamic_policy: str = "auto",
    cache_dir: Path | None = None,
) -> tuple[CompiledRunner, dict[str, Any]]:
    """``torch.compile`` ``module`` behind a per-plan entry; nothing compiles until called.

    ``dynamic_policy``: ``"auto"`` follows ``cases`` (see :func:`varying_dims`),
    ``"static"`` compiles each shape on its own, ``"automatic"`` leaves it to Dynamo.
    Returns the runner and metadata describing the choices.
    """
    import torch._dynamo  # heavy: imported only when a plan is built

    if dynamic_policy == "auto":
        policy, marks = varying_dims(cases)
    elif dynamic_policy in {"static", "automatic"}:
        policy, marks = dynamic_policy, {}
    else:
        raise ValueError(
            f"dynamic_policy must be 'auto', 'static' or 'automatic', got {dynamic_policy!r}"
        )
    entry = _fresh_entry(module, tag)
    compiled = torch.compile(
        entry,
        backend="inductor",
        options=dict(options) or None,
        dynamic=False if policy == "static" else None,
    )
    runner = CompiledRunner(compiled, entry, marks, cache_dir)
    metadata = {
        "compiler": "inductor",
        "inductor_options": {k: v for k, v in sorted(options.items())},
        "dynamic_shapes": policy,
        "dynamic_dims": {str(index): list(dims) for index, dims in sorted(marks.items())},
        "compiles_on_first_call": True,
        "inductor_cache_dir": str(cache_dir) if cache_dir is not None else None,
    }
    return runner, metadata
