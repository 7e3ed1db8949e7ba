"""Stage 0, batches: the batch sizes a batched workload races under the chosen objective.

``min_latency`` (and the latency objectives) race batch 1 only; ``max_throughput`` races
every batch size (the ground truth then drops those the reference has no memory for:
:mod:`dlopt.pipeline.ground_truth`). The public API converts a workload here, once.
"""

from __future__ import annotations

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
