"""Real torchao builds of the schemes that run on CPU, checked against eager."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlopt.plugin import (
    ExecutionTarget,
    Precision,
    ProviderBuildError,
    ProviderContext,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt_torchao import Scheme, TorchAOProvider


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(256, 512)
        self.down = torch.nn.Linear(512, 128)
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.down(torch.relu(self.up(x)))))


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return MLP().eval()


def _context(tmp_path: Path, x: torch.Tensor) -> ProviderContext:
    return ProviderContext(
        target=ExecutionTarget("cpu"), workload=WorkloadProfile.single(x), artifact_dir=tmp_path
    )


def _errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    got, ref = got.double().flatten(), ref.double().flatten()
    rel_l2 = ((got - ref).norm() / ref.norm()).item()
    cosine = torch.nn.functional.cosine_similarity(got, ref, dim=0).item()
    return rel_l2, cosine


# Limits for quantized Linear stacks on random weights: int8 per-channel stays within a few
# percent; int4 groupwise (16 levels) is an order of magnitude coarser.
# The CPU int4 kernel packs 16 output rows at a time: the 10-way head stays in fp32.
@pytest.mark.parametrize(
    ("scheme", "precision", "max_rel_l2", "min_cosine", "skipped"),
    [
        (Scheme.INT8_DYNAMIC, Precision.INT8, 0.05, 0.998, []),
        (Scheme.INT8_WEIGHT_ONLY, Precision.INT8, 0.05, 0.998, []),
        (Scheme.INT4_WEIGHT_ONLY, Precision.INT4, 0.25, 0.97, ["head"]),
    ],
)
def test_cpu_scheme_builds_and_stays_close_to_eager(
    tmp_path: Path,
    scheme: Scheme,
    precision: Precision,
    max_rel_l2: float,
    min_cosine: float,
    skipped: list[str],
) -> None:
    model = _mlp()
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plan = TorchAOProvider(scheme).build(model, _context(tmp_path, x))
    try:
        assert plan.precision is precision
        with torch.inference_mode():
            ref = model(x)
            got = plan(x)
            # A second signature (3-D, other batch) runs through the same plan.
            x3 = torch.randn(2, 5, 256, generator=torch.Generator().manual_seed(2))
            got3, ref3 = plan(x3), model(x3)
        assert got.shape == ref.shape and got.dtype == torch.float32
        for g, r in ((got, ref), (got3, ref3)):
            rel_l2, cosine = _errors(g, r)
            assert rel_l2 < max_rel_l2, rel_l2
            assert cosine > min_cosine, cosine
            # Quantized, not a pass-through: the plan must differ from eager.
            assert rel_l2 > 1e-5
        meta = plan.metadata
        assert meta["scheme"] == scheme.value
        assert meta["quantized_layers"] == 3 - len(skipped)
        assert meta["quantizable_layers"] == 3
        assert meta["quantized_fraction"] == round((3 - len(skipped)) / 3, 4)
        assert list(meta["skipped_linear_layers"]) == skipped
    finally:
        plan.close()
    for key, value in model.state_dict().items():
        assert type(value) is torch.Tensor, f"caller's {key} was quantized"
        assert torch.equal(value, before[key])


def test_int4_group_size_follows_the_layers(tmp_path: Path) -> None:
    torch.manual_seed(0)
    # in_features 96 and 160: only 32 divides both.
    model = torch.nn.Sequential(
        torch.nn.Linear(96, 160), torch.nn.ReLU(), torch.nn.Linear(160, 32)
    ).eval()
    plan = TorchAOProvider(Scheme.INT4_WEIGHT_ONLY).build(
        model, _context(tmp_path, torch.randn(4, 96))
    )
    assert plan.metadata["group_size"] == 32
    assert plan.metadata["quantized_layers"] == 2


def test_int4_prefers_the_larger_group_size_that_covers_as_many_layers(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.Linear(64, 32)).eval()
    plan = TorchAOProvider(Scheme.INT4_WEIGHT_ONLY).build(
        model, _context(tmp_path, torch.randn(2, 128))
    )
    assert plan.metadata["group_size"] == 64  # 64 and 32 both cover both layers
    assert plan.metadata["skipped_linear_layers"] == {}


def test_int4_reports_why_a_layer_stayed_in_full_precision(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 128), torch.nn.Linear(128, 48), torch.nn.Linear(48, 16)
    ).eval()
    plan = TorchAOProvider(Scheme.INT4_WEIGHT_ONLY).build(
        model, _context(tmp_path, torch.randn(2, 128))
    )
    assert plan.metadata["group_size"] == 128
    assert plan.metadata["skipped_linear_layers"] == {
        "2": "in_features 48 is not a multiple of group size 128"
    }
    with torch.inference_mode():
        x = torch.randn(3, 128)
        rel_l2, _ = _errors(plan(x), model(x))
    assert rel_l2 < 0.25


def test_model_without_linear_layers_is_refused(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    with pytest.raises(ProviderBuildError, match=r"quantized 0 of 1 compute layers \(Conv2d x1\)"):
        TorchAOProvider(Scheme.INT8_DYNAMIC).build(
            model, _context(tmp_path, torch.randn(1, 3, 8, 8))
        )


def test_int4_with_no_divisible_layer_is_refused(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 5)).eval()
    with pytest.raises(ProviderBuildError, match=r"quantized 0 of 1 compute layers.*fits"):
        TorchAOProvider(Scheme.INT4_WEIGHT_ONLY).build(model, _context(tmp_path, torch.randn(1, 8)))


def test_fp8_build_on_cpu_fails_with_the_probe_reason(tmp_path: Path) -> None:
    with pytest.raises(ProviderBuildError, match=r"8\.9\+"):
        TorchAOProvider(Scheme.FP8).build(_mlp(), _context(tmp_path, torch.randn(1, 256)))


def test_build_leaves_inductor_config_alone(tmp_path: Path) -> None:
    import torch._inductor.config as inductor_config

    before = inductor_config.save_config_portable()
    for scheme in (Scheme.INT8_DYNAMIC, Scheme.INT4_WEIGHT_ONLY):
        TorchAOProvider(scheme).build(_mlp(), _context(tmp_path, torch.randn(1, 256))).close()
    assert inductor_config.save_config_portable() == before


@pytest.mark.slow
def test_compiled_weight_only_plan_stays_close_and_scopes_its_inductor_settings(
    tmp_path: Path,
) -> None:
    pytest.importorskip("dlopt_fx", reason="the compiled plans need dlopt-torchao[inductor]")
    import torch._inductor.config as inductor_config

    before = inductor_config.save_config_portable()
    model = _mlp()
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(1))
    with TorchAOProvider(Scheme.INT8_WEIGHT_ONLY, compiled=True).build(
        model, _context(tmp_path, x)
    ) as plan:
        meta = plan.metadata
        assert meta["compiler"] == "inductor" and meta["quantized_layers"] == 3
        assert meta["inductor_options"] == {"force_fuse_int_mm_with_mul": True}
        with torch.inference_mode():
            rel_l2, cosine = _errors(plan(x), model(x))
        assert 1e-5 < rel_l2 < 0.05 and cosine > 0.998
    assert inductor_config.save_config_portable() == before


def test_cuda_int8_matmuls_are_refused_for_layers_that_see_16_rows_or_fewer():
    from dlopt_torchao.provider import int_mm_row_problem

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    gen = torch.Generator().manual_seed(0)
    # Rows are every dimension but the last: 2 x 9 tokens = 18 rows is enough, 16 is not.
    big = WorkloadCase("tokens", args=(torch.randn(2, 9, 8, generator=gen),))
    small = WorkloadCase("b16", args=(torch.randn(16, 8, generator=gen),))
    assert int_mm_row_problem(model, {"0", "2"}, [big]) is None
    problem = int_mm_row_problem(model, {"0", "2"}, [big, small])
    assert problem is not None
    assert "more than 16 rows" in problem and "16 row(s) in case 'b16'" in problem
    assert "2 layer(s)" in problem and "torchao_int8_dynamic plan" in problem
    # Only the layers that would be quantized are counted.
    assert "1 layer(s)" in int_mm_row_problem(model, {"2"}, [small])
