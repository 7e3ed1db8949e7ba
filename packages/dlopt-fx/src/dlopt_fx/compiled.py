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
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dlopt.plugin import Concurrency, ServingTraits, scoped_environment

if TYPE_CHECKING:
    from dlopt.plugin import PreparedCase, ProviderContext, WorkloadCase

#: How a compiled plan is served. Dynamo guards on the grad mode and on whether inputs are
#: inference tensors, so the plan serves only in the context it was judged in (the
#: decision enters it); a signature it never raced would compile at serving time, so it
#: serves none; and one thread at a time (Dynamo's caches and guards are not promised to
#: be safe to evaluate while another thread compiles).
COMPILED_SERVING = ServingTraits(
    concurrency=Concurrency.SERIALIZED,
    any_grad_mode=False,
    differentiable=False,
    dynamic_shapes=False,
)

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
    with scoped_environment(keys):
        clear_caches()
        try:
            yield
        finally:
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


#: The memory format that makes an input of this rank channels-last.
CHANNELS_LAST_BY_RANK = {4: torch.channels_last, 5: torch.channels_last_3d}


def channels_last_rank(cases: Iterable[PreparedCase | WorkloadCase]) -> int | None:
    """The rank (4 or 5) of the largest floating image/volume input in ``cases``, or
    ``None`` when no case has one (channels-last would then change nothing)."""
    ranks = [
        leaf.dim()
        for case in cases
        for leaf in _leaf_shapes(case.args, case.kwargs)[1]
        if isinstance(leaf, torch.Tensor)
        and leaf.is_floating_point()
        and leaf.dim() in CHANNELS_LAST_BY_RANK
    ]
    return max(ranks, default=None)


def with_autocast_and_layout(
    module: Callable[..., Any],
    *,
    device_type: str,
    autocast_dtype: torch.dtype | None = None,
    channels_last: bool = False,
) -> Callable[..., Any]:
    """``module`` called with its 4-D/5-D floating inputs made channels-last and under
    ``torch.autocast(device_type, autocast_dtype)``; compiled, both land inside the graph,
    so Inductor sees the bf16 ops and the layout it must keep (and can fuse the copies)."""
    if autocast_dtype is None and not channels_last:
        return module

    def to_channels_last(tensor: torch.Tensor) -> torch.Tensor:
        memory_format = CHANNELS_LAST_BY_RANK.get(tensor.dim())
        if memory_format is None or not tensor.is_floating_point():
            return tensor
        return tensor.contiguous(memory_format=memory_format)

    def run(*args: Any, **kwargs: Any) -> Any:
        if channels_last:
            from torch.utils._pytree import tree_map_only

            args, kwargs = tree_map_only(torch.Tensor, to_channels_last, (args, kwargs))
        if autocast_dtype is None:
            return module(*args, **kwargs)
        with torch.autocast(device_type=device_type, dtype=autocast_dtype):
            return module(*args, **kwargs)

    return run


def equals_reference_bit_for_bit(outputs: Any, reference: Any) -> bool | None:
    """Whether every floating output leaf equals the reference's bit for bit (compared in
    the reference's dtype); ``None`` when there is nothing to judge (no floating leaves, or
    the structures differ: validation reports that)."""
    _, got = _leaf_shapes((outputs,), {})
    _, want = _leaf_shapes((reference,), {})
    if len(got) != len(want):
        return None
    pairs = [
        (g, w)
        for g, w in zip(got, want)
        if isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor) and w.is_floating_point()
    ]
    if not pairs:
        return None
    return all(
        g.shape == w.shape and torch.equal(g.detach().to("cpu", w.dtype), w) for g, w in pairs
    )


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
    see the same tensors are not affected). Every call with a new input signature (the
    calls that can compile) runs inside the plan's compile scope: :func:`inductor_cache_scope`
    with ``cache_dir``, and ``torch._inductor.config.patch(trace_config)``: settings Dynamo
    reads while it traces (freezing decides there whether weights become graph constants),
    which ``torch.compile(options=...)`` applies only later, inside Inductor.
    """

    def __init__(
        self,
        compiled: Callable[..., Any],
        entry: types.FunctionType,
        marks: dict[int, tuple[int, ...]],
        cache_dir: Path | None,
        trace_config: dict[str, Any] | None = None,
    ) -> None:
        self._compiled = compiled
        self._code: types.CodeType | None = entry.__code__
        self._marks: dict[int, tuple[int, ...]] | None = marks or None
        self._cache_dir = cache_dir
        self._trace_config = dict(trace_config or {})
        self._seen: set[Any] = set()
        #: The uncompiled module and the callable compiled from it (which runs the
        #: module), set by the provider: what an AOTInductor package is exported from.
        self.source: tuple[torch.nn.Module, Callable[..., Any]] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            if self._marks is not None:
                args, kwargs = self._mark(args, kwargs)
            if self._cache_dir is not None or self._trace_config:
                # Inference mode is part of Dynamo's guards: a change recompiles.
                signature = (_signature(args, kwargs), torch.is_inference_mode_enabled())
                if signature not in self._seen:
                    self._seen.add(signature)
                    with self._compile_scope():
                        return self._compiled(*args, **kwargs)
            return self._compiled(*args, **kwargs)

    def _compile_scope(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        if self._cache_dir is not None:
            stack.enter_context(inductor_cache_scope(self._cache_dir))
        if self._trace_config:
            import torch._inductor.config as inductor_config

            stack.enter_context(inductor_config.patch(self._trace_config))
        return stack

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
        self.source = None
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


def option_as_json(value: Any) -> Any:
    """An option value as report metadata (a custom graph pass is named by its class)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return type(value).__name__


def options_as_json(options: dict[str, Any]) -> dict[str, Any]:
    """Inductor options as report metadata, sorted by name."""
    return {key: option_as_json(value) for key, value in sorted(options.items())}


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
    # Freezing is read twice: by Dynamo while tracing (weights become graph constants) and
    # by Inductor (options); both are scoped to this plan's compiles.
    trace_config = {"freezing": True} if options.get("freezing") else {}
    runner = CompiledRunner(compiled, entry, marks, cache_dir, trace_config)
    metadata = {
        "compiler": "inductor",
        "inductor_options": options_as_json(options),
        "dynamic_shapes": policy,
        "dynamic_dims": {str(index): list(dims) for index, dims in sorted(marks.items())},
        "compiles_on_first_call": True,
        "inductor_cache_dir": str(cache_dir) if cache_dir is not None else None,
    }
    return runner, metadata
