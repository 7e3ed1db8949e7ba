"""FX and TorchInductor plans vs eager fp32: steady-state ratio, first-call cost, break-even.

    python benchmarks/fx_inductor_plans.py                    # demo conv net + encoder block
    python benchmarks/fx_inductor_plans.py --rounds 30 --max-autotune

Per model, every plan is built through its dlopt provider (setup time), then each case's
first call is timed (lazy compile), then steady state is measured in interleaved rounds:
in every round each plan runs each case as a burst (untimed calls for ~30 ms to settle,
then timed calls), plans in a fresh random order. The speedup is the median over rounds
of the per-round ratio eager/plan (traffic-weighted over cases), so drift common to a
round cancels. Break-even = extra first-call time over eager / per-call saving.

Inductor's on-disk caches point at a fresh temporary directory, so first calls are cold
compiles (what a first deployment pays). Not part of the test suite; figures are
recorded in docs/providers/fx.md.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="dlopt-bench-inductor-"))

import torch
from torch import nn

from dlopt.providers.contract import ProviderContext
from dlopt.workload import WorkloadCase, WorkloadProfile
from dlopt_fx.providers import FxProvider, InductorProvider

SETTLE_S = 0.03
TIMED_CALLS = 5


class EncoderBlock(nn.Module):
    """A pre-norm transformer encoder block (SDPA attention, GELU MLP, dropout)."""

    def __init__(self, dim: int = 128, heads: int = 4, mlp: int = 512) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(0.1)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp), nn.GELU(), nn.Dropout(0.1), nn.Linear(mlp, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        attn = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        )
        x = x + self.drop(self.proj(attn.transpose(1, 2).reshape(b, t, d)))
        return x + self.mlp(self.norm2(x))


def _models() -> list[tuple[str, nn.Module, WorkloadProfile]]:
    try:
        from dlopt.demo import build_demo_model, demo_workload

        demo = ("demo convnet", build_demo_model(), demo_workload())
    except ImportError:  # older core without the demo module
        raise SystemExit("needs dlopt.demo (dlopt-core >= 0.1 with the demo model)") from None
    gen = torch.Generator().manual_seed(2)
    encoder_workload = WorkloadProfile(
        name="encoder",
        cases=(
            WorkloadCase("batch-1", args=(torch.randn(1, 64, 128, generator=gen),), weight=70),
            WorkloadCase("batch-8", args=(torch.randn(8, 64, 128, generator=gen),), weight=30),
        ),
    )
    torch.manual_seed(0)
    return [demo, ("encoder block", EncoderBlock().eval(), encoder_workload)]


def _burst(fn: Callable[..., Any], case: WorkloadCase) -> float:
    """Settle the plan on this case, then return the median of a few timed calls (s)."""
    end = time.perf_counter() + SETTLE_S
    while time.perf_counter() < end:
        fn(*case.args, **case.kwargs)
    samples = []
    for _ in range(TIMED_CALLS):
        start = time.perf_counter()
        fn(*case.args, **case.kwargs)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run_model(
    title: str, model: nn.Module, workload: WorkloadProfile, plans: list[Any], rounds: int
) -> None:
    weights = workload.weights
    runners: dict[str, Callable[..., Any]] = {"eager_fp32": model}
    setup: dict[str, float] = {"eager_fp32": 0.0}
    first: dict[str, list[float]] = {}
    rejected: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as artifacts:
        context = ProviderContext(workload=workload, artifact_dir=artifacts)
        for provider in plans:
            availability = provider.probe(context)
            if not availability.available:
                rejected[provider.name] = f"unavailable: {availability.reason}"
                continue
            start = time.perf_counter()
            try:
                plan = provider.build(model, context)
            except Exception as exc:
                rejected[provider.name] = f"build failed: {exc}"
                continue
            setup[provider.name] = time.perf_counter() - start
            runners[provider.name] = plan
        with torch.inference_mode():
            for name, fn in runners.items():
                times = []
                for case in workload.cases:
                    start = time.perf_counter()
                    out = fn(*case.args, **case.kwargs)
                    times.append(time.perf_counter() - start)
                    ref = model(*case.args, **case.kwargs)
                    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
                first[name] = times
            per_round: dict[str, list[list[float]]] = {name: [] for name in runners}
            order = list(runners)
            for _ in range(rounds):
                random.shuffle(order)
                latencies: dict[str, list[float]] = {
                    name: [0.0] * len(workload.cases) for name in runners
                }
                for name in order:
                    for index, case in enumerate(workload.cases):
                        latencies[name][index] = _burst(runners[name], case)
                for name in runners:
                    per_round[name].append(latencies[name])
    eager_rounds = per_round["eager_fp32"]
    eager_steady = [
        statistics.median(r[i] for r in eager_rounds) for i in range(len(workload.cases))
    ]
    eager_weighted = sum(w * t for w, t in zip(weights, eager_steady))
    print(f"\n## {title} (cases: {', '.join(c.name for c in workload.cases)}; traffic {weights})")
    header = f"{'plan':<22}{'setup s':>9}{'1st calls s':>13}{'steady ms':>11}{'speedup':>9}{'IQR':>13}{'break-even calls':>18}"
    print(header)
    for name in runners:
        rounds_ = per_round[name]
        steady = [statistics.median(r[i] for r in rounds_) for i in range(len(workload.cases))]
        weighted = sum(w * t for w, t in zip(weights, steady))
        ratios = sorted(
            sum(w * e for w, e in zip(weights, er)) / sum(w * p for w, p in zip(weights, pr))
            for er, pr in zip(eager_rounds, rounds_)
        )
        q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
        extra = sum(first[name]) - sum(eager_steady) + setup[name]
        saving = eager_weighted - weighted
        if name == "eager_fp32":
            even = "-"
        elif saving <= 0:
            even = "never"
        else:
            even = f"{math.ceil(max(extra, 0.0) / saving):,}"
        print(
            f"{name:<22}{setup[name]:>9.2f}{sum(first[name]):>13.2f}{weighted * 1e3:>11.3f}"
            f"{statistics.median(ratios):>9.2f}{f'{q1:.2f}-{q3:.2f}':>13}{even:>18}"
        )
        if name != "eager_fp32":
            per_case = ", ".join(f"{c.name} {t:.2f}s" for c, t in zip(workload.cases, first[name]))
            print(f"{'':<22}first calls: {per_case}")
    for name, why in rejected.items():
        print(f"{name:<22}{why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--max-autotune", action="store_true", help="also race inductor_max_autotune (slow compile)"
    )
    args = parser.parse_args()
    plans: list[Any] = [
        FxProvider(),
        InductorProvider("fx_inductor", graph="fx"),
        InductorProvider("inductor"),
        InductorProvider("inductor_freezing", freezing=True),
    ]
    if args.max_autotune:
        plans.append(InductorProvider("inductor_max_autotune", max_autotune=True))
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
        f"{os.cpu_count()} CPUs; Inductor cache: {os.environ['TORCHINDUCTOR_CACHE_DIR']}"
    )
    for title, model, workload in _models():
        run_model(title, model, workload, plans, args.rounds)


if __name__ == "__main__":
    main()
