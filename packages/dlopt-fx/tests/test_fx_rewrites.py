"""The fx plan: folds and removals keep fp32 results; sharing is handled; failures explain."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from dlopt.plugin import ProviderBuildError, ProviderContext, WorkloadCase, WorkloadProfile
from dlopt_fx.providers import FxProvider
from dlopt_fx.rewrites import simplify, trace


def _randomize_bn(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics, as a trained model would have."""
    gen = torch.Generator().manual_seed(7)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            n = module.num_features
            module.running_mean = torch.randn(n, generator=gen)
            module.running_var = torch.rand(n, generator=gen) + 0.5
            if module.affine:
                module.weight.data = torch.randn(n, generator=gen)
                module.bias.data = torch.randn(n, generator=gen)
    return model.eval()


def _workload(*shapes: tuple[int, ...], **kwargs: Any) -> WorkloadProfile:
    gen = torch.Generator().manual_seed(3)
    return WorkloadProfile(
        cases=tuple(
            WorkloadCase(f"case-{i}", args=(torch.randn(*shape, generator=gen),), kwargs=kwargs)
            for i, shape in enumerate(shapes)
        )
    )


def _build(model: nn.Module, workload: WorkloadProfile, tmp_path: Any) -> Any:
    context = ProviderContext(workload=workload, artifact_dir=tmp_path)
    return FxProvider().build(model, context)


def _folded(
    module: type[nn.Module], tmp_path: Any, *shapes: Any, **kwargs: Any
) -> tuple[nn.Module, WorkloadProfile, Any]:
    """A fresh ``module()`` with random batch-norm statistics (seed 0), cases of
    ``shapes``, and its fx plan, checked to compute what the model does on them."""
    torch.manual_seed(0)
    model = _randomize_bn(module())
    workload = _workload(*shapes, **kwargs)
    return model, workload, _build_equal(model, workload, tmp_path)


def _build_equal(model: nn.Module, workload: WorkloadProfile, tmp_path: Any) -> Any:
    """The fx plan of ``model``, checked to compute what ``model`` does on ``workload``."""
    plan = _build(model, workload, tmp_path)
    _check_equal(model, plan, workload)
    return plan


def _check_equal(model: nn.Module, plan: Any, workload: WorkloadProfile) -> None:
    with torch.no_grad():
        for case in workload.cases:
            torch.testing.assert_close(
                plan(*case.args, **case.kwargs),
                model(*case.args, **case.kwargs),
                rtol=1e-5,
                atol=1e-5,
            )


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Dropout(0.3),
        )
        self.conv1d = nn.Conv1d(16, 16, 1)
        self.bn1d = nn.BatchNorm1d(16)
        self.skip = nn.Identity()
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.skip(self.features(x))
        y = self.bn1d(self.conv1d(y.flatten(2))).mean(-1)
        return self.head(nn.functional.dropout(y, 0.5, training=self.training))


def test_convnet_folds_and_matches_eager(tmp_path: Any) -> None:
    model, _, plan = _folded(ConvNet, tmp_path, (1, 3, 12, 12), (4, 3, 12, 12))
    meta = plan.metadata
    assert meta["rewrites"] == {"dropout": 2, "identity": 1, "conv_bn": 3, "linear_bn": 0}
    assert meta["modules_after"] < meta["modules_before"]
    kinds = [type(m) for m in plan.runner.modules()]
    assert not any(issubclass(k, (nn.modules.batchnorm._BatchNorm, nn.Dropout)) for k in kinds)
    # The caller's model still has its BatchNorms and is still in eval mode.
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 2
    assert not model.training


class SharedConv(nn.Module):
    """One conv called twice (each call followed by a BN), and a conv whose output feeds
    both a BN and a residual sum (must not fold)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn_a = nn.BatchNorm2d(4)
        self.bn_b = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 1)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.bn_a(self.conv(x)))
        b = self.bn_b(self.conv(a))
        c = self.conv2(b)
        return self.bn2(c) + c


def test_shared_conv_folds_per_site_and_skips_conv_with_other_users(tmp_path: Any) -> None:
    _, _, plan = _folded(SharedConv, tmp_path, (2, 4, 8, 8))
    assert plan.metadata["rewrites"]["conv_bn"] == 2
    assert plan.metadata["rewrites_skipped"] == {"conv_bn_producer_output_has_other_users": 1}
    assert plan.metadata["modules_after"] < plan.metadata["modules_before"]
    # The unfoldable pair is still there, and the shared conv now has two fused copies.
    names = dict(plan.runner.named_modules())
    assert isinstance(names["bn2"], nn.BatchNorm2d) and "bn_a" not in names


class SharedBn(nn.Module):
    """One BN module applied after two different convs, plus tied conv weights."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_a = nn.Conv2d(3, 6, 3, padding=1)
        self.conv_b = nn.Conv2d(3, 6, 3, padding=1)
        self.conv_b.weight = self.conv_a.weight  # tied: folding one must not change the other
        self.bn = nn.BatchNorm2d(6)
        self.plain = nn.Conv2d(3, 6, 3, padding=1)
        self.plain.weight = self.conv_a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv_a(x)) + self.bn(self.conv_b(x)) + self.plain(x)


def test_shared_bn_and_tied_weights(tmp_path: Any) -> None:
    _, _, plan = _folded(SharedBn, tmp_path, (2, 3, 8, 8))
    assert plan.metadata["rewrites"]["conv_bn"] == 2
    assert plan.metadata["modules_after"] < plan.metadata["modules_before"]


class MlpBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(10, 20)
        self.bn1 = nn.BatchNorm1d(20)
        self.fc2 = nn.Linear(20, 6, bias=False)
        self.bn2 = nn.BatchNorm1d(6, affine=False)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.bn2(self.fc2(torch.relu(self.bn1(self.fc1(x))))) * scale


def test_linear_bn1d_folds_with_kwargs(tmp_path: Any) -> None:
    model, workload, plan = _folded(MlpBn, tmp_path, (1, 10), (4, 10), scale=2.5)
    assert plan.metadata["rewrites"]["linear_bn"] == 2
    assert not any(isinstance(m, nn.BatchNorm1d) for m in plan.runner.modules())
    # Defaults survive tracing: calling without the keyword matches eager too.
    x = workload.cases[0].args[0]
    torch.testing.assert_close(plan(x), model(x))


class SeqBn(nn.Module):
    """Linear on (N, L, F) then BatchNorm1d over dim 1 (= L): not a per-feature affine."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 5)
        self.bn = nn.BatchNorm1d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


def test_linear_bn1d_on_3d_activations_is_not_folded(tmp_path: Any) -> None:
    model = _randomize_bn(SeqBn())
    workload = _workload((2, 5, 5))
    plan = _build_equal(model, workload, tmp_path)
    assert plan.metadata["rewrites"]["linear_bn"] == 0
    assert plan.metadata["rewrites_skipped"] == {"linear_bn_activation_rank_3": 1}


def test_without_workload_rank_dependent_folds_are_skipped(tmp_path: Any) -> None:
    gm = trace(_randomize_bn(MlpBn()))
    report = simplify(gm)
    assert report.applied["linear_bn"] == 0
    assert report.skipped["linear_bn_no_shape_evidence"] == 2


def test_training_mode_modules_are_left_alone(tmp_path: Any) -> None:
    model = ConvNet().train()
    gm = trace(model)
    report = simplify(gm, ranks={"conv1d": {3}})
    assert report.applied["conv_bn"] == 0 and report.applied["dropout"] == 0
    assert report.skipped["conv_bn_bn_in_training_mode"] == 3
    assert model.training  # the caller's mode is kept, the trace used a copy


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow
            return self.fc(x)
        return x


def test_untraceable_model_is_rejected_with_tracer_message_and_line(tmp_path: Any) -> None:
    with pytest.raises(ProviderBuildError) as info:
        _build(DataDependent(), _workload((1, 4)), tmp_path)
    message = str(info.value)
    assert "control flow" in message  # the tracer's own words
    assert "test_fx_rewrites.py" in message and "if x.sum() > 0" in message
    assert "inductor" in message  # what to try instead


class Optional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, relu: bool = True
    ) -> torch.Tensor:
        y = self.fc(x)
        if mask is not None:
            y = y * mask
        return torch.relu(y) if relu else y


def test_workload_constants_are_traced_as_guarded_constants(tmp_path: Any) -> None:
    model = Optional().eval()
    workload = _workload((1, 4), (3, 4), relu=False)
    plan = _build_equal(model, workload, tmp_path)
    assert plan.metadata["traced_as_constants"] == ["mask", "relu"]
    x = workload.cases[0].args[0]
    with pytest.raises(AssertionError, match="specialized"):
        plan(x, mask=torch.ones(1, 4), relu=False)  # a value the trace did not see
    with pytest.raises(AssertionError, match="specialized"):
        plan(x, relu=True)


def test_unknown_rewrite_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown rewrites"):
        simplify(trace(SeqBn()), rewrites=("conv_bn", "fuse_everything"))
