"""Measurement kernel vs the fixed peer protocol: timed calls, time to a decision, errors.

    python benchmarks/measurement_kernel.py                 # simulated machine only (fast)
    python benchmarks/measurement_kernel.py --real          # also small real CPU models
    python benchmarks/measurement_kernel.py --races 300 --real --real-repeats 5
    (run it with nothing else loading the machine: timing figures are only as quiet as it)

Fixed protocol: per candidate, back to back, 5 warm-up + 20 iterations x 3 repeats per
case, each candidate's mean with a marginal 95% t-interval; "faster" when baseline low /
challenger high >= min_speedup. Kernel: ``run_race`` with the default ``MeasurementPolicy``
(confidence 0.95). Not part of the test suite; figures are recorded in docs/measurement.md.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

from attrs import evolve

from dlopt.measurement import MeasurementPolicy, fixed_protocol, run_race
from dlopt.measurement.simulation import NoiseModel, run_simulated_fixed, run_simulated_race

MIN_SPEEDUP = 1.02
L = 1e-3


def _fmt_row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


HEADER = [
    "scenario",
    "truth",
    "K calls",
    "F calls",
    "K ms",
    "F ms",
    "F/K time",
    "K switch",
    "F switch",
    "K unres",
    "K rounds p50/p90",
]
WIDTHS = [30, 8, 8, 8, 8, 8, 8, 8, 8, 8, 16]


def simulated(races: int) -> None:
    policy = MeasurementPolicy(bootstrap_resamples=0, record_page_faults=False)
    step = NoiseModel(step_at_s=0.065, step_factor=1.25)
    scenarios: list[tuple[str, dict, NoiseModel | None, bool]] = [
        ("A vs A", {"base": [L], "ch": [L]}, None, False),
        ("A vs A, slowdown at 65 ms", {"ch": [L], "base": [L]}, step, False),
        ("10% faster", {"base": [L], "ch": [L / 1.1]}, None, True),
        ("10% faster, slowdown 65 ms", {"base": [L], "ch": [L / 1.1]}, step, True),
        ("1.5x faster", {"base": [L], "ch": [L / 1.5]}, None, True),
        ("1% faster (below threshold)", {"base": [L], "ch": [L / 1.01]}, None, False),
        (
            "2 cases 0.2/0.8, 10% faster",
            {"base": [L, 4 * L], "ch": [L / 1.1, 4 * L / 1.1]},
            None,
            True,
        ),
    ]
    print(
        f"\nSimulated machine ({races} races per scenario; NoiseModel() defaults: 10% drift over 1 s,"
    )
    print("2% jitter, 1% spikes of +20%, +30% on the first call after a plan switch; 1 ms calls)")
    print("K = kernel, F = fixed protocol; calls = timed calls (median); ms = simulated time to a")
    print(
        "decision incl. warm-up and settling (median); switch = share of races declaring 'faster'"
    )
    print(_fmt_row(HEADER, WIDTHS))
    for name, lat, noise, truth in scenarios:
        weights = [0.2, 0.8] if len(lat["base"]) == 2 else None
        ks = [
            run_simulated_race(
                lat,
                baseline="base",
                min_speedup=MIN_SPEEDUP,
                policy=policy,
                noise=noise,
                seed=s,
                weights=weights,
            )
            for s in range(races)
        ]
        fs = [
            run_simulated_fixed(
                lat, baseline="base", min_speedup=MIN_SPEEDUP, noise=noise, seed=s, weights=weights
            )
            for s in range(races)
        ]
        k_v = [r.candidate("ch").verdict for r in ks]
        f_v = [f.verdict["ch"] for f in fs]
        k_ms = statistics.median(r.total_time_s for r in ks) * 1e3
        f_ms = statistics.median(f.total_time_s for f in fs) * 1e3
        rounds = [r.rounds for r in ks]
        p90 = statistics.quantiles(rounds, n=10)[-1] if len(rounds) > 1 else rounds[0]
        print(
            _fmt_row(
                [
                    name,
                    "faster" if truth else "no",
                    f"{statistics.median(r.timed_calls for r in ks):.0f}",
                    f"{statistics.median(f.timed_calls for f in fs):.0f}",
                    f"{k_ms:.0f}",
                    f"{f_ms:.0f}",
                    f"{f_ms / k_ms:.1f}x",
                    f"{k_v.count('faster') / races:.1%}",
                    f"{f_v.count('faster') / races:.1%}",
                    f"{k_v.count('unresolved') / races:.1%}",
                    f"{statistics.median(rounds):.0f}/{p90:.0f}",
                ],
                WIDTHS,
            )
        )


def _models():  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    torch.manual_seed(0)
    conv = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, stride=2),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).eval()
    mlp = nn.Sequential(
        nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10)
    ).eval()
    x_conv = torch.randn(4, 3, 64, 64)
    x_mlp = torch.randn(32, 256)

    def bind(model, x) -> Callable[[], object]:  # type: ignore[no-untyped-def]
        def call() -> object:
            with torch.inference_mode():
                return model(x)

        return call

    with torch.inference_mode():
        traced_mlp = torch.jit.freeze(torch.jit.trace(copy.deepcopy(mlp), x_mlp))
    conv_cl = copy.deepcopy(conv).to(memory_format=torch.channels_last)
    x_conv_cl = x_conv.contiguous(memory_format=torch.channels_last)
    return [
        (
            "conv: eager vs eager (A vs A)",
            bind(conv, x_conv),
            bind(copy.deepcopy(conv), x_conv),
            False,
        ),
        ("conv: eager vs channels_last", bind(conv, x_conv), bind(conv_cl, x_conv_cl), None),
        ("mlp: eager vs eager (A vs A)", bind(mlp, x_mlp), bind(copy.deepcopy(mlp), x_mlp), False),
        ("mlp: eager vs jit.freeze", bind(mlp, x_mlp), bind(traced_mlp, x_mlp), None),
    ]


def real(repeats: int, threads: int) -> None:
    import os

    import scipy.stats  # noqa: F401  # a one-off import (~1 s), not a cost of either protocol
    import torch

    torch.set_num_threads(threads)
    policy = MeasurementPolicy()
    print(f"\nload average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        f"\nReal CPU models (torch {torch.__version__}, {threads} thread(s); measured on a shared"
    )
    print(f"2-core machine; {repeats} decisions per pair and protocol, alternating K and F)")
    print(
        _fmt_row(
            [
                "pair",
                "K calls",
                "F calls",
                "K ms",
                "F ms",
                "F/K time",
                "K verdicts",
                "F verdicts",
                "K speedup",
                "F speedup",
            ],
            [30, 8, 8, 8, 8, 8, 24, 24, 10, 10],
        )
    )
    for name, base, ch, _truth in _models():
        for _ in range(3):  # first calls (lazy init) outside both protocols
            base(), ch()
        ks, fs = [], []
        for r in range(repeats):
            t0 = time.perf_counter()
            ks.append(
                run_race(
                    {"base": [base], "ch": [ch]}, [1.0], "base", MIN_SPEEDUP, evolve(policy, seed=r)
                )
            )
            k_wall = time.perf_counter() - t0
            fs.append(fixed_protocol({"base": [base], "ch": [ch]}, [1.0], "base", MIN_SPEEDUP))
            assert k_wall >= ks[-1].total_time_s * 0.99
        k_v = [k.candidate("ch").verdict for k in ks]
        f_v = [f.verdict["ch"] for f in fs]
        k_ms = statistics.median(k.total_time_s for k in ks) * 1e3
        f_ms = statistics.median(f.total_time_s for f in fs) * 1e3

        def tally(vs: list[str]) -> str:
            return ",".join(f"{v}:{vs.count(v)}" for v in sorted(set(vs)))

        print(
            _fmt_row(
                [
                    name,
                    f"{statistics.median(k.timed_calls for k in ks):.0f}",
                    f"{statistics.median(f.timed_calls for f in fs):.0f}",
                    f"{k_ms:.0f}",
                    f"{f_ms:.0f}",
                    f"{f_ms / k_ms:.1f}x",
                    tally(k_v),
                    tally(f_v),
                    f"{statistics.median(k.candidate('ch').speedup_vs_baseline.point for k in ks):.3f}",
                    f"{statistics.median(f.speedup['ch'] for f in fs):.3f}",
                ],
                [30, 8, 8, 8, 8, 8, 24, 24, 10, 10],
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--races", type=int, default=300, help="simulated races per scenario")
    parser.add_argument("--real", action="store_true", help="also time small real CPU models")
    parser.add_argument("--real-repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    simulated(args.races)
    if args.real:
        import os

        real(args.real_repeats, args.threads)
        print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
