"""``dlopt.testing.models``: the shared test models are what their docstrings say."""

from __future__ import annotations

import time

import pytest
import torch

from dlopt.testing.models import MLP, SlowEagerNet


def test_an_mlp_stacks_linear_layers_through_its_widths() -> None:
    model = MLP(16, 64, 64, 8, activation="relu")
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert not model.training and model(torch.randn(3, 16)).shape == (3, 8)
    assert [type(layer).__name__ for layer in MLP(4, 2).layers] == ["Linear"]
    with pytest.raises(ValueError, match="at least two widths"):
        MLP(4)


def test_the_slow_model_sleeps_in_eager_calls_on_contiguous_inputs_only(monkeypatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    model = SlowEagerNet(channels=16, convs=2, sleep_s=0.01, output="dict")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        out = model(x)
        assert slept == [0.01] and out["logits"].shape == (2, 32)
        model(x.to(memory_format=torch.channels_last))
        torch.jit.trace(SlowEagerNet(), (x,), check_trace=False)
        torch.fx.symbolic_trace(SlowEagerNet())
    assert slept == [0.01]
    torch.testing.assert_close(SlowEagerNet(seed=3)(x), SlowEagerNet(seed=3)(x))
