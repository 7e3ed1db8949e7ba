"""ONNX Runtime sessions and the runners that feed them torch tensors.

CPU: each input is handed over as ``tensor.numpy()`` (a view of the tensor's memory);
ONNX Runtime wraps a C-contiguous array of the right dtype without copying, and its
outputs come back as arrays over ONNX Runtime's buffers that ``torch.from_numpy`` wraps
without copying. Measured on a small conv net with onnxruntime 1.32 on 2 cores, this
costs about half the Python overhead of building an IO binding per call (64 µs vs
122 µs a call), for the same zero-copy result.

CUDA: IO binding. Inputs are bound by their data pointer, outputs are preallocated torch
tensors bound by pointer (their shapes come from the model's symbolic output shapes, or
are learned on the first call of a new input signature), and the session runs on a CUDA
stream torch knows about, ordered against the caller's current stream with stream waits.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from dlopt.plugin import WorkloadError, iter_tensors, numpy_view
from dlopt_onnxruntime.export import InputLayout, restore_outputs
from dlopt_onnxruntime.options import OPTIMIZATION_LEVELS

_ONNX_TO_TORCH = {
    "tensor(float)": torch.float32,
    "tensor(double)": torch.float64,
    "tensor(float16)": torch.float16,
    "tensor(bfloat16)": torch.bfloat16,
    "tensor(int64)": torch.int64,
    "tensor(int32)": torch.int32,
    "tensor(int16)": torch.int16,
    "tensor(int8)": torch.int8,
    "tensor(uint8)": torch.uint8,
    "tensor(bool)": torch.bool,
}


def session_options(
    ort: Any,
    *,
    threads: int,
    optimization: str = "all",
    extra: Mapping[str, str] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """``(SessionOptions, JSON record of what was set)``."""
    if optimization not in OPTIMIZATION_LEVELS:
        raise ValueError(
            f"graph optimization {optimization!r} is not one of {', '.join(OPTIMIZATION_LEVELS)}"
        )
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(
        ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[optimization]
    )
    # One request at a time: all threads go to intra-op parallelism, matched to the
    # threads the target grants, so ORT does not oversubscribe the cores torch uses.
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # The arena keeps freed blocks for the next call; the memory pattern plans buffers
    # once per input shape, which pays off when a few shapes repeat (a serving workload).
    options.enable_cpu_mem_arena = True
    options.enable_mem_pattern = True
    options.log_severity_level = 3
    for key, value in (extra or {}).items():
        options.add_session_config_entry(str(key), str(value))
    record = {
        "graph_optimization_level": optimization,
        "intra_op_num_threads": threads,
        "inter_op_num_threads": 1,
        "execution_mode": "sequential",
        "enable_cpu_mem_arena": True,
        "enable_mem_pattern": True,
        "config_entries": {str(k): str(v) for k, v in (extra or {}).items()},
    }
    return options, record


def _flat_inputs(
    layout: InputLayout, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[torch.Tensor]:
    flat = iter_tensors((args, kwargs))
    if len(flat) != len(layout.names):
        raise WorkloadError(
            f"this ONNX plan was exported for {len(layout.names)} input tensors but the call "
            f"passed {len(flat)}; call it with the same argument structure as the workload"
        )
    return flat


def make_cpu_runner(
    session: Any,
    layout: InputLayout,
    template: Any,
    output_names: Sequence[str],
) -> Any:
    """A runner for a CPU-side session (CPU EP, OpenVINO on CPU...)."""
    wanted = {i.name for i in session.get_inputs()}
    # Exporters may drop inputs the graph never reads; those are not fed.
    feeds_for = [(i, name) for i, name in enumerate(layout.names) if name in wanted]
    names = list(output_names)

    def run(*args: Any, **kwargs: Any) -> Any:
        flat = _flat_inputs(layout, args, kwargs)
        feeds = {}
        for index, name in feeds_for:
            feeds[name] = numpy_view(flat[index])
        outputs = session.run(names, feeds)
        return restore_outputs(template, [torch.from_numpy(out) for out in outputs])

    return run


def _np_dtype(dtype: torch.dtype) -> Any:
    return torch.empty(0, dtype=dtype).numpy().dtype


class CudaRunner:
    """IO-binding runner for a CUDA-side session (CUDA or TensorRT EP).

    Output buffers are torch tensors allocated on the caller's current stream; the session
    runs on ``stream`` (passed to the EP as ``user_compute_stream``), which waits for the
    caller's stream before and is waited on after, so the call is asynchronous like any
    other torch op and needs no device synchronization.
    """

    def __init__(
        self,
        ort: Any,
        session: Any,
        layout: InputLayout,
        template: Any,
        output_names: Sequence[str],
        device: torch.device,
        stream: torch.cuda.Stream,
    ) -> None:
        self.session = session
        self.layout = layout
        self.template = template
        self.output_names = list(output_names)
        self.device = device
        self.stream = stream
        inputs = {i.name: i for i in session.get_inputs()}
        self.feeds_for = [(i, n) for i, n in enumerate(layout.names) if n in inputs]
        self.input_shapes = {n: list(inputs[n].shape) for _, n in self.feeds_for}
        outputs = {o.name: o for o in session.get_outputs()}
        self.output_meta = [
            (list(outputs[n].shape), _ONNX_TO_TORCH.get(outputs[n].type)) for n in self.output_names
        ]
        self.run_options = ort.RunOptions()
        # Outputs live in torch tensors ordered by stream waits: no host synchronization.
        self.run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self._learned: dict[
            tuple[tuple[int, ...], ...], list[tuple[tuple[int, ...], torch.dtype]]
        ] = {}
        self._lock = threading.Lock()

    def _symbolic_shapes(
        self, bound: Mapping[str, torch.Tensor]
    ) -> list[tuple[tuple[int, ...], torch.dtype]] | None:
        symbols: dict[str, int] = {}
        for name, declared in self.input_shapes.items():
            for dim, size in zip(declared, bound[name].shape):
                if isinstance(dim, str):
                    symbols[dim] = int(size)
        shapes = []
        for declared, dtype in self.output_meta:
            if dtype is None:
                return None
            shape = []
            for dim in declared:
                if isinstance(dim, int):
                    shape.append(dim)
                elif isinstance(dim, str) and dim in symbols:
                    shape.append(symbols[dim])
                else:
                    return None
            shapes.append((tuple(shape), dtype))
        return shapes

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = _flat_inputs(self.layout, args, kwargs)
        current = torch.cuda.current_stream(self.device)
        index = self.device.index or 0
        binding = self.session.io_binding()
        bound: dict[str, torch.Tensor] = {}
        for position, name in self.feeds_for:
            tensor = flat[position]
            if tensor.device != self.device:
                tensor = tensor.to(self.device, non_blocking=True)
            if not tensor.is_contiguous():
                tensor = tensor.contiguous()
            bound[name] = tensor
            binding.bind_input(
                name, "cuda", index, _np_dtype(tensor.dtype), tuple(tensor.shape), tensor.data_ptr()
            )
        key = tuple(tuple(t.shape) for t in bound.values())
        with self._lock:
            shapes = self._learned.get(key)
        if shapes is None:
            shapes = self._symbolic_shapes(bound)
        if self.stream != current:
            self.stream.wait_stream(current)
        outputs: list[torch.Tensor]
        if shapes is not None:
            outputs = [torch.empty(s, dtype=d, device=self.device) for s, d in shapes]
            for name, out in zip(self.output_names, outputs):
                binding.bind_output(
                    name, "cuda", index, _np_dtype(out.dtype), tuple(out.shape), out.data_ptr()
                )
            try:
                self.session.run_with_iobinding(binding, self.run_options)
            except Exception:
                # The declared output shapes were wrong for this signature: learn them.
                shapes = None
                binding.clear_binding_outputs()
        if shapes is None:
            outputs = self._run_and_learn(binding, key)
        if self.stream != current:
            current.wait_stream(self.stream)
        return restore_outputs(self.template, outputs)

    def _run_and_learn(self, binding: Any, key: tuple[tuple[int, ...], ...]) -> list[torch.Tensor]:
        for name in self.output_names:
            binding.bind_output(name, "cuda", self.device.index or 0)
        self.session.run_with_iobinding(binding, self.run_options)
        # Once per new input signature: copy through the host to learn shapes/dtypes;
        # later calls with this signature write straight into torch tensors.
        self.stream.synchronize()
        outputs = [
            torch.from_numpy(value.numpy()).to(self.device) for value in binding.get_outputs()
        ]
        with self._lock:
            self._learned[key] = [(tuple(o.shape), o.dtype) for o in outputs]
        return outputs
