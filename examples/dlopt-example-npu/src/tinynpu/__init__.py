"""tinynpu: a tiny FAKE accelerator SDK, shipped inside the dlopt example provider.

Nothing here is fast: the "device" is a pool of host threads. What matters is that it
behaves the way a vendor NPU SDK does, as far as an inference framework can tell:

- :func:`devices` lists the visible devices (``TINYNPU_VISIBLE_DEVICES`` hides them,
  like ``CUDA_VISIBLE_DEVICES``); :func:`ping` checks that one answers.
- :func:`compile` turns a host ``torch.nn.Module`` into a :class:`Program` (a
  ``torch.jit.trace`` of it on example inputs, optionally frozen, which folds BatchNorm
  into the convolutions), and :meth:`Program.save` / :func:`load_program` write and read
  the SDK's own program file.
- :meth:`Device.load` places a program on a device; calling the :class:`LoadedProgram`
  takes HOST tensors, copies them to "device memory" and *enqueues* the work: it returns
  the output tensors at once, and they hold the results only once
  :meth:`Device.synchronize` has returned (as CUDA streams do). A failure inside a queued
  call is raised by the next ``synchronize()``.
- :meth:`Device.memory_stats` reports the device memory the SDK allocated (weights,
  in-flight inputs and outputs), which torch cannot see.

``TINYNPU_LAUNCH`` changes when queued work runs (a debugging switch, like
``CUDA_LAUNCH_BLOCKING``): ``async`` (default) runs it on the worker threads as soon as
they are free; ``blocking`` finishes every call before it returns; ``deferred`` starts
queued calls only in ``synchronize()`` and fills outputs with NaN until then, so a caller
that reads outputs without synchronizing sees garbage every time, not now and then.

The SDK knows nothing about dlopt: the provider in :mod:`dlopt_example_npu` adapts it.
"""

from __future__ import annotations

import copy
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__version__ = "1.0.0"

#: Comma-separated device indices to expose; empty hides every device. Unset: one device.
VISIBLE_DEVICES_ENV = "TINYNPU_VISIBLE_DEVICES"
#: ``async`` (default), ``blocking`` or ``deferred``; see the module docstring.
LAUNCH_ENV = "TINYNPU_LAUNCH"
LAUNCH_MODES = ("async", "blocking", "deferred")
#: The device memory every (fake) device has.
DEVICE_MEMORY_BYTES = 4 << 30
#: The program file's own metadata, stored inside the TorchScript zip.
_PROGRAM_INFO = "tinynpu.json"
_PROGRAM_FORMAT = 1


class NpuError(RuntimeError):
    """Anything the SDK refuses or that failed on the device."""


@dataclass(frozen=True)
class DeviceInfo:
    """One visible device."""

    index: int
    name: str
    memory_bytes: int


def devices() -> list[DeviceInfo]:
    """The visible devices (``TINYNPU_VISIBLE_DEVICES`` selects them; unset: device 0)."""
    raw = os.environ.get(VISIBLE_DEVICES_ENV)
    if raw is None:
        indices = [0]
    else:
        try:
            indices = [int(part) for part in raw.split(",") if part.strip()]
        except ValueError:
            raise NpuError(
                f"{VISIBLE_DEVICES_ENV}={raw!r} is not a comma-separated list of device indices"
            ) from None
    return [DeviceInfo(i, f"tinynpu{i}", DEVICE_MEMORY_BYTES) for i in indices]


def ping(index: int = 0, timeout_s: float = 2.0) -> float:
    """Run an empty call on device ``index``; seconds the round trip took."""
    start = time.perf_counter()
    device = open_device(index, worker_threads=1)
    try:
        done = threading.Event()
        device._submit(done.set)
        device._flush()
        if not done.wait(timeout_s):
            raise NpuError(f"tinynpu{index} did not answer within {timeout_s} s")
        device.synchronize()
    finally:
        device.close()
    return time.perf_counter() - start


def open_device(
    index: int = 0, *, worker_threads: int = 1, queue_depth: int = 16, launch: str | None = None
) -> Device:
    """Open device ``index`` with ``worker_threads`` threads running queued calls.

    ``queue_depth``: calls that may wait in the queue before enqueuing blocks.
    ``launch``: see the module docstring (default: ``TINYNPU_LAUNCH`` or ``async``).
    """
    visible = {d.index: d for d in devices()}
    if index not in visible:
        raise NpuError(f"no tinynpu device {index}; visible: {sorted(visible) or 'none'}")
    mode = launch if launch is not None else os.environ.get(LAUNCH_ENV, "async")
    if mode not in LAUNCH_MODES:
        raise NpuError(f"launch mode {mode!r} is not one of {', '.join(LAUNCH_MODES)}")
    if worker_threads < 1 or queue_depth < 1:
        raise NpuError("worker_threads and queue_depth must be at least 1")
    return Device(visible[index], worker_threads, queue_depth, mode)


# ----------------------------------------------------------------------------- programs


class _Flat(torch.nn.Module):
    """The model with every input positional (``args``, then ``kwargs`` by name) and its
    outputs flattened to a tuple of tensors; ``spec`` records their structure.

    TorchScript cannot return a dict holding both a tensor and a list: the program
    returns flat tensors and the SDK rebuilds the structure from the spec.
    """

    def __init__(self, module: torch.nn.Module, n_args: int, kwarg_names: Sequence[str]) -> None:
        super().__init__()
        self.module = module
        self.n_args = n_args
        self.kwarg_names = tuple(kwarg_names)
        self.spec: Any = None

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kwargs = dict(zip(self.kwarg_names, inputs[self.n_args :], strict=True))
        leaves, self.spec = _flatten(self.module(*inputs[: self.n_args], **kwargs))
        return tuple(leaves)


@dataclass
class Program:
    """A compiled program: a TorchScript module taking the model's inputs positionally
    and returning flat tensors, plus ``output_spec``, the structure to rebuild."""

    module: torch.jit.ScriptModule
    n_args: int
    kwarg_names: tuple[str, ...]
    output_spec: Any
    frozen: bool

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights and buffers the program carries (after freezing: constants)."""
        tensors = [*self.module.parameters(), *self.module.buffers()]
        if self.frozen:  # freezing turns weights into graph constants
            tensors = [
                node.t("value")
                for node in self.module.graph.nodes()
                if node.kind() == "prim::Constant"
                and node.hasAttribute("value")
                and node.kindOf("value") == "t"
            ]
        return sum(t.numel() * t.element_size() for t in tensors)

    def flat_inputs(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor]:
        """The call's inputs in the program's order; refuses what it was not compiled for."""
        if len(args) != self.n_args or set(kwargs) != set(self.kwarg_names):
            raise NpuError(
                f"this program takes {self.n_args} positional input(s) and keyword inputs "
                f"{list(self.kwarg_names)}; got {len(args)} and {sorted(kwargs)}"
            )
        flat = [*args, *(kwargs[name] for name in self.kwarg_names)]
        for position, value in enumerate(flat):
            if not isinstance(value, torch.Tensor):
                raise NpuError(f"input {position} is a {type(value).__name__}, not a tensor")
            if value.device.type != "cpu":
                raise NpuError(
                    f"input {position} is on {value.device}: tinynpu takes host (cpu) tensors"
                )
        return flat

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the program file (a TorchScript zip with the SDK's own metadata)."""
        info = {
            "format": _PROGRAM_FORMAT,
            "sdk_version": __version__,
            "n_args": self.n_args,
            "kwarg_names": list(self.kwarg_names),
            "output_spec": self.output_spec,
            "frozen": self.frozen,
        }
        path = Path(path)
        torch.jit.save(self.module, str(path), _extra_files={_PROGRAM_INFO: json.dumps(info)})
        return path


def compile(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    freeze: bool = False,
    optimize_numerics: bool = True,
) -> Program:
    """Compile ``module`` for host inputs shaped like ``args``/``kwargs``.

    The program owns its own copy of the weights (they are "uploaded"), so later
    changes to ``module`` do not reach it and the program never writes to ``module``.
    ``freeze`` inlines weights as constants and folds BatchNorm into convolutions;
    ``optimize_numerics=False`` keeps the folds that do not change rounding only.
    """
    kwargs = dict(kwargs or {})
    names = tuple(sorted(kwargs))
    flat = _Flat(copy.deepcopy(module).eval(), len(args), names).eval()
    inputs = tuple([*args, *(kwargs[n] for n in names)])
    try:
        with torch.no_grad():
            traced = torch.jit.trace(flat, inputs, check_trace=False)
            if freeze:
                traced = torch.jit.freeze(traced, optimize_numerics=optimize_numerics)
    except NpuError:
        raise
    except Exception as exc:
        raise NpuError(f"tinynpu cannot compile this model: {type(exc).__name__}: {exc}") from exc
    return Program(traced, len(args), names, flat.spec, freeze)


def load_program(path: str | os.PathLike[str]) -> Program:
    """Read a program file written by :meth:`Program.save`.

    The file is a TorchScript archive, the SDK's own format: ``torch.jit.load`` reads a
    TorchScript graph and its tensors; it does not unpickle arbitrary Python objects.
    """
    extra = {_PROGRAM_INFO: ""}
    try:
        module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
        info = json.loads(extra[_PROGRAM_INFO])
        if not isinstance(info, dict) or info.get("format") != _PROGRAM_FORMAT:
            raise ValueError(f"unknown program format {info!r}")
        names = tuple(str(n) for n in info["kwarg_names"])
        spec = info["output_spec"]
        _check_spec(spec)
        return Program(module, int(info["n_args"]), names, spec, bool(info["frozen"]))
    except Exception as exc:
        raise NpuError(f"{path} is not a tinynpu program: {type(exc).__name__}: {exc}") from exc


# ----------------------------------------------------------------------------- trees
# An output spec is JSON: "tensor", {"tuple": [...]}, {"list": [...]} or
# {"dict": [[key, spec], ...]} (string keys), so a program file can carry it.


def _flatten(value: Any) -> tuple[list[torch.Tensor], Any]:
    """Tensor leaves of tensors, tuples, lists and dicts, and the spec to rebuild them."""
    if isinstance(value, torch.Tensor):
        return [value], "tensor"
    if isinstance(value, (tuple, list)):
        leaves: list[torch.Tensor] = []
        specs = []
        for item in value:
            sub, spec = _flatten(item)
            leaves += sub
            specs.append(spec)
        return leaves, {"tuple" if isinstance(value, tuple) else "list": specs}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        leaves, specs = [], []
        for key, item in value.items():
            sub, spec = _flatten(item)
            leaves += sub
            specs.append([key, spec])
        return leaves, {"dict": specs}
    raise NpuError(
        "tinynpu programs return tensors, tuples, lists and dicts with string keys, not "
        f"{type(value).__name__}"
    )


def _unflatten(spec: Any, leaves: Sequence[torch.Tensor]) -> Any:
    """Rebuild the structure ``spec`` describes from ``leaves``, in order."""
    remaining = iter(leaves)

    def build(node: Any) -> Any:
        if node == "tensor":
            return next(remaining)
        ((kind, items),) = node.items()
        if kind == "dict":
            return {key: build(sub) for key, sub in items}
        built = [build(sub) for sub in items]
        return tuple(built) if kind == "tuple" else built

    return build(spec)


def _check_spec(spec: Any) -> None:
    """Refuse a spec that is not one :func:`_flatten` writes (it comes from a file)."""
    if spec == "tensor":
        return
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ValueError(f"bad output spec {spec!r}")
    ((kind, items),) = spec.items()
    if kind not in ("tuple", "list", "dict") or not isinstance(items, list):
        raise ValueError(f"bad output spec {spec!r}")
    for item in items:
        if kind == "dict":
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise ValueError(f"bad output spec {spec!r}")
            item = item[1]
        _check_spec(item)


# ----------------------------------------------------------------------------- device


class _Job:
    """One queued call: ``run`` executes on a worker; ``nbytes`` is freed when it ends."""

    __slots__ = ("nbytes", "run")

    def __init__(self, run: Callable[[], None], nbytes: int) -> None:
        self.run = run
        self.nbytes = nbytes


_STOP = object()


class Device:
    """An open device: worker threads that run queued calls, and device-memory accounting.

    Use :func:`open_device`. ``close()`` waits for queued work and stops the workers; it
    is idempotent.
    """

    def __init__(self, info: DeviceInfo, worker_threads: int, queue_depth: int, launch: str):
        self.info = info
        self.launch = launch
        self.worker_threads = worker_threads
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_depth)
        self._deferred: list[_Job] = []
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._pending = 0
        self._in_use = 0
        self._peak = 0
        self._closed = False
        self._workers = [
            threading.Thread(target=self._work, name=f"{info.name}-worker{i}", daemon=True)
            for i in range(worker_threads)
        ]
        for worker in self._workers:
            worker.start()

    # -- memory --------------------------------------------------------------------
    def _allocate(self, nbytes: int) -> None:
        with self._lock:
            if self._in_use + nbytes > self.info.memory_bytes:
                raise NpuError(
                    f"{self.info.name} is out of memory: {nbytes} bytes requested, "
                    f"{self.info.memory_bytes - self._in_use} free"
                )
            self._in_use += nbytes
            self._peak = max(self._peak, self._in_use)

    def _free(self, nbytes: int) -> None:
        with self._lock:
            self._in_use -= nbytes

    def memory_stats(self) -> dict[str, int]:
        """``in_use_bytes`` now, ``peak_bytes`` since the device was opened, ``total_bytes``."""
        with self._lock:
            return {
                "in_use_bytes": self._in_use,
                "peak_bytes": self._peak,
                "total_bytes": self.info.memory_bytes,
            }

    # -- queue ---------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is _STOP:
                    return
                try:
                    job.run()
                except BaseException as exc:  # raised by the next synchronize()
                    with self._lock:
                        self._errors.append(exc)
                finally:
                    self._free(job.nbytes)
                    with self._lock:
                        self._pending -= 1
            finally:
                self._queue.task_done()

    def _submit(self, run: Callable[[], None], nbytes: int = 0) -> None:
        """Queue ``run``; ``nbytes`` of device memory are held until it has finished."""
        if self._closed:
            raise NpuError(f"{self.info.name} was closed")
        self._allocate(nbytes)
        with self._lock:
            self._pending += 1
        job = _Job(run, nbytes)
        if self.launch == "deferred":
            self._deferred.append(job)
            return
        self._queue.put(job)  # blocks while the queue is full
        if self.launch == "blocking":
            self.synchronize()

    def _flush(self) -> None:
        jobs, self._deferred = self._deferred, []
        for job in jobs:
            self._queue.put(job)

    def pending_calls(self) -> int:
        """Calls enqueued and not finished yet."""
        with self._lock:
            return self._pending

    def synchronize(self) -> None:
        """Wait until every queued call has finished; raise the first one that failed."""
        self._flush()
        self._queue.join()
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise NpuError(
                f"a queued call failed on {self.info.name}: {type(errors[0]).__name__}: {errors[0]}"
            ) from errors[0]

    def load(self, program: Program) -> LoadedProgram:
        """Place ``program``'s weights in device memory; the result runs it here."""
        return LoadedProgram(self, program)

    def close(self) -> None:
        """Finish queued work, stop the workers and free the device (idempotent)."""
        if self._closed:
            return
        try:
            self._flush()
            self._queue.join()
        finally:
            self._closed = True
            for _ in self._workers:
                self._queue.put(_STOP)
            for worker in self._workers:
                worker.join(timeout=10)
            with self._lock:
                self._in_use = 0
                self._errors = []

    @property
    def closed(self) -> bool:
        return self._closed


class LoadedProgram:
    """A program placed on a device. Calling it enqueues one call (see the module doc).

    Each new input signature (shapes and dtypes) is specialized on its first call, which
    runs to completion before returning (like an NPU compiling a shape); later calls with
    that signature are asynchronous.
    """

    def __init__(self, device: Device, program: Program) -> None:
        self.device = device
        self.program = program
        self._layouts: dict[tuple[Any, ...], list[tuple[torch.Size, torch.dtype]]] = {}
        device._allocate(program.weight_bytes)

    @property
    def signatures(self) -> list[list[list[int]]]:
        """The input shapes specialized so far."""
        return [[list(shape) for shape, _ in key] for key in self._layouts]

    def specialize(self, args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> Any:
        """Compile the signature of ``args``/``kwargs`` now; its outputs."""
        flat = self.program.flat_inputs(args, kwargs or {})
        return self._run_now(flat, _signature(flat))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = self.program.flat_inputs(args, kwargs)
        key = _signature(flat)
        layout = self._layouts.get(key)
        if layout is None:
            return self._run_now(flat, key)
        poison = self.device.launch == "deferred"
        outputs = [_empty(shape, dtype, poison) for shape, dtype in layout]
        # The host-to-device copy happens at enqueue: later writes to the caller's
        # tensors do not reach the queued call.
        uploaded = [t.detach().clone() for t in flat]
        nbytes = _nbytes(uploaded) + _nbytes(outputs)
        self.device._submit(lambda: self._execute(uploaded, outputs, layout), nbytes)
        return _unflatten(self.program.output_spec, outputs)

    def _execute(
        self,
        inputs: list[torch.Tensor],
        outputs: list[torch.Tensor],
        layout: list[tuple[torch.Size, torch.dtype]],
    ) -> None:
        with torch.inference_mode():
            leaves = self.program.module(*inputs)
            got = [(leaf.shape, leaf.dtype) for leaf in leaves]
            if got != layout:
                raise NpuError(f"the program returned {got}, specialized for {layout}")
            for out, leaf in zip(outputs, leaves, strict=True):
                out.copy_(leaf)

    def _run_now(self, flat: list[torch.Tensor], key: tuple[Any, ...]) -> Any:
        result: list[list[torch.Tensor]] = []

        def run() -> None:
            with torch.inference_mode():
                result.append([leaf.clone() for leaf in self.program.module(*flat)])

        self.device.synchronize()
        self.device._submit(run, _nbytes(flat))
        self.device.synchronize()
        leaves = result[0]
        self._layouts[key] = [(leaf.shape, leaf.dtype) for leaf in leaves]
        return _unflatten(self.program.output_spec, leaves)


def _signature(flat: Sequence[torch.Tensor]) -> tuple[Any, ...]:
    return tuple((tuple(t.shape), t.dtype) for t in flat)


def _nbytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _empty(shape: torch.Size, dtype: torch.dtype, poison: bool) -> torch.Tensor:
    if poison and (dtype.is_floating_point or dtype.is_complex):
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.empty(shape, dtype=dtype)


__all__ = [
    "DEVICE_MEMORY_BYTES",
    "LAUNCH_ENV",
    "LAUNCH_MODES",
    "VISIBLE_DEVICES_ENV",
    "Device",
    "DeviceInfo",
    "LoadedProgram",
    "NpuError",
    "Program",
    "compile",
    "devices",
    "load_program",
    "open_device",
    "ping",
]
