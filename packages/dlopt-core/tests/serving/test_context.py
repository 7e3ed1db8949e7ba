"""The calling context and call signatures: the helpers every served call goes through."""

from __future__ import annotations

import collections

import pytest
import torch

from dlopt.contract.calling import (
    caller_grad_mode,
    grad_mode_scope,
    inputs_of_kind,
    needs_gradients,
    outputs_for_caller,
)
from dlopt.errors import WorkloadError
from dlopt.serving.signature import (
    describe,
    family_key,
    held_out_size,
    resize_batch,
    signature_key,
)
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.vocabulary import GradMode


@pytest.mark.parametrize("outer", ["inference_mode", "no_grad", "enabled"])
@pytest.mark.parametrize("mode", list(GradMode))
def test_a_scope_runs_its_block_in_its_mode_whatever_the_callers(outer, mode):
    enclosing = {
        "inference_mode": torch.inference_mode,
        "no_grad": torch.no_grad,
        "enabled": torch.enable_grad,
    }[outer]
    with enclosing():
        with grad_mode_scope(mode):
            assert caller_grad_mode() is mode
        assert caller_grad_mode() is GradMode(outer)


def test_inputs_of_the_right_kind_pass_untouched_and_others_are_copied():
    with torch.inference_mode():
        made_inside = torch.ones(2)
    ordinary = torch.ones(2)
    args, kwargs = inputs_of_kind(GradMode.INFERENCE_MODE, (made_inside, 3), {"m": [made_inside]})
    assert args[0] is made_inside and kwargs["m"][0] is made_inside  # no copy
    args, kwargs = inputs_of_kind(GradMode.INFERENCE_MODE, (ordinary,), {"m": {"x": ordinary}})
    assert args[0].is_inference() and kwargs["m"]["x"].is_inference()
    assert not ordinary.is_inference()  # the caller's tensor is not changed
    args, _ = inputs_of_kind(GradMode.NO_GRAD, (made_inside,), {})
    assert not args[0].is_inference() and torch.equal(args[0], made_inside)


def test_outputs_made_in_inference_mode_reach_other_callers_as_ordinary_tensors():
    with torch.inference_mode():
        out = {"y": torch.ones(3), "n": 2}
    for caller in (GradMode.NO_GRAD, GradMode.ENABLED):
        handed = outputs_for_caller(out, caller)
        assert not handed["y"].is_inference() and handed["n"] == 2
        handed["y"].add_(1)  # writable in place outside inference mode
    assert outputs_for_caller(out, GradMode.INFERENCE_MODE) is out


def test_a_caller_needs_gradients_only_with_autograd_on_and_an_input_that_requires_them():
    x = torch.ones(2, requires_grad=True)
    assert needs_gradients(GradMode.ENABLED, (x,), {})
    assert not needs_gradients(GradMode.NO_GRAD, (x,), {})
    assert not needs_gradients(GradMode.ENABLED, (torch.ones(2),), {"k": 1})


def test_signatures_tell_shapes_dtypes_structure_and_constants_apart():
    x = torch.zeros(8, 3, 4, 4)
    key = signature_key((x, True), {"mask": torch.ones(8, dtype=torch.bool)})
    assert describe(key) == "(float32[8, 3, 4, 4]@cpu, True) {'mask': bool[8]@cpu}"
    assert key == signature_key((torch.ones(8, 3, 4, 4), True), {"mask": torch.ones(8) > 0})
    others = [
        signature_key((torch.zeros(4, 3, 4, 4), True), {"mask": torch.ones(8) > 0}),
        signature_key((x.double(), True), {"mask": torch.ones(8) > 0}),
        signature_key((x, False), {"mask": torch.ones(8) > 0}),
        signature_key((x, True), {"mask": [torch.ones(8) > 0]}),  # a list around it
        signature_key((x, True), {}),
    ]
    assert all(other != key for other in others)
    # A family forgets the sizes only.
    assert family_key(others[0]) == family_key(key)
    assert describe(family_key(key)) == "(float32[4d]@cpu, True) {'mask': bool[1d]@cpu}"
    assert family_key(others[1]) != family_key(key)


def test_signatures_of_other_containers_go_through_the_tree_walker():
    pair = collections.namedtuple("pair", "image scale")
    key = signature_key((pair(torch.zeros(2, 3), 0.5),), {})
    assert "float32[2, 3]@cpu" in describe(key) and "0.5" in describe(key)
    assert key != signature_key((pair(torch.zeros(2, 3), 0.25),), {})


def test_a_held_out_batch_repeats_real_rows_and_skips_every_raced_size():
    ids = torch.arange(8).view(4, 2)
    mask = torch.tensor([1, 1, 0, 1])
    args, kwargs = resize_batch((ids, 7), {"mask": mask, "table": torch.ones(5)}, 0, 6)
    assert args[0].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [0, 1], [2, 3]]
    assert args[1] == 7 and kwargs["mask"].tolist() == [1, 1, 0, 1, 1, 1]
    assert kwargs["table"].shape == (5,)  # not of the batch size: kept
    assert resize_batch((3,), {}, 0, 5) is None
    assert held_out_size({1, 8}) == 3 and held_out_size({3, 5}) == 7
    assert held_out_size(set(range(1, 20))) == 20


def test_the_workload_names_its_grad_mode_and_refuses_another_word():
    case = WorkloadCase("a", args=(torch.ones(1),))
    assert WorkloadProfile(cases=(case,)).grad_mode is GradMode.INFERENCE_MODE
    assert WorkloadProfile(cases=(case,), grad_mode="no_grad").grad_mode is GradMode.NO_GRAD
    with pytest.raises(WorkloadError, match=r"grad_mode .training..*inference_mode, no_grad"):
        WorkloadProfile(cases=(case,), grad_mode="training")
    batched = WorkloadProfile(cases=(case,), grad_mode="enabled").as_batched((1, 2))
    assert batched.grad_mode is GradMode.ENABLED
