"""Shared pieces of the provider benchmarks: models, workloads, one race, one table.

Every benchmark measures through dlopt's own pipeline (``InferenceOptimizer``): build
(setup time), first call of every case (lazy compilation), validation against eager fp32,
then the measurement kernel's race — interleaved rounds of settled bursts, each plan
paired with eager fp32 round by round. The figures printed are the report's: the speedup
vs eager is a ratio measured side by side in one run, with its interval.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

import dlopt
from dlopt.evidence.report import CandidateEvidence, OptimizationReport
from dlopt.measurement import MeasurementPolicy
from dlopt.platform.machine import cpu_model_and_flags
from dlopt.settings.policy import DeploymentConstraints, OptimizationPolicy
from dlopt.settings.workload import WorkloadCase, WorkloadProfile

EAGER = "eager_fp32"
REPO = Path(__file__).resolve().parent.parent


# -- models -------------------------------------------------------------------------------
class Mlp(nn.Module):
    """Linear 512 -> 2048, GELU, Linear 2048 -> 512."""

    def __init__(self, dim: int = 512, hidden: int = 2048) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderBlock(nn.Module):
    """A pre-norm transformer encoder block: SDPA self-attention and a GELU MLP, dropout.

    Written out (not ``nn.TransformerEncoderLayer``, whose eval fast path is one fused op)
    so that FX can trace it and ONNX export sees ordinary ops.
    """

    def __init__(self, dim: int = 256, heads: int = 4, mlp: int = 1024) -> None:
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


def demo_model() -> tuple[str, nn.Module, WorkloadProfile]:
    """dlopt's demo conv net with its workload (batch 1 at 70 %, batch 8 at 30 %)."""
    from dlopt.cli.demo import build_demo_model, demo_workload

    return "demo conv net", build_demo_model(), demo_workload()


def _batch_1_and_n(name: str, n: int, shape: tuple[int, ...], seed: int) -> WorkloadProfile:
    """Random inputs of ``shape`` at batch 1 (70 % of calls) and batch ``n`` (30 %)."""
    gen = torch.Generator().manual_seed(seed)
    return WorkloadProfile(
        name=name,
        cases=tuple(
            WorkloadCase(f"batch-{b}", args=(torch.randn(b, *shape, generator=gen),), weight=w)
            for b, w in ((1, 70), (n, 30))
        ),
    )


def mlp_model(seed: int = 0) -> tuple[str, nn.Module, WorkloadProfile]:
    """An MLP 512-2048-512 at batch 1 (70 %) and batch 32 (30 %)."""
    torch.manual_seed(seed)
    workload = _batch_1_and_n("mlp", 32, (512,), seed + 1)
    return "MLP 512-2048-512", Mlp().eval(), workload


def encoder_model(seed: int = 0) -> tuple[str, nn.Module, WorkloadProfile]:
    """The encoder block (d=256, 4 heads, MLP 1024) on 1x64x256 (70 %) and 8x64x256 (30 %)."""
    torch.manual_seed(seed)
    workload = _batch_1_and_n("encoder", 8, (64, 256), seed + 2)
    return "encoder block d256 seq64", EncoderBlock().eval(), workload


MODELS = {"demo": demo_model, "mlp": mlp_model, "encoder": encoder_model}


# -- the race -----------------------------------------------------------------------------
def measurement_policy(
    rounds: int = 30,
    max_time_s: float = 120.0,
    seed: int = 0,
    settle_time_s: float = 0.2,
    **overrides: Any,
) -> MeasurementPolicy:
    """A fixed number of rounds with one look, long settling: intervals for every plan.

    ``min_rounds = max_rounds = rounds``: the race cannot stop a comparison before the last
    round, so every plan gets an interval over all rounds, at the boundary of a single look
    (split over the challengers). In a selection the early stop, eliminating plans that
    trail the leader and the futility stop save time but take plans out of the rounds; a
    benchmark wants each plan's own interval over every round, so they are off unless
    overridden. ``max_time_s`` only guards against a runaway race.

    Every burst settles for the full ``settle_time_s`` (200 ms): on this 2-core machine
    eager PyTorch ran up to ~10x slower for ~100 ms after a burst of ONNX Runtime calls
    (its intra-op threads keep spinning), longer than the kernel's default 30 ms settle,
    and settling "until within 10% of the previous round" accepts a previous round that was
    itself slowed.
    """
    settings: dict[str, Any] = dict(
        min_rounds=rounds,
        max_rounds=rounds,
        max_time_s=max_time_s,
        seed=seed,
        settle_time_s=settle_time_s,
        settle_tolerance=None,
        settle_max_calls=100_000,
        drop_worse_than_leader=False,
        futility_confidence=None,
    )
    settings.update(overrides)
    return MeasurementPolicy(**settings)


def race(
    model: nn.Module,
    workload: WorkloadProfile,
    include: Sequence[str],
    *,
    measurement: MeasurementPolicy | None = None,
    min_speedup: float = 1.02,
    target: str = "cpu",
    artifact_dir: str | Path | None = None,
) -> OptimizationReport:
    """Run dlopt's pipeline on ``model`` with the plans in ``include`` plus eager fp32.

    ``min_speedup`` only sets where the race may stop a comparison (its interval then
    excludes the threshold) and the verdict; it does not change the measured ratios.
    No ``native_*`` plan is included, so the baseline is eager fp32 and the report's
    break-even counts are against eager.
    """
    policy = OptimizationPolicy(
        include=tuple(include),
        constraints=DeploymentConstraints(min_speedup=min_speedup),
        measurement=measurement if measurement is not None else measurement_policy(),
    )
    with tempfile.TemporaryDirectory(prefix="dlopt-bench-") as tmp:
        optimizer = dlopt.InferenceOptimizer(
            target, policy, artifact_dir=artifact_dir if artifact_dir is not None else tmp
        )
        decision = optimizer.select(model, workload)
        report = decision.report
        decision.close()
    return report


def plan_benchmark_arguments(doc: str, models: Sequence[str]) -> argparse.ArgumentParser:
    """The options every per-plan benchmark takes: ``--models`` (``models`` by default),
    ``--rounds``, ``--max-time``, ``--seed`` and ``--settle``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(models))
    parser.add_argument("--rounds", type=int, default=30, help="race rounds per model")
    parser.add_argument("--max-time", type=float, default=120.0, help="race time cap (s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle", type=float, default=0.2, help="untimed settling per burst (s)")
    return parser


def race_each_model(args: argparse.Namespace, plans: Sequence[str]) -> None:
    """Race ``plans`` (and eager fp32) on each of ``args.models``; print each report."""
    policy = measurement_policy(args.rounds, args.max_time, args.seed, args.settle)
    for key in args.models:
        title, model, workload = MODELS[key]()
        print_report(title, race(model, workload, plans, measurement=policy))


# -- reporting ----------------------------------------------------------------------------
def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "packages"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out + (" (packages/ modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_average() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def print_environment(extra: str = "") -> None:
    """Versions, threads, CPU and ISA, commit and load average: the context every figure
    needs."""
    model, flags = cpu_model_and_flags()
    print(
        f"dlopt {dlopt.__version__} at commit {git_commit()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} intra-op threads, {os.cpu_count()} CPUs "
        f"({model}; ISA {', '.join(flags) or 'none of interest'}); "
        f"Python {sys.version.split()[0]}"
    )
    if extra:
        print(extra)
    print(f"load average (1/5/15 min) at start: {load_average()}")


def _interval(s: Any) -> tuple[str, str]:
    if s is None or s.point is None:
        return "-", "-"
    low = f"{s.low:.2f}" if s.low is not None else "?"
    high = f"{s.high:.2f}" if s.high is not None else "?"
    return f"{s.point:.2f}x", f"{low}-{high}"


def _break_even(cand: CandidateEvidence) -> str:
    if cand.name == EAGER:
        return "-"
    if cand.break_even_calls_vs_baseline is None:
        return "never" if cand.break_even_note else "-"
    return f"{cand.break_even_calls_vs_baseline:,.0f}"


def case_mean_ratios(report: OptimizationReport, cand: CandidateEvidence) -> str:
    """Per-case ratio of eager's mean latency to the plan's, from the same race (context)."""
    eager = {c.name: c for c in report.candidate(EAGER).cases}
    parts = []
    for case in cand.cases:
        base = eager.get(case.name)
        if case.latency is None or base is None or base.latency is None:
            continue
        if not case.latency.mean_ms:
            continue
        parts.append(
            f"{case.name} {base.latency.mean_ms / case.latency.mean_ms:.2f}x "
            f"({case.latency.mean_ms:.3f} ms)"
        )
    return ", ".join(parts)


def quality(cand: CandidateEvidence) -> str:
    parity = cand.validation.first_calls
    if parity is None:
        return ""
    worst = None
    for case in parity.cases:
        for leaf in getattr(case, "leaves", ()) or ():
            rel = getattr(leaf, "rel_l2", None)
            if rel is not None and (worst is None or rel > worst):
                worst = rel
    verdict = "pass" if parity.passed else "FAIL"
    return verdict + (f" relL2<={worst:.1e}" if worst is not None else "")


def print_report(title: str, report: OptimizationReport) -> None:
    """One compact table: ratios vs eager fp32 first, ms only as context."""
    m = report.measurement
    total = sum(c.weight for c in report.workload.cases) or 1.0
    weights = ", ".join(f"{c.name} {c.weight / total:.0%}" for c in report.workload.cases)
    print(f"\n## {title}  (traffic: {weights})")
    if m is not None:
        print(
            f"race: {m.rounds} rounds, stop: {m.stop_reason}, {m.total_time_s:.1f} s, seed "
            f"{m.seed}, settle {m.policy.settle_time_s * 1e3:.0f} ms/burst, "
            f"{m.policy.timed_calls_per_burst} timed calls/burst; speedup = paired per-round "
            f"ratio eager/plan (traffic-weighted), {m.confidence:.0%} interval jointly over plans"
        )
    header = (
        f"{'plan':<24}{'speedup':>9}{'interval':>12}{'mean ms':>10}{'setup s':>9}"
        f"{'1st call s':>11}{'break-even':>12}  verdict / quality"
    )
    print(header)
    print("-" * len(header))
    for cand in report.candidates:
        if cand.status == "unavailable":
            print(f"{cand.name:<24}unavailable: {cand.availability_reason}")
            continue
        if cand.status == "rejected":
            stage = cand.error.stage if cand.error else "?"
            message = cand.error.message if cand.error else ""
            print(f"{cand.name:<24}rejected at {stage}: {message[:160]}")
            continue
        if cand.name == EAGER:
            point, interval = "1.00x", "(ref)"
        else:
            point, interval = _interval(cand.speedup_vs_eager)
        mean = f"{cand.latency_mean_ms:.3f}" if cand.latency_mean_ms is not None else "-"
        setup = f"{cand.setup_time_s:.2f}" if cand.setup_time_s is not None else "-"
        first = f"{cand.first_call_time_s:.2f}" if cand.first_call_time_s is not None else "-"
        verdict = cand.measurement_verdict or ""
        if cand.noisy:
            verdict += " (noisy)"
        print(
            f"{cand.name:<24}{point:>9}{interval:>12}{mean:>10}{setup:>9}{first:>11}"
            f"{_break_even(cand):>12}  {verdict}  {quality(cand)}"
        )
        if cand.name != EAGER:
            firsts = ", ".join(
                f"{c.name} {c.first_call_time_s:.2f}s"
                for c in cand.cases
                if c.first_call_time_s is not None
            )
            print(f"{'':<24}per case: {case_mean_ratios(report, cand)}; first calls {firsts}")
    print(f"selected: {report.selected_plan} — {report.selection_reason}")
    print(f"load average after: {load_average()}")
