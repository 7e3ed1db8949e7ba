"""Stage 0, batches: the batch sizes a batched workload races under the chosen objective.

``min_latency`` (and the latency objectives) race batch 1 only; ``max_throughput`` races
every batch size, and a profile built with ``max_batch_size`` first drops the sizes from
the first one the reference model cannot run for lack of memory (the reason is kept in
the profile and the report).
"""

from __future__ import annotations

import torch

from dlopt.errors import ConfigurationError
from dlopt.settings.workload import WorkloadProfile
from dlopt.vocabulary import Objective


def batches_to_race(workload: WorkloadProfile, objective: Objective) -> WorkloadProfile:
    """The profile the race runs: a batched profile cut to batch 1 outside the
    throughput objective; the throughput objective refuses a profile that is not batched."""
    if objective is Objective.MAX_THROUGHPUT:
        if workload.batch_sizes is None:
            raise ConfigurationError(
                "objective 'max_throughput' compares batch sizes: give a batched workload, "
                "WorkloadProfile.batched(sample, batch_sizes=(1, 2, 4, 8)) (or "
                "max_batch_size=64), built from one request's inputs"
            )
        return workload
    if workload.batch_sizes is None or len(workload.batch_sizes) == 1:
        return workload
    if workload.batch_sizes[0] != 1:
        raise ConfigurationError(
            f"objective {objective.value!r} races batch 1 of a batched workload, and its "
            f"batch sizes {list(workload.batch_sizes)} do not include 1: add 1, or choose "
            "objective 'max_throughput'"
        )
    return workload.first_cases(1)


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
