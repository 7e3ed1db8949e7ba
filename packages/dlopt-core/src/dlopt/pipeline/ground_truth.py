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

from dlopt.pipeline.batches import fit_to_memory
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
