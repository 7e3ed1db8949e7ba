"""Nobody mutates the user's model; a plan that does is caught and undone."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlopt.contract.provider import BuiltPlan, ProviderContext
from dlopt.validation import ModelFingerprint, ModelGuard, ModelMutatedError


def model() -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    m[1].running_mean.normal_()
    return m.eval()


def state(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


class InPlaceProvider:
    """A badly written provider: folds a scale into the user's weights in place."""

    name = "in_place"
    precision = "fp32"

    def build(self, m: nn.Module, context: ProviderContext) -> BuiltPlan:
        with torch.no_grad():
            m[0].weight.mul_(2)
            m[1].running_mean.zero_()
        return BuiltPlan(runner=m)


class HalvingProvider:
    name = "halves"
    precision = "fp16"

    def build(self, m: nn.Module, context: ProviderContext) -> BuiltPlan:
        m.half()
        m.train()
        return BuiltPlan(runner=m, precision="fp16")


def test_fingerprint_is_stable_and_detects_any_change():
    m = model()
    fp = ModelFingerprint.of(m)
    assert fp.matches(m) and fp == ModelFingerprint.of(m)
    assert fp.describe_change(m) is None
    with torch.no_grad():
        m[2].bias[1] += 1e-7
    assert not fp.matches(m)
    assert fp.diff(m).changed == ("2.bias (values)",)
    m.train()
    assert "training mode changed on: <root>, 0, 1, 2" in fp.describe_change(m)


@pytest.mark.parametrize("provider", [InPlaceProvider(), HalvingProvider()])
def test_mutating_provider_is_caught_and_weights_restored(provider):
    m = model()
    before = state(m)
    weight_object = m[0].weight
    guard = ModelGuard(m)
    provider.build(m, ProviderContext())
    reason = guard.check(m, stage="build", plan=provider.name)
    assert reason is not None
    assert reason.startswith(
        f"plan {provider.name!r} mutated the user's model during build: changed: 0.weight"
    )
    restored = guard.restore(m)
    assert "0.weight" in restored.changed[0]
    assert guard.check(m) is None
    after = state(m)
    assert after.keys() == before.keys()
    for k in before:
        assert after[k].dtype == before[k].dtype
        assert torch.equal(after[k], before[k]), k
    assert not m.training
    assert m[0].weight is weight_object  # the user's Parameter objects stay valid


def test_no_snapshot_means_no_restore_with_clear_error():
    m = model()
    guard = ModelGuard(m, snapshot=False)
    assert not guard.has_snapshot
    InPlaceProvider().build(m, ProviderContext())
    with pytest.raises(ModelMutatedError, match="snapshot_weights is off"):
        guard.restore(m)


def test_structural_change_cannot_be_restored():
    m = model()
    guard = ModelGuard(m)
    m[1] = nn.Identity()
    assert "removed: 1.weight" in guard.check(m)
    with pytest.raises(ModelMutatedError, match="structure was changed"):
        guard.restore(m)


def test_tied_weights_are_fingerprinted_under_both_names():
    m = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False))
    m[1].weight = m[0].weight
    fp = ModelFingerprint.of(m)
    assert [t.name for t in fp.tensors] == ["0.weight", "1.weight"]
    guard = ModelGuard(m)
    with torch.no_grad():
        m[0].weight.add_(1)
    assert len(fp.diff(m).changed) == 2
    guard.restore(m)
    assert fp.matches(m) and m[1].weight is m[0].weight


def _flip_low_bit(t: torch.Tensor, index: int) -> None:
    """Change one element's lowest bit: a change no tolerance would see."""
    with torch.no_grad():
        t.view(-1).view(torch.int32)[index] ^= 1


@pytest.mark.parametrize(
    "change",
    [
        "low bit of a weight",
        "zero to negative zero",
        "nan payload",
        "tied weight through its second name",
        "training flag",
        "dtype",
    ],
)
def test_guard_check_against_the_snapshot_sees_every_change(change):
    m = model()
    m[2].weight = m[0].weight if change == "tied weight through its second name" else m[2].weight
    if change in ("zero to negative zero", "nan payload"):
        with torch.no_grad():
            m[0].bias[0] = 0.0 if change == "zero to negative zero" else float("nan")
    guard = ModelGuard(m)
    assert guard.check(m) is None
    if change == "low bit of a weight":
        _flip_low_bit(m[0].weight, 5)
    elif change == "zero to negative zero":
        with torch.no_grad():
            m[0].bias[0] = -0.0
    elif change == "nan payload":
        _flip_low_bit(m[0].bias, 0)
        assert torch.isnan(m[0].bias[0])
    elif change == "tied weight through its second name":
        # Listed first under its first name: the change is made through the second.
        _flip_low_bit(m[2].weight, 3)
    elif change == "training flag":
        m[1].train()
    else:
        m[1].double()
    problem = guard.check(m, plan="p")
    assert problem is not None and problem.startswith("plan 'p' mutated the user's model")
    guard.restore(m)
    assert guard.check(m) is None


def test_guard_check_compares_with_the_snapshot_without_hashing(monkeypatch):
    import dlopt.validation.fingerprint as fingerprint

    m = model()
    guard = ModelGuard(m)
    hashed: list[tuple[int, ...]] = []
    real = fingerprint.hash_tensor
    monkeypatch.setattr(
        fingerprint, "hash_tensor", lambda t: hashed.append(tuple(t.shape)) or real(t)
    )
    assert guard.check(m) is None
    assert hashed == []  # an intact model: every tensor vouched for by the snapshot
    with torch.no_grad():
        m[2].bias.add_(1.0)
    assert "changed: 2.bias (values)" in guard.check(m)
    # Without a snapshot the fingerprint alone decides, by hashing.
    hashed.clear()
    assert ModelGuard(model(), snapshot=False).check(model()) is None
    assert hashed
