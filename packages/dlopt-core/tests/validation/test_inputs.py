"""Workload inputs: nested structures, non-tensor values, devices."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import pytest
import torch

from dlopt.errors import WorkloadError
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase
from dlopt.validation import prepare_inputs

Batch = namedtuple("Batch", ["ids", "mask"])


@dataclasses.dataclass
class Extra:
    t: torch.Tensor
    scale: float = 1.0


def test_nested_inputs_keep_structure_and_values():
    x = torch.ones(2)
    case = WorkloadCase(
        "c",
        args=(x, [Batch(x, None), {"k": (x, 3)}], "text"),
        kwargs={"extra": Extra(x, 2.0), "flag": True},
    )
    args, kwargs = prepare_inputs(case, ExecutionTarget("cpu"))
    assert args[0] is x  # already on the target: not copied
    assert isinstance(args[1][0], Batch) and args[1][0].mask is None
    assert args[1][1]["k"][1] == 3 and args[2] == "text"
    assert isinstance(kwargs["extra"], Extra) and kwargs["extra"].scale == 2.0
    assert kwargs["flag"] is True
    args, kwargs = prepare_inputs(((x,), {"y": x}), "cpu")
    assert args == (x,) and kwargs == {"y": x}


def test_tensor_that_cannot_be_moved_names_case_and_path():
    meta = torch.empty(2, device="meta")
    case = WorkloadCase(
        "batch-8", args=(torch.ones(1),), kwargs={"inputs": {"mask": [torch.ones(1), meta]}}
    )
    with pytest.raises(
        WorkloadError,
        match=r"case 'batch-8': kwargs\[\"inputs\"\]\[\"mask\"\]\[1\]: cannot move tensor",
    ):
        prepare_inputs(case, "cpu")
    with pytest.raises(WorkloadError, match=r"args\[0\]: tensor is on meta but the target is cpu"):
        prepare_inputs(((meta,), {}), "cpu", on_wrong_device="error")


def test_bad_case_shape_is_rejected():
    with pytest.raises(WorkloadError, match="WorkloadCase or an \\(args, kwargs\\) pair"):
        prepare_inputs(torch.ones(1), "cpu")


def test_inputs_in_pytree_containers_are_copied_and_fingerprinted():
    from collections import defaultdict, deque

    from dlopt.validation import InputFingerprint, copy_inputs

    x = torch.ones(2)
    args, kwargs = copy_inputs((deque([x], maxlen=4),), {"d": defaultdict(list, t=x)})
    assert type(args[0]) is deque and args[0].maxlen == 4
    assert args[0][0] is not x and torch.equal(args[0][0], x)
    assert type(kwargs["d"]) is defaultdict and kwargs["d"].default_factory is list
    assert kwargs["d"]["t"] is not x
    before = InputFingerprint.of(args, kwargs)
    assert [path for path, _ in before.digests] == ["args[0][0]", 'kwargs["d"]["t"]']
    kwargs["d"]["t"].add_(1)
    assert before.changed_paths(args, kwargs) == ['kwargs["d"]["t"]']


@pytest.mark.parametrize("source_is_inference", [False, True])
def test_copies_are_the_same_kind_of_tensor_as_their_source(source_is_inference):
    from dlopt.validation import copy_inputs

    with torch.inference_mode(source_is_inference):
        x = torch.ones(3)
    # Plans are called under inference mode; a copy made there must not turn a normal
    # tensor into an inference tensor (a compiled plan would guard on the difference).
    with torch.inference_mode():
        (copy,), _ = copy_inputs((x,), {})
    assert copy.is_inference() is source_is_inference
