"""Does a runtime that keeps its threads spinning after a call bias the race?

Demo model (1x3x64x64): eager fp32 vs ONNX Runtime CPU with spinning on (and off, for
comparison). Each plan is first timed alone (back to back, median), then raced with the
quiet-wait guard off and on. Prints the race's speedup next to the stand-alone ratio.

    python benchmarks/spinning_runtime.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable

import attrs
import torch

from dlopt.cli.demo import build_demo_model
from dlopt.contract.provider import ProviderContext
from dlopt.measurement import MeasurementPolicy, RaceResult, run_race
from dlopt.settings.workload import WorkloadProfile
from dlopt_onnxruntime.provider import OnnxRuntimeProvider


def alone_ms(fn: Callable[[], object], calls: int = 300) -> float:
    """Median latency of ``fn`` timed back to back, after 20 warm-up calls."""
    for _ in range(20):
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e6


def describe(label: str, race: RaceResult) -> str:
    eager, ort = race.candidate("eager"), race.candidate("ort")
    s = ort.speedup_vs_baseline
    assert s is not None and s.point is not None
    return (
        f"{label:20s} speedup {s.point:.2f} [{s.low or 0:.2f}, {s.high or 0:.2f}]  {ort.verdict:10s} "
        f"rounds {race.rounds:2d}  eager {eager.weighted_mean_ms or 0:.2f} ms  ort {ort.weighted_mean_ms or 0:.2f} ms  "
        f"quiet-wait {race.quiet_wait_s * 1e3:.0f} ms (after ort {ort.quiet_wait_after_s * 1e3:.0f})"
    )


def main() -> None:
    print(
        f"load average {os.getloadavg()[0]:.2f}; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    model = build_demo_model()
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    context = ProviderContext(workload=WorkloadProfile.single(x), artifact_dir=tempfile.mkdtemp())
    ort = {
        spin: OnnxRuntimeProvider(
            name=f"ort_spin{spin}", session_config={"session.intra_op.allow_spinning": spin}
        ).build(model, context)
        for spin in ("1", "0")
    }
    default = MeasurementPolicy()
    with torch.inference_mode():
        eager_ms, ort_ms = alone_ms(lambda: model(x)), alone_ms(lambda: ort["1"](x))
        print(
            f"stand-alone: eager {eager_ms:.2f} ms, ort (spinning) {ort_ms:.2f} ms, ratio {eager_ms / ort_ms:.2f}"
        )
        for label, spin, cap in (
            ("spinning, guard off", "1", 0.0),
            ("spinning, guard on", "1", default.quiesce_max_s),
            ("no spin, guard on", "0", default.quiesce_max_s),
        ):
            plan = ort[spin]
            race = run_race(
                {"eager": [lambda: model(x)], "ort": [lambda plan=plan: plan(x)]},
                weights=[1.0],
                baseline="eager",
                min_speedup=1.02,
                policy=attrs.evolve(default, quiesce_max_s=cap),
            )
            print(describe(label, race))
    for plan in ort.values():
        plan.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
