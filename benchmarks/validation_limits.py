"""Measure how far correct and broken plans land from eager fp32, to set quality limits.

Not a timing benchmark: it runs small real architectures built in code (a conv net
with batch norm and a residual, an MLP, a transformer encoder layer) under plans that
are correct for a precision class (bf16 autocast, pure bf16, fp16, int8 dynamic
quantization, emulated fp8/int4 weights, fp32 rewrites) and under plans with the bugs
real rewrites have (a dropped bias, a skipped layer, permuted channels, a BN fold that
forgot the running mean, a bad int8 calibration). It prints, per precision class, the
worst metric a correct plan showed, the best a broken plan showed, and the limits
``dlopt.validation.DEFAULT_LIMITS`` sets, then checks every correct plan passes its
class's defaults and every broken plan fails them.

    PYTHONPATH=packages/dlopt-core/src python benchmarks/validation_limits.py
"""

from __future__ import annotations

import copy
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from dlopt.precision import Precision
from dlopt.validation import (
    DEFAULT_LIMITS,
    QualityPolicy,
    compute_leaf_metrics,
    validate_outputs,
)

SEEDS = (0, 1, 2)


# ---------------------------------------------------------------------------- models


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(32, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.BatchNorm2d(32),
        )
        self.down = nn.Sequential(
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU()
        )
        self.head = nn.Linear(64, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        x = self.down(x)
        return self.head(x.mean(dim=(2, 3)))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 100)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.1, batch_first=True)
        self.head = nn.Linear(128, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x))


def build(name: str, seed: int) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    if name == "convnet":
        model: nn.Module = ConvNet()
        # Give batch norm real running statistics, as a trained model has.
        model.train()
        with torch.no_grad():
            for _ in range(5):
                model(torch.randn(16, 3, 32, 32) * 2 + 0.5)
        x = torch.randn(16, 3, 32, 32) * 2 + 0.5
    elif name == "mlp":
        model, x = Mlp(), torch.randn(256, 256)
    else:
        model, x = Encoder(), torch.randn(8, 32, 128)
    return model.eval(), x


# ---------------------------------------------------------------------------- plans


def _fake_quant(w: torch.Tensor, bits: int, group: int | None = None) -> torch.Tensor:
    """Symmetric per-output-channel (or per-group) weight quantization, dequantized."""
    shape = w.shape
    flat = w.reshape(shape[0], -1)
    if group is not None and flat.shape[1] % group == 0:
        flat = flat.reshape(-1, group)
    qmax = 2 ** (bits - 1) - 1
    scale = flat.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / qmax
    return (torch.round(flat / scale).clamp(-qmax, qmax) * scale).reshape(shape)


def _map_weights(model: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for m in clone.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                m.weight.copy_(fn(m.weight))
            if isinstance(m, nn.MultiheadAttention):
                m.in_proj_weight.copy_(fn(m.in_proj_weight))
    return clone


def _fold_bn(model: nn.Module, forget_mean: bool = False) -> nn.Module:
    clone = copy.deepcopy(model)
    for seq in clone.modules():
        if not isinstance(seq, nn.Sequential):
            continue
        for i in range(len(seq) - 1):
            conv, bn = seq[i], seq[i + 1]
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d):
                with torch.no_grad():
                    std = torch.sqrt(bn.running_var + bn.eps)
                    factor = bn.weight / std
                    conv.weight.mul_(factor.reshape(-1, 1, 1, 1))
                    mean = torch.zeros_like(bn.running_mean) if forget_mean else bn.running_mean
                    conv.bias.copy_((conv.bias - mean) * factor + bn.bias)
                seq[i + 1] = nn.Identity()
    return clone


def _last_linear(model: nn.Module) -> nn.Linear:
    return [m for m in model.modules() if isinstance(m, nn.Linear)][-1]


def _first_weighted(model: nn.Module) -> nn.Module:
    # The first layer with a nonzero bias (attention's out_proj starts with bias 0).
    return next(
        m
        for m in model.modules()
        if isinstance(m, (nn.Conv2d, nn.Linear)) and m.bias is not None and bool(m.bias.any())
    )


@dataclass
class Plan:
    name: str
    precision: Precision
    correct: bool
    run: Callable[[nn.Module, torch.Tensor], torch.Tensor]
    only: tuple[str, ...] = ()


def _autocast(dtype: torch.dtype) -> Callable[[nn.Module, torch.Tensor], torch.Tensor]:
    def run(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=dtype):
            return model(x).float()

    return run


def _pure(dtype: torch.dtype) -> Callable[[nn.Module, torch.Tensor], torch.Tensor]:
    def run(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return copy.deepcopy(model).to(dtype)(x.to(dtype)).float()

    return run


def _fp64(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return copy.deepcopy(model).double()(x.double()).float()


def _channels_last(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return copy.deepcopy(model).to(memory_format=torch.channels_last)(
        x.contiguous(memory_format=torch.channels_last)
    )


def _batch_split(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([model(part) for part in x.split(max(1, x.shape[0] // 3))])


def _dynamic_int8(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    from torch.ao.quantization import quantize_dynamic

    quantized = quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8)
    # The fused attention fast path cannot read packed int8 weights.
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return quantized(x)
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def _weights(bits: int, group: int | None = None):
    return lambda model, x: _map_weights(model, lambda w: _fake_quant(w, bits, group))(x)


def _fp8_weights(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    cast = _map_weights(model, lambda w: w.to(torch.float8_e4m3fn).float())
    return cast(x.to(torch.float8_e4m3fn).float())


def _int8_bad_calibration(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    # Per-tensor scale from a tenth of the range: large weights clip.
    def clip(w: torch.Tensor) -> torch.Tensor:
        scale = w.abs().max() / 10 / 127
        return torch.round(w / scale).clamp(-127, 127) * scale

    return _map_weights(model, clip)(x)


def _drop_bias(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    clone = copy.deepcopy(model)
    with torch.no_grad():
        _first_weighted(clone).bias.zero_()
    return clone(x)


def _permute_channels(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    # Swap two output channels of the first layer without fixing the next one.
    clone = copy.deepcopy(model)
    layer = _first_weighted(clone)
    with torch.no_grad():
        layer.weight[[0, 1]] = layer.weight[[1, 0]].clone()
    return clone(x)


def _skip_layer(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    clone = copy.deepcopy(model)
    if isinstance(clone, ConvNet):
        clone.block = nn.Sequential(nn.Identity())  # residual branch dropped
        clone.block.forward = lambda t: torch.zeros_like(t)
    elif isinstance(clone, Mlp):
        clone.layers[3] = nn.Identity()  # last GELU dropped
    else:
        with torch.no_grad():  # feed-forward branch dropped
            clone.layer.linear2.weight.zero_()
            clone.layer.linear2.bias.zero_()
    return clone(x)


def _gelu_tanh(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    clone = copy.deepcopy(model)
    for m in clone.modules():
        if isinstance(m, nn.GELU):
            m.approximate = "tanh"
    return clone(x)


PLANS = [
    Plan("fp64 compute", Precision.FP32, True, _fp64),
    Plan("batch split", Precision.FP32, True, _batch_split),
    Plan("channels_last", Precision.FP32, True, _channels_last, only=("convnet",)),
    Plan("conv-bn fold", Precision.FP32, True, lambda m, x: _fold_bn(m)(x), only=("convnet",)),
    Plan("bf16 autocast", Precision.BF16, True, _autocast(torch.bfloat16)),
    Plan("pure bf16", Precision.BF16, True, _pure(torch.bfloat16)),
    Plan("fp16 autocast", Precision.FP16, True, _autocast(torch.float16)),
    Plan("pure fp16", Precision.FP16, True, _pure(torch.float16)),
    Plan("int8 dynamic (quantize_dynamic)", Precision.INT8, True, _dynamic_int8),
    Plan("int8 per-channel weights", Precision.INT8, True, _weights(8)),
    Plan("fp8 e4m3 weights+acts (emulated)", Precision.FP8, True, _fp8_weights),
    Plan("int4 g32 weights (emulated)", Precision.INT4, True, _weights(4, 32)),
    Plan("gelu tanh approximation", Precision.FP32, False, _gelu_tanh, only=("mlp",)),
    Plan(
        "bn fold forgot running mean",
        Precision.FP32,
        False,
        lambda m, x: _fold_bn(m, forget_mean=True)(x),
        only=("convnet",),
    ),
    Plan("first layer bias dropped", Precision.FP32, False, _drop_bias),
    Plan("two channels swapped", Precision.FP32, False, _permute_channels),
    Plan("layer skipped", Precision.FP32, False, _skip_layer),
    Plan("int8 bad calibration (clipped)", Precision.INT8, False, _int8_bad_calibration),
]

MODELS = ("convnet", "mlp", "encoder")


@dataclass
class Row:
    model: str
    plan: Plan
    rel_l2: float
    cosine: float
    max_abs: float
    outside: float
    top1: float
    passed: bool


def measure() -> list[Row]:
    rows: list[Row] = []
    for model_name in MODELS:
        for plan in PLANS:
            if plan.only and model_name not in plan.only:
                continue
            worst: Row | None = None
            for seed in SEEDS:
                model, x = build(model_name, seed)
                with torch.inference_mode():
                    ref = model(x)
                    try:
                        out = plan.run(model, x)
                    except Exception as exc:
                        print(
                            f"# {model_name} / {plan.name}: not run ({type(exc).__name__}: {exc})"
                        )
                        break
                limits = DEFAULT_LIMITS[plan.precision]
                m = compute_leaf_metrics("out", out, ref, atol=limits.atol, rtol=limits.rtol)
                top1 = float((out.argmax(-1) == ref.argmax(-1)).double().mean())
                case = validate_outputs(
                    out, ref, precision=plan.precision, policy=QualityPolicy(), case_name="x"
                )
                row = Row(
                    model_name,
                    plan,
                    m.rel_l2 if m.rel_l2 is not None else math.inf,
                    m.cosine if m.cosine is not None else -1.0,
                    m.max_abs_error or 0.0,
                    m.outside_fraction or 0.0,
                    top1,
                    case.passed,
                )
                # Keep the worst seed for correct plans and the best seed for broken ones.
                if worst is None or (row.rel_l2 > worst.rel_l2) == plan.correct:
                    worst = row
            if worst is not None:
                rows.append(worst)
    return rows


def main() -> int:
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    rows = measure()
    print(
        f"torch {torch.__version__}; seeds {SEEDS}; worst seed shown for correct plans, best for broken\n"
    )
    print(
        "| model | plan | class | correct | rel_l2 | cosine | max_abs | outside | top1 | passes defaults |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.model} | {r.plan.name} | {r.plan.precision.value} | {'yes' if r.plan.correct else 'NO'} "
            f"| {r.rel_l2:.2e} | {r.cosine:.7f} | {r.max_abs:.2e} | {r.outside:.4f} | {r.top1:.3f} "
            f"| {'pass' if r.passed else 'FAIL'} |"
        )
    print("\nPer class (correct plans: worst; broken plans judged at that class's limits: best)\n")
    print(
        "| class | correct max rel_l2 | correct min cosine | correct max outside | correct min top1 "
        "| limit rel_l2 | limit cosine | limit outside | atol | rtol |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for precision in dict.fromkeys(p.precision for p in PLANS if p.correct):
        good = [r for r in rows if r.plan.correct and r.plan.precision is precision]
        lim = DEFAULT_LIMITS[precision]
        print(
            f"| {precision.value} | {max(r.rel_l2 for r in good):.2e} | {min(r.cosine for r in good):.7f} "
            f"| {max(r.outside for r in good):.4f} | {min(r.top1 for r in good):.3f} | {lim.max_rel_l2:g} "
            f"| {lim.min_cosine:g} | {lim.max_outside_fraction:g} | {lim.atol:g} | {lim.rtol:g} |"
        )
    broken = [r for r in rows if not r.plan.correct]
    print(
        "\nBroken plans against every class's defaults (rel_l2 / cosine; which classes reject):\n"
    )
    print("| model | plan | rel_l2 | cosine | rejected by |")
    print("|---|---|---|---|---|")
    for r in broken:
        model, x = build(r.model, SEEDS[0])
        with torch.inference_mode():
            ref, out = model(x), r.plan.run(model, x)
        rejected = [
            p.value
            for p in (
                Precision.FP32,
                Precision.FP16,
                Precision.BF16,
                Precision.INT8,
                Precision.FP8,
                Precision.INT4,
            )
            if not validate_outputs(
                out, ref, precision=p, policy=QualityPolicy(), case_name="x"
            ).passed
        ]
        print(
            f"| {r.model} | {r.plan.name} | {r.rel_l2:.2e} | {r.cosine:.6f} | {', '.join(rejected) or 'none'} |"
        )
    wrong = [r for r in rows if r.passed != r.plan.correct]
    print()
    for r in wrong:
        print(f"MISJUDGED at its own class: {r.model} / {r.plan.name} ({r.plan.precision.value})")
    print(
        "all correct plans pass and all broken plans fail at their class's defaults"
        if not wrong
        else f"{len(wrong)} plan(s) misjudged"
    )
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
