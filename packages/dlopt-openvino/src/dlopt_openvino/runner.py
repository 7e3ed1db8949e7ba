"""Calling a compiled OpenVINO model like the PyTorch model it came from.

- **Threads.** An ``InferRequest`` holds one call's inputs and outputs, so it must not be
  shared by calls that overlap. Each calling thread gets infer requests of its own (made
  on its first call, from the compiled model, which is safe to share): any number of
  threads may call one runner at once.
- **Inputs** are handed over as numpy views of the torch tensors (no copy; detached,
  made contiguous and moved to the host first where needed), so a tensor made inside or
  outside ``torch.inference_mode()`` works alike.
- **Outputs** are copied out of the request (``share_outputs=False``, or the batch halves
  concatenated) into fresh tensors the caller owns: the next call on the same request
  cannot overwrite them. They are ordinary tensors (made outside inference mode, needing
  no gradient) whatever the caller's grad mode, so they can also be used in autograd
  after a call made inside ``torch.inference_mode()``.
- **Throughput.** Under the throughput hint OpenVINO runs several streams, each serving
  one request at a time. A call whose batch (dimension 0 of every input and output) can
  be split is split across one asynchronous request per stream and the parts joined;
  other calls run on one request.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

from dlopt.plugin import WorkloadError, iter_tensors, numpy_view
from dlopt_openvino.convert import INPUT_DTYPES, InputLayout
from dlopt_openvino.outputs import OutputStructure


class Runner:
    """The plan's runner: ``runner(*args, **kwargs)`` -> the model's output structure.

    ``requests_per_call`` is how many infer requests one call may split its batch across
    (the compiled model's optimal number under the throughput hint; 1 otherwise);
    ``split_batch`` says whether this model's batch can be split at all.
    """

    def __init__(
        self,
        compiled: Any,
        layout: InputLayout,
        outputs: OutputStructure,
        *,
        requests_per_call: int = 1,
        split_batch: bool = False,
    ) -> None:
        self._compiled: Any = compiled
        self.layout = layout
        self.outputs = outputs
        self.output_count = len(outputs.dtypes)
        #: Per input: its dtype, rank and the sizes of its static dimensions.
        self._expected = [
            (
                INPUT_DTYPES[spec.dtype],
                len(spec.shape),
                tuple((d, size) for d, size in enumerate(spec.shape) if size is not None),
            )
            for spec in layout.inputs
        ]
        self.requests_per_call = max(1, int(requests_per_call))
        self.split_batch = split_batch and self.requests_per_call > 1
        self._local = threading.local()
        self._lock = threading.Lock()
        #: Every request made, so that close() can drop them from any thread.
        self._made: list[Any] = []

    @property
    def compiled(self) -> Any:
        """The compiled model (``None`` once closed)."""
        return self._compiled

    def _requests(self) -> list[Any]:
        """This thread's infer requests, made on its first call."""
        mine = getattr(self._local, "requests", None)
        if mine is None:
            compiled = self._compiled
            if compiled is None:
                raise RuntimeError("this OpenVINO plan was closed; build it again to run it")
            count = self.requests_per_call if self.split_batch else 1
            mine = [compiled.create_infer_request() for _ in range(count)]
            with self._lock:
                self._made.extend(mine)
            self._local.requests = mine
        return mine

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = iter_tensors((args, kwargs))
        if len(flat) != len(self.layout.inputs):
            raise WorkloadError(
                f"this OpenVINO plan was converted for {len(self.layout.inputs)} input tensors "
                f"but the call passed {len(flat)}; call it with the argument structure of the "
                "workload it was raced on"
            )
        for index, (tensor, (dtype, rank, static)) in enumerate(zip(flat, self._expected)):
            if tensor.dtype != dtype or tensor.dim() != rank:
                raise WorkloadError(
                    f"input tensor {index} is {tensor.dtype} of rank {tensor.dim()}, but this "
                    f"OpenVINO plan was converted for {dtype} of rank {rank}"
                )
            for dim, size in static:
                if tensor.shape[dim] != size:
                    shape = [s if s is not None else "any" for s in self.layout.inputs[index].shape]
                    raise WorkloadError(
                        f"input tensor {index} has shape {list(tensor.shape)}, but this OpenVINO "
                        f"plan was converted for shape {shape}: only the dimensions that "
                        "varied between the raced cases are dynamic"
                    )
        arrays = [numpy_view(t) for t in flat]
        requests = self._requests()
        batch = arrays[0].shape[0] if arrays[0].ndim else 0
        if self.split_batch and batch > 1 and all(a.shape[0] == batch for a in arrays):
            results = self._split(requests, arrays, batch)
        else:
            answer = requests[0].infer(arrays, share_inputs=True, share_outputs=False)
            results = [answer[i] for i in range(self.output_count)]
        # Ordinary tensors even inside inference_mode (where from_numpy would make
        # inference tensors, which autograd refuses to save later).
        with torch.inference_mode(False):
            return self.outputs([torch.from_numpy(np.asarray(r)) for r in results])

    def _split(self, requests: list[Any], arrays: list[np.ndarray], batch: int) -> list[Any]:
        """One asynchronous request per part of the batch; the parts' outputs joined."""
        bounds = np.linspace(0, batch, min(len(requests), batch) + 1).astype(int)
        used = requests[: len(bounds) - 1]
        for request, low, high in zip(used, bounds[:-1], bounds[1:]):
            # Rows of a C-contiguous array are contiguous: the slices are views.
            request.start_async([a[low:high] for a in arrays], share_inputs=True)
        for request in used:
            request.wait()
        # concatenate copies out of the requests' buffers.
        return [
            np.concatenate([request.get_output_tensor(i).data for request in used])
            for i in range(self.output_count)
        ]

    def close(self) -> None:
        """Drop the compiled model and every thread's requests (OpenVINO frees them)."""
        with self._lock:
            self._compiled = None
            self._made.clear()
        self._local = threading.local()
