"""The latency and throughput objectives: the (plan, batch size) dlopt picks against an exhaustive measurement.

    python benchmarks/objectives.py                 # MLP and demo conv net (a quiet machine)
    python benchmarks/objectives.py --models mlp --plans onnxruntime_cpu
    python benchmarks/objectives.py --quick         # a smoke run of a few seconds

Per model, one request (batch 1) is served at every batch size of ``--batch-sizes``. Each
strategy is a selection as a user would run it (``InferenceOptimizer.select`` with the
default measurement policy, its early stops included): ``min_latency``,
``max_throughput``, and ``max_throughput`` under a mean-latency budget and under a
p99-latency budget. Its pick is scored against an exhaustive measurement of every
(plan, batch size) pair in the same run: a long race of fixed length, no early stop and
no plan dropped, run once before the selections and once after them (the two averaged,
so drift over the run does not favour either end). The budgets are set from the first
exhaustive pass, between the pairs' latencies, so that each budget cuts the curves.

Printed per model and strategy: the pick, the exhaustive best (under the same budget: the
fastest pair the exhaustive measurement's own upper confidence bound keeps within it, the
test a selection applies, with the best by point estimates named where it differs),
the regret of the pick (throughput: ``1 - items/s of the pick / items/s of the best``;
min-latency: ``latency of the pick / best latency - 1``, both from the exhaustive
measurement), whether the pick meets the budget by the exhaustive figures, and the time
to decision (wall clock of ``select``: builds, validation, race). The CPU ISA, thread
count and load average frame every figure (recorded in docs/design/throughput-objectives.md).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import torch
from _common import Mlp, load_average, measurement_policy, print_environment
from attrs import frozen

import dlopt
from dlopt.measurement import MeasurementPolicy
from dlopt.platform.machine import cpu_info
from dlopt.settings.policy import DeploymentConstraints, OptimizationPolicy
from dlopt.settings.workload import WorkloadProfile

EAGER = "eager_fp32"


def mlp() -> tuple[str, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    sample = torch.randn(1, 512, generator=torch.Generator().manual_seed(1))
    return "MLP 512-2048-512", Mlp().eval(), sample


def demo() -> tuple[str, torch.nn.Module, torch.Tensor]:
    from dlopt.cli.demo import build_demo_model

    sample = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    return "demo conv net", build_demo_model(), sample


MODELS = {"mlp": mlp, "demo": demo}


@frozen
class Pair:
    """One (plan, batch size) from the exhaustive measurement."""

    plan: str
    batch_size: int
    mean_ms: float
    p99_ms: float
    #: Upper confidence bounds of the mean and the p99, at the race's confidence split
    #: over the batch sizes as a selection splits it (``None``: too few samples).
    mean_high_ms: float | None
    p99_high_ms: float | None

    @property
    def items_per_s(self) -> float:
        return self.batch_size * 1e3 / self.mean_ms

    @property
    def label(self) -> str:
        return f"{self.plan}@{self.batch_size}"


@frozen
class Strategy:
    name: str
    objective: str
    #: ``"mean"`` or ``"p99"``: which budget applies (``None``: none).
    budget: str | None = None


STRATEGIES = (
    Strategy("min-latency", "min_latency"),
    Strategy("max-throughput", "max_throughput"),
    Strategy("max-throughput, mean budget", "max_throughput", "mean"),
    Strategy("max-throughput, p99 budget", "max_throughput", "p99"),
)


def select(
    model: torch.nn.Module,
    workload: WorkloadProfile,
    plans: Sequence[str],
    objective: str,
    constraints: DeploymentConstraints,
    measurement: MeasurementPolicy,
) -> tuple[Any, float]:
    """One selection through dlopt's pipeline: ``(report, seconds to decision)``."""
    policy = OptimizationPolicy(
        objective=objective,
        include=(EAGER, *plans),
        constraints=constraints,
        measurement=measurement,
    )
    with tempfile.TemporaryDirectory(prefix="dlopt-bench-") as tmp:
        optimizer = dlopt.InferenceOptimizer("cpu", policy, artifact_dir=tmp)
        started = time.monotonic()
        decision = optimizer.select(model, workload)
        seconds = time.monotonic() - started
        report = decision.report
        decision.close()
    return report, seconds


def exhaustive(
    model: torch.nn.Module,
    workload: WorkloadProfile,
    plans: Sequence[str],
    measurement: MeasurementPolicy,
) -> dict[tuple[str, int], Pair]:
    """Every (plan, batch size) of ``workload`` raced for the policy's fixed rounds."""
    report, _ = select(
        model, workload, plans, "max_throughput", DeploymentConstraints(), measurement
    )
    assert report.throughput is not None
    return {
        (p.plan, p.batch_size): Pair(
            p.plan, p.batch_size, p.latency_ms, p.p99_ms, p.latency_high_ms, p.p99_high_ms
        )
        for p in report.throughput.points
        if p.latency_ms is not None and p.p99_ms is not None
    }


def averaged(
    before: dict[tuple[str, int], Pair], after: dict[tuple[str, int], Pair]
) -> dict[tuple[str, int], Pair]:
    """The two exhaustive passes averaged pair by pair (pairs in both only); a pair's
    upper bounds are the larger of its two passes' (it is admissible when both passes
    confirm it)."""

    def higher(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else max(a, b)

    return {
        key: Pair(
            a.plan,
            a.batch_size,
            (a.mean_ms + after[key].mean_ms) / 2,
            (a.p99_ms + after[key].p99_ms) / 2,
            higher(a.mean_high_ms, after[key].mean_high_ms),
            higher(a.p99_high_ms, after[key].p99_high_ms),
        )
        for key, a in before.items()
        if key in after
    }


def budgets(pairs: dict[tuple[str, int], Pair], quantile: float) -> tuple[float, float]:
    """A mean and a p99 budget at ``quantile`` of the pairs' mean and p99 latencies."""

    def at(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]

    return (
        at([p.mean_ms for p in pairs.values()]),
        at([p.p99_ms for p in pairs.values()]),
    )


def within(
    pair: Pair, strategy: Strategy, limits: tuple[float, float], *, bound: bool = False
) -> bool:
    """Whether ``pair`` meets the strategy's budget by the exhaustive point estimate, or
    (``bound``) by the exhaustive measurement's own upper confidence bound, the test a
    selection applies."""
    if strategy.budget is None:
        return True
    if strategy.budget == "mean":
        figure, high, limit = pair.mean_ms, pair.mean_high_ms, limits[0]
    else:
        figure, high, limit = pair.p99_ms, pair.p99_high_ms, limits[1]
    if bound:
        return high is not None and high <= limit
    return figure <= limit


def score(
    strategy: Strategy,
    pick: tuple[str, int],
    pairs: dict[tuple[str, int], Pair],
    limits: tuple[float, float],
) -> tuple[str, str, str, str]:
    """``(best, regret, budget verdict, note)`` of ``pick`` by the exhaustive measurement.

    Under a budget the best is the fastest pair the exhaustive measurement *confirms*
    within it (its own upper bound, from 10x a selection's samples, at a selection's
    confidence): a pair whose point estimate sits inside the budget by less than its
    estimate's uncertainty cannot be admitted by any sound check, and the drift between
    the two passes is larger than such margins. ``note`` names the best by point
    estimates and the regret against it where that pair differs."""
    chosen = pairs.get(pick)
    if chosen is None:
        return "-", "not measured", "-", ""
    if strategy.objective == "min_latency":
        best = min((p for p in pairs.values() if p.batch_size == 1), key=lambda p: p.mean_ms)
        return best.label, f"{chosen.mean_ms / best.mean_ms - 1:+.1%} latency", "-", ""
    verdict = (
        "-"
        if strategy.budget is None
        else ("meets" if within(chosen, strategy, limits) else "OVER")
    )
    confirmed = [p for p in pairs.values() if within(p, strategy, limits, bound=True)]
    by_point = [p for p in pairs.values() if within(p, strategy, limits)]
    if not by_point:
        return "none meets it", "n/a", verdict, ""
    point_best = max(by_point, key=lambda p: p.items_per_s)
    if not confirmed:
        # A p99 bound from the exhaustive passes can sit at their slowest calls: then
        # only point estimates judge the pick, and the row says so.
        regret = f"{1 - chosen.items_per_s / point_best.items_per_s:.1%} (point)"
        return (
            f"{point_best.label} (point)",
            regret,
            verdict,
            (
                "the exhaustive measurement confirms no pair within the budget (its upper "
                "bounds lie above it); the best and the regret are by point estimates"
            ),
        )
    best = max(confirmed, key=lambda p: p.items_per_s)
    note = ""
    if point_best is not best:
        figure = point_best.p99_ms if strategy.budget == "p99" else point_best.mean_ms
        high = point_best.p99_high_ms if strategy.budget == "p99" else point_best.mean_high_ms
        note = (
            f"by point estimates the best is {point_best.label} ({strategy.budget} "
            f"{figure:.3f} ms, its exhaustive upper bound "
            f"{'none' if high is None else f'{high:.3f} ms'}): regret "
            f"{1 - chosen.items_per_s / point_best.items_per_s:.1%} against it"
        )
    return best.label, f"{1 - chosen.items_per_s / best.items_per_s:.1%}", verdict, note


def print_pairs(pairs: dict[tuple[str, int], Pair]) -> None:
    plans = sorted({p.plan for p in pairs.values()}, key=lambda n: (n != EAGER, n))
    sizes = sorted({p.batch_size for p in pairs.values()})
    print(
        "exhaustive items/s (mean ms, p99 ms <= its upper bound), the two passes averaged "
        "(bounds: the larger pass's):"
    )

    def bound(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for plan in plans:
        cells = [
            f"b{b} {pair.items_per_s:,.0f} ({pair.mean_ms:.3f}, {pair.p99_ms:.3f} <= "
            f"{bound(pair.p99_high_ms)})"
            for b in sizes
            if (pair := pairs.get((plan, b))) is not None
        ]
        print(f"  {plan:<22}" + "; ".join(cells))


def run_model(key: str, args: argparse.Namespace, plans: Sequence[str]) -> None:
    title, model, sample = MODELS[key]()
    workload = WorkloadProfile.batched(sample, batch_sizes=args.batch_sizes, name=key)
    long = measurement_policy(
        args.rounds,
        args.max_time,
        args.seed,
        args.settle,
        timed_calls_per_burst=args.timed_calls,
    )
    print(f"\n## {title}: batch sizes {', '.join(map(str, args.batch_sizes))}")
    before = exhaustive(model, workload, plans, long)
    limits = budgets(before, args.budget_quantile)
    print(
        f"budgets (the {args.budget_quantile:.0%} point of the first exhaustive pass): "
        f"mean {limits[0]:.3f} ms, p99 {limits[1]:.3f} ms per call"
    )
    user = MeasurementPolicy(seed=args.seed, max_time_s=args.select_time)
    results = []
    for strategy in STRATEGIES:
        constraints = DeploymentConstraints(
            max_latency_ms=limits[0] if strategy.budget == "mean" else None,
            max_p99_latency_ms=limits[1] if strategy.budget == "p99" else None,
        )
        report, seconds = select(model, workload, plans, strategy.objective, constraints, user)
        results.append((strategy, (report.selected_plan, report.batch_size or 1), seconds, report))
    after = exhaustive(model, workload, plans, long)
    pairs = averaged(before, after)
    print_pairs(pairs)
    header = (
        f"{'strategy':<30}{'pick':<24}{'exhaustive best':<24}{'regret':>16}{'budget':>8}"
        f"{'decision s':>12}"
    )
    print(header)
    print("-" * len(header))
    for strategy, pick, seconds, report in results:
        best, regret, verdict, note = score(strategy, pick, pairs, limits)
        label = f"{pick[0]}@{pick[1]}"
        print(f"{strategy.name:<30}{label:<24}{best:<24}{regret:>16}{verdict:>8}{seconds:>12.1f}")
        if note:
            print(f"{'':<30}{note}")
        if report.throughput is not None and not report.throughput.budget_met:
            print(f"{'':<30}{report.selection_reason}")
    drift = [abs(after[k].mean_ms / before[k].mean_ms - 1) for k in before if k in after]
    if drift:
        print(
            f"drift between the exhaustive passes: up to {max(drift):.1%} "
            f"(median {sorted(drift)[len(drift) // 2]:.1%}) in mean latency"
        )
    print(f"load average after: {load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["mlp", "demo"])
    parser.add_argument(
        "--plans",
        nargs="*",
        default=None,
        help="challengers raced beside eager_fp32 (default: onnxruntime_cpu; --quick: none)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=lambda text: tuple(int(v) for v in text.split(",")),
        default=None,
        help="comma-separated (default 1,2,4,8,16,32; --quick: 1,4)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds of each exhaustive pass")
    parser.add_argument("--max-time", type=float, default=600.0, help="exhaustive pass cap (s)")
    parser.add_argument(
        "--select-time",
        type=float,
        default=None,
        help="each selection's measurement budget (default: dlopt's, scaled to the model)",
    )
    parser.add_argument("--settle", type=float, default=None, help="settling per burst (s)")
    parser.add_argument("--timed-calls", type=int, default=10, help="timed calls per burst")
    parser.add_argument("--budget-quantile", type=float, default=0.4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny and fast")
    args = parser.parse_args()
    if not 0 < args.budget_quantile < 1:
        parser.error("--budget-quantile must be between 0 and 1, e.g. 0.4")
    quick = args.quick
    if args.batch_sizes is None:
        args.batch_sizes = (1, 4) if quick else (1, 2, 4, 8, 16, 32)
    if args.rounds is None:
        args.rounds = 4 if quick else 60
    if args.settle is None:
        args.settle = 0.005 if quick else 0.2
    if args.select_time is None and quick:
        args.select_time = 1.0
    if quick:
        args.timed_calls = 4
    plans = args.plans if args.plans is not None else ([] if quick else ["onnxruntime_cpu"])
    info = cpu_info()
    isa = ", ".join(info.isa_flags) or "unknown"
    print_environment(
        f"CPU {info.model}: ISA {isa}; torch kernels {info.torch_cpu_capability or '?'}; "
        f"plans: {', '.join([EAGER, *plans])}"
        + ("; QUICK smoke run: figures meaningless" if quick else "")
    )
    for key in args.models:
        run_model(key, args, plans)
    if quick:
        print("\n(--quick: a smoke run of the benchmark's code path; do not record its figures)")


if __name__ == "__main__":
    main()
