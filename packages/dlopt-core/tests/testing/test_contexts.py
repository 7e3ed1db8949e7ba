"""``dlopt.testing.contexts``: the context a race hands build, for one provider's tests."""

from __future__ import annotations

import pytest
import torch

from dlopt.testing.contexts import build_context
from dlopt.testing.models import StructuredMLP


def test_each_input_is_a_prepared_case_with_its_reference_output():
    model = StructuredMLP()
    x1, x4 = torch.randn(1, 16), torch.randn(4, 16)
    context = build_context(model, x1, x4, ((torch.randn(4, 16),), {"scale": 2.0}))
    assert [c.name for c in context.cases] == ["b1", "b4", "b4_2"]
    assert torch.equal(context.cases[1].reference, model(x4))
    assert context.cases[2].kwargs == {"scale": 2.0}
    assert [c.name for c in context.workload.cases] == ["b1", "b4", "b4_2"]


def test_other_fields_pass_through_and_bad_inputs_are_named(tmp_path):
    context = build_context(StructuredMLP(), torch.randn(2, 16), artifact_dir=tmp_path)
    assert context.artifact_dir == tmp_path
    with pytest.raises(TypeError, match="a tensor or \\(args, kwargs\\), got str"):
        build_context(StructuredMLP(), "x")
