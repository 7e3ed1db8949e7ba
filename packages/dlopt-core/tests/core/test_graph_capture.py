"""Value-dependent graphs found while a model is traced (``dlopt.plugin``'s check)."""

from __future__ import annotations

import copy

import pytest
import torch

from dlopt.errors import ValueDependentGraph
from dlopt.plugin import (
    check_value_independence,
    refuse_value_dependence,
    watch_value_dependence,
)
from dlopt.testing.models import VALUE_BRANCH_LINE, SmallConvNet, StructuredMLP, ValueBranchNet

X = torch.rand(4, 8) + 0.5  # every value positive: every raced input takes one branch


class SumBranch(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1 and x.size(1) == 8:  # shapes are no values
            pass
        if x.sum() > 0:
            return self.a(x)
        return self.a(x) * 3


class ItemThreshold(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        level = h.mean().item()
        return h * 2 if level > 0.5 else h


class ValueLoop(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(int(x.amax().clamp(max=3) * 2)):
            x = torch.relu(self.a(x))
        return x


class RowBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = [row * 2 if row.sum() > 0 else row for row in x]
        return torch.stack(rows)


class WrittenInPlace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buffer = torch.zeros(4, 8)
        view = buffer.view(-1)  # taken before the write
        buffer.add_(x)
        if view.sum() > 0:
            return x * 2
        return x


class TensorValuesInGraph(torch.nn.Module):
    """Shapes, weights, ``*_like`` and masks: all graph operations or constants of the
    model, never values of the inputs in Python."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        y = torch.zeros_like(x) + self.a(x)
        if y.dim() == 2 and n > 0 and x.is_contiguous():
            y = y.view(n, -1)
        if self.a.weight.abs().sum() > 0:  # the weights decide: a constant of the model
            y = y + 1
        for _row in y:  # iterating without looking at the values
            pass
        return torch.where(x.sum(1, keepdim=True) > 0, y, -y)


@pytest.mark.parametrize(
    ("model", "line", "made"),
    [
        (SumBranch(), "if x.sum() > 0:", "a Python bool"),
        (ItemThreshold(), "level = h.mean().item()", ".item()"),
        (ValueLoop(), "for _ in range(int(x.amax().clamp(max=3) * 2)):", "a Python int"),
        (RowBranch(), "rows = [row * 2 if row.sum() > 0 else row for row in x]", "a Python bool"),
        (WrittenInPlace(), "if view.sum() > 0:", "a Python bool"),
    ],
)
def test_a_python_value_taken_from_the_inputs_is_found_with_its_line(model, line, made):
    watch = check_value_independence(model.eval(), (X,))
    assert watch.found
    (conversion,) = watch.conversions
    assert conversion.line == line
    assert "test_graph_capture.py:" in conversion.where
    assert made in conversion.made
    message = watch.message("the trace")
    assert line in message and "eager fp32" in message


@pytest.mark.parametrize(
    ("model", "args", "kwargs"),
    [
        (TensorValuesInGraph(), (torch.randn(4, 8),), {}),
        (SmallConvNet(), (torch.randn(2, 3, 8, 8),), {}),
        (StructuredMLP(output="dict"), (torch.randn(4, 16),), {"mask": torch.rand(4, 8) > 0.5}),
    ],
    ids=["shapes-weights-masks", "conv", "mlp"],
)
def test_graphs_that_depend_on_shapes_and_weights_only_are_not_refused(model, args, kwargs):
    watch = check_value_independence(model.eval(), args, kwargs)
    assert not watch.found, watch.conversions


def test_library_layers_trace_clean():
    encoder = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2, enable_nested_tensor=True
    ).eval()
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[:, 4:] = True
    assert not check_value_independence(
        encoder, (torch.randn(2, 6, 16),), {"src_key_padding_mask": mask}
    ).found
    lstm = torch.nn.LSTM(8, 16, 2, batch_first=True).eval()
    assert not check_value_independence(lstm, (torch.randn(3, 5, 8),)).found


def test_the_watch_follows_inputs_through_a_tracer_that_copies_the_model():
    model = ValueBranchNet().eval()
    x = torch.rand(2, 3, 16, 16)
    with watch_value_dependence(model) as watch:
        private = copy.deepcopy(model)  # a vendor SDK tracing its own copy
        torch.jit.trace(private, (x,), check_trace=False)
    assert watch.found and watch.conversions[0].line == VALUE_BRANCH_LINE
    # The copy keeps a hook that does nothing once the watch is over.
    private(x)
    assert len(watch.conversions) == 1
    assert not model._forward_pre_hooks


def test_refuse_names_what_was_traced_and_explains_a_tracer_that_failed():
    model = SumBranch().eval()
    expected = r"the MyNPU trace depends on the input values"
    with (
        pytest.raises(ValueDependentGraph, match=expected),
        refuse_value_dependence(model, "the MyNPU trace"),
    ):
        model(X)
    with (
        pytest.raises(ValueDependentGraph) as refused,
        refuse_value_dependence(model, "the MyNPU trace"),
    ):
        model(X)
        raise RuntimeError("the tracer gave up")
    assert isinstance(refused.value.__cause__, RuntimeError)
    with refuse_value_dependence(SmallConvNet().eval(), "a clean trace") as watch:
        SmallConvNet().eval()(torch.randn(1, 3, 8, 8))
    assert not watch.found


def test_the_check_leaves_the_model_as_it_was():
    model = ValueBranchNet()
    model.body.train()
    before = {name: module.training for name, module in model.named_modules()}
    check_value_independence(model, (torch.rand(1, 3, 16, 16),))
    assert {name: module.training for name, module in model.named_modules()} == before
    assert not model._forward_pre_hooks
