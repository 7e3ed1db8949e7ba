"""Fault class: a model whose forward changes its own state.

Such a model is refused as a reference, and the user's buffers are put back before the
error is raised.
"""

from __future__ import annotations

import pytest
import torch

from dlopt.errors import ReferenceCheckError
from dlopt.settings.workload import WorkloadProfile
from dlopt.validation import capture_reference


class CallCounter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.fc(x) + self.calls


def test_a_counter_buffer_is_refused_and_restored():
    model = CallCounter().eval()
    with pytest.raises(ReferenceCheckError) as raised:
        capture_reference(model, WorkloadProfile.single(torch.randn(2, 4)))
    message = str(raised.value)
    assert "calls" in message and "restored" in message
    assert float(model.calls) == 0.0


def test_train_mode_batch_norm_statistics_are_restored_when_warned():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    before = model[1].running_mean.clone()
    from dlopt.validation import QualityPolicy

    with pytest.raises(ReferenceCheckError), pytest.warns(RuntimeWarning):
        capture_reference(
            model,
            WorkloadProfile.single(torch.randn(8, 4)),
            QualityPolicy(training_mode="warn"),
        )
    assert torch.equal(model[1].running_mean, before)
    assert int(model[1].num_batches_tracked) == 0
