"""A decision served by Triton through PyTriton (``pip install nvidia-pytriton``).

::

    from pytriton.triton import Triton
    from dlopt.serving.triton import bind

    with Triton() as triton:
        bind(triton, decision, model_name="resnet50")
        triton.serve()

:func:`triton_model` writes the model's configuration from the decision: its inputs and
outputs (:mod:`dlopt.serving.interface`: ``arg0``... or keyword names, ``out0``... or
the output keys; dtypes; ``-1`` where the raced cases differ), ``max_batch_size`` (the
largest raced batch size) and a dynamic batcher whose preferred batch sizes are the raced
ones and whose queue delay is ``max_delay_ms``. :func:`infer_function` is what Triton
calls with a batch of requests (numpy arrays, merged by Triton's dynamic batcher along
dimension 0): a plan that serves only its raced shapes gets the batch padded to the next
raced size with copies of real rows (:func:`~dlopt.serving.signature.resize_batch`),
whose outputs are dropped; outputs come back in the dtypes the configuration announces. Every call goes through
the decision, so its guard holds (non-finite inputs, plan failures, the health record).

PyTriton's Python backend stub links the system's ``libpython``; an interpreter built
elsewhere (pyenv, conda) must be found first: :func:`python_library_env` says what to add
to ``LD_LIBRARY_PATH`` before the server starts.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs
import numpy as np
import torch
from attrs import frozen

from dlopt.errors import ServingError
from dlopt.serving.batching import DEFAULT_MAX_DELAY_MS
from dlopt.serving.interface import ServingInterface, TensorSpec, output_arrays
from dlopt.serving.signature import resize_batch

#: The install command named when PyTriton is missing.
INSTALL_HINT = 'pip install "dlopt-core[triton]"'


class Decision(Protocol):
    """What the binding reads and calls: an ``OptimizationDecision``."""

    report: Any

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


@frozen
class TritonModel:
    """A Triton model's configuration, from a decision (:func:`triton_model`).

    ``inputs``/``outputs``: per-request shapes (without the batch dimension when
    ``max_batch_size`` > 0). ``preferred_batch_sizes`` and ``max_queue_delay_us``
    configure the dynamic batcher; ``pad_to``: the batch sizes the plan is called at
    (empty: any size).
    """

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...]
    max_queue_delay_us: int
    pad_to: tuple[int, ...]
    positional: int


def _interface(decision: Decision) -> ServingInterface:
    serving = decision.report.serving
    interface = serving.interface if serving is not None else None
    if interface is None or not interface.usable:
        why = interface.note if interface is not None else "the report records no interface"
        raise ServingError(
            f"plan {decision.report.selected_plan!r} cannot be bound to Triton: {why}"
        )
    return interface


def triton_model(
    decision: Decision, *, max_batch_size: int | None = None, max_delay_ms: float | None = None
) -> TritonModel:
    """The Triton configuration of ``decision`` (see the module docstring)."""
    interface = _interface(decision)
    serving = decision.report.serving
    sizes = tuple(serving.raced_batch_sizes)
    batched = serving.batch_dim == 0 and bool(sizes)
    largest = max(sizes) if sizes else 0
    if max_batch_size is not None and batched:
        largest = max_batch_size if serving.served_families else min(largest, max_batch_size)
    delay = DEFAULT_MAX_DELAY_MS if max_delay_ms is None else max_delay_ms

    def per_request(spec: TensorSpec) -> TensorSpec:
        return attrs.evolve(spec, shape=spec.shape[1:]) if batched else spec

    return TritonModel(
        inputs=tuple(per_request(s) for s in interface.inputs),
        outputs=tuple(per_request(s) for s in interface.outputs),
        max_batch_size=largest if batched else 0,
        preferred_batch_sizes=tuple(s for s in sizes if s <= largest) if batched else (),
        max_queue_delay_us=int(delay * 1000),
        pad_to=()
        if serving.served_families or not batched
        else tuple(s for s in sizes if s <= largest),
        positional=interface.positional,
    )


def infer_function(decision: Decision, model: TritonModel) -> Callable[..., dict[str, np.ndarray]]:
    """What Triton calls with one merged batch (named numpy arrays, batch first): the
    decision's outputs as named arrays."""
    names = [s.name for s in model.inputs]

    def infer(**arrays: np.ndarray) -> dict[str, np.ndarray]:
        tensors = [torch.from_numpy(np.ascontiguousarray(arrays[n])) for n in names]
        args = tuple(tensors[: model.positional])
        kwargs = dict(zip(names[model.positional :], tensors[model.positional :]))
        rows = int(tensors[0].shape[0]) if model.max_batch_size else 0
        size = next((s for s in model.pad_to if s >= rows), rows) if rows else 0
        if size > rows:
            padded = resize_batch(args, kwargs, 0, size)
            assert padded is not None  # every input carries the batch dimension
            args, kwargs = padded
        with torch.inference_mode():
            out = decision(*args, **kwargs)
        found = dict(output_arrays(model.outputs, out))
        if size > rows:
            found = {k: v[:rows] for k, v in found.items()}
        return found

    return infer


def bind(
    triton: Any,
    decision: Decision,
    *,
    model_name: str,
    max_batch_size: int | None = None,
    max_delay_ms: float | None = None,
    strict: bool = True,
) -> TritonModel:
    """Bind ``decision`` to a PyTriton ``Triton`` instance as ``model_name`` (see the module
    docstring); returns the configuration it used. Raises ``ImportError`` naming the
    extra when PyTriton is missing, :class:`~dlopt.errors.ServingError` when the decision
    has no wire interface."""
    try:
        from pytriton.decorators import batch
        from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    except ImportError:
        raise ImportError(f"binding to Triton needs PyTriton: {INSTALL_HINT}") from None
    model = triton_model(decision, max_batch_size=max_batch_size, max_delay_ms=max_delay_ms)
    infer = infer_function(decision, model)

    def tensors(specs: tuple[TensorSpec, ...]) -> list[Any]:
        return [Tensor(name=s.name, dtype=np.dtype(s.dtype), shape=s.shape) for s in specs]

    batcher = (
        DynamicBatcher(
            max_queue_delay_microseconds=model.max_queue_delay_us,
            preferred_batch_size=list(model.preferred_batch_sizes),
        )
        if model.max_batch_size
        else None
    )
    triton.bind(
        model_name=model_name,
        infer_func=batch(infer) if model.max_batch_size else _unbatched(infer),
        inputs=tensors(model.inputs),
        outputs=tensors(model.outputs),
        config=ModelConfig(max_batch_size=model.max_batch_size, batcher=batcher),
        strict=strict,
    )
    return model


def _unbatched(infer: Callable[..., dict[str, np.ndarray]]) -> Callable[..., Any]:
    """PyTriton's request-list calling convention for a model without batching."""

    def call(requests: list[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        return [infer(**dict(request)) for request in requests]

    return call


def python_library_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``LD_LIBRARY_PATH`` that lets PyTriton's Python backend stub load this
    interpreter's own ``libpython`` (``{}`` when nothing needs adding: the interpreter
    has no shared library, or its directory is on the path already)."""
    env = os.environ if environ is None else environ
    libdir = sysconfig.get_config_var("LIBDIR")
    library = sysconfig.get_config_var("LDLIBRARY")
    if not libdir or not library or not (Path(libdir) / str(library)).exists():
        return {}
    current = env.get("LD_LIBRARY_PATH", "")
    if libdir in current.split(os.pathsep):
        return {}
    return {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (libdir, current) if p)}
