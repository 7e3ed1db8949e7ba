"""Stage 1, the ground truth: the eager fp32 reference every plan must reproduce.

Before anything is built: the workload is cut to the batch sizes the reference has memory
for (a ``max_batch_size`` profile), the model's weights are fingerprinted (a plan that
changes them is caught and undone), and eager fp32 runs every case twice in the
workload's calling context (:func:`dlopt.validation.capture_reference` refuses a reference
that cannot serve as ground truth). A race, a cache hit's check and a winner brought back
into the host of an isolated selection all start here.
"""

from __future__ import annotations

import attrs
import torch

from dlopt.errors import ConfigurationError
from dlopt.pipeline.state import SelectionContext
from dlopt.settings.workload import WorkloadProfile
from dlopt.validation import ModelGuard, ReferenceOutputs, capture_reference


@attrs.frozen(eq=False)
class GroundTruth:
    """The workload as raced (cut for memory), the guard on the model's weights and the
    reference outputs."""

    workload: WorkloadProfile
    guard: ModelGuard
    reference: ReferenceOutputs


def capture(
    model: torch.nn.Module, workload: WorkloadProfile, context: SelectionContext
) -> GroundTruth:
    """The ground truth of one selection (see the module docstring)."""
    quality = context.policy.quality
    guard = ModelGuard(model, snapshot=quality.snapshot_weights)
    workload = fit_to_memory(model, workload, context.target.input_device)
    reference = capture_reference(model, workload, quality, target=context.target, guard=guard)
    return GroundTruth(workload, guard, reference)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the model ran out of memory (host or device)."""
    oom_type = getattr(torch, "OutOfMemoryError", None)
    if isinstance(exc, MemoryError) or (oom_type is not None and isinstance(exc, oom_type)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def fit_to_memory(
    model: torch.nn.Module, workload: WorkloadProfile, device: str
) -> WorkloadProfile:
    """``workload`` without the batch sizes from the first the model runs out of memory on.

    Runs the model once per batch size, smallest first, in inference mode (``device``:
    where the model and inputs live, whose cache is emptied after a failure); other errors are left for the reference check to
    report. Batch 1 running out of memory is a ``ConfigurationError``: nothing can race.
    """
    if not workload.fit_to_memory or workload.batch_sizes is None:
        return workload
    for index, case in enumerate(workload.cases):
        try:
            with torch.inference_mode():
                model(*case.args, **case.kwargs)
        except Exception as exc:
            if not out_of_memory(exc):
                return workload
            size = workload.batch_size_of(index)
            note = (
                f"batch sizes from {size} on dropped: the reference ran out of memory at "
                f"batch {size} ({type(exc).__name__}: {str(exc).strip()[:200]})"
            )
            if index == 0:
                raise ConfigurationError(
                    f"the model runs out of memory at batch {size}, the smallest batch size: "
                    f"{note}; lower the sample's size or serve on a larger device"
                ) from None
            _release(device)
            return workload.first_cases(index, memory_note=note)
    return workload


def _release(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
