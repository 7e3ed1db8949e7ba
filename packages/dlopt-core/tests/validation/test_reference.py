"""The reference is checked before any race."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dlopt.errors import ConfigurationError, ReferenceCheckError
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.validation import LimitOverride, QualityPolicy, capture_reference, top1_agreement


def net(dropout: float = 0.5) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 4))


def test_dropout_in_training_mode_is_refused_with_the_fix():
    model = net().train()
    with pytest.raises(ReferenceCheckError, match=r"training mode .*Call model\.eval\(\)") as info:
        capture_reference(model, [((torch.randn(4, 8),), {})])
    assert "training_mode='warn'" in str(info.value)


def test_nondeterministic_reference_is_refused_with_causes():
    model = net().train()
    policy = QualityPolicy(training_mode="warn")
    with (
        pytest.warns(RuntimeWarning, match="training mode"),
        pytest.raises(ReferenceCheckError) as info,
    ):
        capture_reference(model, WorkloadProfile.single(torch.randn(4, 8), name="b4"), policy)
    message = str(info.value)
    assert message.startswith("case 'b4': the eager fp32 reference is not deterministic")
    assert "differ at out: " in message
    for cause in ("training mode", "dropout", "model.eval()", "use_deterministic_algorithms"):
        assert cause in message


class RandomForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)


def test_random_ops_in_eval_mode_are_refused():
    with pytest.raises(ReferenceCheckError, match="not deterministic"):
        capture_reference(RandomForward().eval(), [((torch.zeros(3),), {})])


class Unstable(nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"ok": x, "bad": torch.log(x)}


def test_nonfinite_reference_is_refused_unless_allowed():
    x = torch.tensor([1.0, 0.0, -1.0])
    with pytest.raises(ReferenceCheckError, match=r'out\["bad"\] has 2 non-finite value\(s\) of 3'):
        capture_reference(Unstable().eval(), [((x,), {})])
    ref = capture_reference(
        Unstable().eval(), [((x,), {})], QualityPolicy(allow_nonfinite_reference=True)
    )
    assert math.isinf(float(ref.cases[0].outputs["bad"][1]))


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * 2


def test_model_that_mutates_itself_is_refused():
    with pytest.raises(ReferenceCheckError, match=r"changed its own state .*calls \(values\)"):
        capture_reference(Counter().eval(), [((torch.ones(2),), {})])


def test_failing_model_and_bad_outputs_are_refused():
    class Fails(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    class Odd(nn.Module):
        def forward(self, x):
            return (x, object())

    with pytest.raises(
        ReferenceCheckError, match="case 'case-0': the eager fp32 model raised ValueError"
    ):
        capture_reference(Fails().eval(), [((torch.ones(1),), {})])
    with pytest.raises(ReferenceCheckError, match=r"out\[1\]: unsupported output type"):
        capture_reference(Odd().eval(), [((torch.ones(1),), {})])


def test_good_reference_is_captured_on_cpu_with_inputs():
    model = net().eval()
    profile = WorkloadProfile(
        (
            WorkloadCase("b1", (torch.randn(1, 8),)),
            WorkloadCase("b4", (torch.randn(4, 8),), weight=3),
        )
    )
    ref = capture_reference(model, profile)
    assert ref.names == ("b1", "b4")
    assert ref["b4"].weight == 3
    assert ref["b4"].outputs.shape == (4, 4) and ref["b4"].outputs.device.type == "cpu"
    assert ref["b1"].leaf_paths == ("out",)
    with torch.no_grad():
        assert torch.equal(model(*ref["b4"].args), ref["b4"].outputs)
    assert ref.fingerprint.matches(model)
    with pytest.raises(KeyError, match="no reference case named 'x'"):
        ref["x"]


def test_policy_paths_must_exist_in_the_outputs():
    model = net().eval()
    bad = QualityPolicy(per_output={'out["logits"]': LimitOverride(max_rel_l2=0.1)})
    with pytest.raises(ConfigurationError, match=r"output paths are: \['out'\]"):
        capture_reference(model, [((torch.randn(2, 8),), {})], bad)
    with pytest.raises(ConfigurationError, match="user metric 'top1_agreement'"):
        capture_reference(
            model,
            [((torch.randn(2, 8),), {})],
            QualityPolicy(user_metrics=(top1_agreement(path="out[0]"),)),
        )
