"""Measurement kernel vs the fixed peer protocol: time to a decision, rounds, errors.

    python benchmarks/measurement_kernel.py                 # simulated machine (about 2 min)
    python benchmarks/measurement_kernel.py --real          # also small real CPU models
    python benchmarks/measurement_kernel.py --races 100 --real --real-repeats 3
    (run it with nothing else loading the machine: timing figures are only as quiet as it)

Fixed protocol: per plan, back to back, 5 warm-up + 20 iterations x 3 repeats per case
(F; F3 with 60 iterations, for error rates closer to the kernel's),
each plan's mean with a marginal 95% t-interval; "faster" when baseline low / challenger
high >= min_speedup; the pick is the best point among those. Kernel: ``run_race`` with the
default ``MeasurementPolicy``; the pick is what ``dlopt.selection.rules.choose`` serves from it.
Regret: the pick's true speedup is more than 2% below the best plan's. Real models have
no known truth: a long interleaved reference run (40 rounds of 10 calls per plan, median
of per-round medians) stands for it. Figures are recorded in docs/design/measurement-kernel.md.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

from attrs import evolve

from dlopt.measurement import MeasurementPolicy, RaceResult, run_race
from dlopt.platform.machine import cpu_flags
from dlopt.selection.rules import Costs, choose
from dlopt.testing.back_to_back import BackToBackResult, back_to_back_protocol
from dlopt.testing.simulation import NoiseModel, run_simulated_fixed, run_simulated_race

MIN_SPEEDUP = 1.02
REGRET = 1.02
L = 1e-3
DEMO = (1.91, 1.88, 1.75, 1.60, 1.23, 1.10, 1.05, 1.02, 1.0, 0.98, 0.9, 0.8, 0.7, 0.6, 0.5, 1.5)
TURN = NoiseModel(turn_jitter=0.106)
CONTENTION = NoiseModel(preempt_probability=0.3, preempt_delay=0.8)


def served(result: RaceResult) -> str:
    """The plan ``dlopt.selection.rules.choose`` serves from a race (steady state)."""
    eligible = [
        Costs(c.name, 0.0, 0.0, c.weighted_mean_ms)
        for c in result.candidates
        if c.weighted_mean_ms is not None
    ]
    base = result.baseline
    return choose(
        objective="steady_state_latency",
        min_speedup=result.min_speedup,
        expected_calls=None,
        eligible=eligible,
        steady_speedup=lambda n, m: (
            result.candidate(n).speedup_vs_baseline if m == base else result.paired_speedup(n, m)
        ),
        confidence=result.confidence,
        reference=base,
        indifference_zone=result.policy.indifference_zone,
    ).selected


def fixed_pick(result: BackToBackResult, baseline: str) -> str:
    winners = [n for n, v in result.verdict.items() if v == "faster"]
    return max(winners, key=lambda n: result.speedup[n]) if winners else baseline


def regret(pick: str, truth: Mapping[str, float]) -> bool:
    return truth[pick] < max(truth.values()) / REGRET


def error_rate(picks: Sequence[str], truth: Mapping[str, float]) -> float:
    """False switches when every plan is as fast as the baseline, else the regret rate."""
    if max(truth.values()) == 1.0:
        return sum(p != "base" for p in picks) / len(picks)
    return sum(regret(p, truth) for p in picks) / len(picks)


def row(cols: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


HEADER = [
    "scenario",
    "K rounds",
    "K calls",
    "F calls",
    "K s",
    "F s",
    "F/K",
    "F3/K",
    "K err",
    "F err",
    "F3 err",
]
WIDTHS = [40, 9, 7, 7, 6, 6, 5, 5, 6, 6, 6]


def simulated(races: int) -> None:
    policy = MeasurementPolicy(bootstrap_resamples=0, record_page_faults=False)
    demo = {"base": [2e-3, 8e-3]} | {f"c{i}": [2e-3 / s, 8e-3 / s] for i, s in enumerate(DEMO)}
    heavy = (3.0, 1.3, 1.1, 1.0, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 1.05)
    five = {"base": [5e-3], "ch": [5e-3 / 1.1]}
    scenarios: list[tuple[str, dict, NoiseModel | None, list[float] | None, int]] = [
        ("A vs A, 2 challengers", {"base": [L], "a": [L], "b": [L]}, None, None, races),
        (
            "A vs A, 2 challengers [contention]",
            {"base": [L], "a": [L], "b": [L]},
            CONTENTION,
            None,
            races,
        ),
        ("10% faster, 5 ms calls", five, None, None, races),
        ("10% faster, 5 ms calls [turn 0.15]", five, TURN, None, races),
        ("10% faster, 5 ms calls [contention]", five, CONTENTION, None, races),
        ("demo-like, 16 challengers, 2 cases", demo, None, [0.7, 0.3], max(races // 5, 20)),
        ("demo-like [turn 0.15]", demo, TURN, [0.7, 0.3], max(races // 5, 20)),
        ("demo-like [contention]", demo, CONTENTION, [0.7, 0.3], max(races // 5, 20)),
        (
            "heavy: 70 ms calls, 12 plans",
            {"base": [0.07]} | {f"c{i}": [0.07 / s] for i, s in enumerate(heavy)},
            None,
            None,
            max(races // 20, 5),
        ),
    ]
    print("\nSimulated machine (fake clock: exact). K = kernel, F = fixed protocol; calls = timed")
    print("calls, s = simulated seconds to a decision (warm-up and settling included), medians;")
    print("err = false switches for A vs A, else the share of races whose pick has regret > 2%;")
    print("F3 = the fixed protocol with 3x the iterations (5 + 60 x 3), for error rates near K's.")
    print("Noise: NoiseModel() defaults; [turn 0.15] adds turn-to-turn variation (a per-round")
    print("paired spread of 0.15); [contention] bimodal preemption (30% of calls + Exp(0.8)).")
    print(row(HEADER, WIDTHS))
    for name, lat, noise, weights, n in scenarios:
        truth = {k: lat["base"][0] / v[0] for k, v in lat.items()}
        # The same machine and question for the kernel and the fixed protocol.
        same = {"baseline": "base", "min_speedup": MIN_SPEEDUP, "noise": noise, "weights": weights}
        ks = [run_simulated_race(lat, policy=policy, seed=s, **same) for s in range(n)]
        fs, f3s = (
            [run_simulated_fixed(lat, seed=s, iterations=iterations, **same) for s in range(n)]
            for iterations in (20, 60)
        )
        k_err = error_rate([served(r) for r in ks], truth)
        f_err = error_rate([fixed_pick(f, "base") for f in fs], truth)
        f3_err = error_rate([fixed_pick(f, "base") for f in f3s], truth)
        k_s = statistics.median(r.total_time_s for r in ks)
        f_s = statistics.median(f.total_time_s for f in fs)
        f3_s = statistics.median(f.total_time_s for f in f3s)
        rounds = sorted(r.rounds for r in ks)
        print(
            row(
                [
                    name,
                    f"{statistics.median(rounds):.0f}/{rounds[int(0.9 * (len(rounds) - 1))]}",
                    f"{statistics.median(r.timed_calls for r in ks):.0f}",
                    f"{statistics.median(f.timed_calls for f in fs):.0f}",
                    f"{k_s:.2f}",
                    f"{f_s:.2f}",
                    f"{f_s / k_s:.1f}x",
                    f"{f3_s / k_s:.1f}x",
                    f"{k_err:.1%}",
                    f"{f_err:.1%}",
                    f"{f3_err:.1%}",
                ],
                WIDTHS,
            )
        )
    print("K rounds: median/p90.")


# -- real CPU models ----------------------------------------------------------------------
def _plans(threads: int) -> list[tuple[str, dict[str, Callable[[], object]]]]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    conv = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, stride=2),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).eval()
    mlp = nn.Sequential(
        nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 512)
    ).eval()
    x_conv = torch.randn(8, 3, 64, 64)
    x_mlp = torch.randn(64, 512)

    def bind(model, x, autocast=False) -> Callable[[], object]:  # type: ignore[no-untyped-def]
        """One zero-argument call of ``model`` on ``x`` (under bf16 autocast if asked)."""

        def call() -> object:
            with torch.inference_mode():
                if autocast:
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        return model(x)
                return model(x)

        return call

    with torch.inference_mode():
        conv_jit = torch.jit.freeze(torch.jit.trace(copy.deepcopy(conv), x_conv))
        mlp_jit = torch.jit.freeze(torch.jit.trace(copy.deepcopy(mlp), x_mlp))
    conv_cl = copy.deepcopy(conv).to(memory_format=torch.channels_last)
    x_cl = x_conv.contiguous(memory_format=torch.channels_last)
    flags = cpu_flags() or frozenset()
    conv_plans = {
        "base": bind(conv, x_conv),
        "eager_copy": bind(copy.deepcopy(conv), x_conv),
        "channels_last": bind(conv_cl, x_cl),
        "jit_freeze": bind(conv_jit, x_conv),
    }
    mlp_plans = {
        "base": bind(mlp, x_mlp),
        "eager_copy": bind(copy.deepcopy(mlp), x_mlp),
        "jit_freeze": bind(mlp_jit, x_mlp),
    }
    sets = [("conv b8 64x64 fp32", conv_plans), ("mlp b64 fp32", mlp_plans)]
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        # A clear winner on CPUs with native bf16 (the fp32 sets are the close contests).
        sets.append(
            ("conv b8 64x64 +bf16", conv_plans | {"bf16_autocast": bind(conv_cl, x_cl, True)})
        )
        sets.append(("mlp b64 +bf16", mlp_plans | {"bf16_autocast": bind(mlp, x_mlp, True)}))
    return sets


def reference_speedups(plans: Mapping[str, Callable[[], object]], rounds: int = 40) -> dict:
    """A long interleaved run: per round every plan (shuffled) runs 3 untimed + 10 timed
    calls; a plan's latency is the median over rounds of its per-round median."""
    rng = random.Random(0)
    per: dict[str, list[float]] = {n: [] for n in plans}
    names = list(plans)
    for _ in range(rounds):
        rng.shuffle(names)
        for n in names:
            fn = plans[n]
            for _ in range(3):
                fn()
            times = []
            for _ in range(10):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            per[n].append(statistics.median(times))
    med = {n: statistics.median(v) for n, v in per.items()}
    return {n: med["base"] / med[n] for n in plans}


def real(repeats: int, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    flags = cpu_flags() or frozenset()
    isa = "AVX512-BF16" if "avx512_bf16" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    print(f"\nReal CPU models: torch {torch.__version__}, {threads} thread(s), ISA {isa};")
    print(f"{repeats} decisions per set and protocol, K and F alternating; wall seconds.")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    widths = [22, 8, 6, 6, 6, 5, 5, 24, 24, 5, 5, 6]
    header = ["set", "K rounds", "K s", "F s", "F3 s", "F/K", "F3/K", "K picks", "F picks"]
    print(row([*header, "K err", "F err", "F3 err"], widths))
    policy = MeasurementPolicy()
    for name, plans in _plans(threads):
        for fn in plans.values():
            for _ in range(3):
                fn()  # first calls (lazy init) outside both protocols
        truth = reference_speedups(plans)
        ks: list[RaceResult] = []
        k_wall, f_wall, f3_wall, k_picks, f_picks, f3_picks = [], [], [], [], [], []
        for r in range(repeats):
            t0 = time.perf_counter()
            result = run_race(
                {n: [fn] for n, fn in plans.items()},
                [1.0],
                "base",
                MIN_SPEEDUP,
                evolve(policy, seed=r),
            )
            k_wall.append(time.perf_counter() - t0)
            ks.append(result)
            k_picks.append(served(result))
            t0 = time.perf_counter()
            fixed = back_to_back_protocol(
                {n: [fn] for n, fn in plans.items()}, [1.0], "base", MIN_SPEEDUP
            )
            f_wall.append(time.perf_counter() - t0)
            f_picks.append(fixed_pick(fixed, "base"))
            t0 = time.perf_counter()
            fixed3 = back_to_back_protocol(
                {n: [fn] for n, fn in plans.items()}, [1.0], "base", MIN_SPEEDUP, iterations=60
            )
            f3_wall.append(time.perf_counter() - t0)
            f3_picks.append(fixed_pick(fixed3, "base"))

        def tally(picks: list[str]) -> str:
            return ",".join(f"{p}:{picks.count(p)}" for p in sorted(set(picks)))

        k_s, f_s, f3_s = (statistics.median(w) for w in (k_wall, f_wall, f3_wall))
        print(
            row(
                [
                    name,
                    f"{statistics.median(r.rounds for r in ks):.0f}",
                    f"{k_s:.2f}",
                    f"{f_s:.2f}",
                    f"{f3_s:.2f}",
                    f"{f_s / k_s:.1f}x",
                    f"{f3_s / k_s:.1f}x",
                    tally(k_picks),
                    tally(f_picks),
                    f"{sum(regret(p, truth) for p in k_picks) / repeats:.0%}",
                    f"{sum(regret(p, truth) for p in f_picks) / repeats:.0%}",
                    f"{sum(regret(p, truth) for p in f3_picks) / repeats:.0%}",
                ],
                widths,
            )
        )
        print("  reference speedups: " + ", ".join(f"{n} {s:.3f}" for n, s in truth.items()))
        last = ks[-1]
        alloc = last.allocator
        print(
            f"  last race: stop {last.stop_reason}, budget {last.budget_s:.0f} s, leader "
            f"{last.leader}, regret bound {last.regret_bound}, allocator "
            f"{'settled' if alloc and alloc.settled else 'as is'}"
        )
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--races", type=int, default=200, help="simulated races per scenario")
    parser.add_argument("--real", action="store_true", help="also time small real CPU models")
    parser.add_argument("--real-repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    simulated(args.races)
    if args.real:
        real(args.real_repeats, args.threads)


if __name__ == "__main__":
    main()
