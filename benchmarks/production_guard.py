"""What the production guard costs a caller, on the demo model (docs/serving.md).

dlopt selects a plan for the demo conv net (batch 1 and batch 8), then the same built plan
is called, round by round in a fresh random order, four ways:

- ``plan``: the built plan called directly inside ``torch.inference_mode()`` (no decision);
- ``guard off``: the decision with ``on_nonfinite_input="serve"`` and no shadow checks
  (routing, counters and the latency watch only);
- ``default``: the default guard (the non-finite input check on, no shadow checks);
- ``shadow 0.01``: the default guard with ``shadow_rate=0.01`` (eager fp32 reruns 1% of
  calls in a background thread).

Each round times a burst of calls of each; the p50 of every burst is paired with the
``plan`` burst of the same round, and the median of those per-round ratios is printed
with the ratio of the bursts' p99s. The non-finite input check is also timed alone, per
call, on each case's input, against the plan's own median call.

    python benchmarks/production_guard.py [--rounds 30] [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import warnings
from collections.abc import Callable

import torch

from dlopt import GuardPolicy, InferenceOptimizer, OptimizationPolicy
from dlopt.cli.demo import build_demo_model, demo_workload
from dlopt.engine.decision import OptimizationDecision
from dlopt.platform.machine import cpu_model_and_flags
from dlopt.serving.served import has_nonfinite_input


def burst(call: Callable[[], object], calls: int) -> list[float]:
    """Per-call seconds of ``calls`` back-to-back calls (after 10 untimed ones)."""
    for _ in range(10):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    model_name, flags = cpu_model_and_flags()
    isa = ", ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile") if f in flags)
    print(f"CPU: {model_name} ({isa}); {os.cpu_count()} CPUs; load average before "
          f"{os.getloadavg()[0]:.2f}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    model, workload = build_demo_model(), demo_workload()
    decision = InferenceOptimizer("cpu", OptimizationPolicy()).select(model, workload)
    print(f"selected: {decision.selected_plan}")
    variants: dict[str, OptimizationDecision] = {
        "guard off": OptimizationDecision(
            decision.plan, decision.report, fallback=model,
            guard=GuardPolicy(on_nonfinite_input="serve"),
        ),
        "default": OptimizationDecision(decision.plan, decision.report, fallback=model),
        "shadow 0.01": OptimizationDecision(
            decision.plan, decision.report, fallback=model,
            guard=GuardPolicy(shadow_rate=0.01),
        ),
    }  # fmt: skip
    rng = random.Random(0)
    for case in workload.cases:
        with torch.inference_mode():
            x = case.args[0].clone()
        calls: dict[str, Callable[[], object]] = {"plan": lambda x=x: decision.plan(x)}
        for label, served in variants.items():
            calls[label] = lambda served=served, x=x: served(x)
        p50s: dict[str, list[float]] = {label: [] for label in calls}
        p99s: dict[str, list[float]] = {label: [] for label in calls}
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(args.rounds):
                order = list(calls)
                rng.shuffle(order)
                for label in order:
                    times = burst(calls[label], args.calls)
                    p50s[label].append(quantile(times, 0.5))
                    p99s[label].append(quantile(times, 0.99))
            check = burst(lambda x=x: has_nonfinite_input((x,), {}), 2000)
        plan_p50 = statistics.median(p50s["plan"])
        print(f"\ncase {case.name} {tuple(x.shape)}: plan p50 {plan_p50 * 1e3:.3f} ms")
        for label in variants:
            ratio = statistics.median(a / b for a, b in zip(p50s[label], p50s["plan"]))
            tail = statistics.median(a / b for a, b in zip(p99s[label], p99s["plan"]))
            print(f"  {label:12s} p50 {statistics.median(p50s[label]) * 1e3:.3f} ms  "
                  f"p50 ratio {ratio:.4f}  p99 ratio {tail:.3f}")
        check_s = statistics.median(check)
        print(f"  non-finite input check alone: {check_s * 1e6:.2f} us per call "
              f"({100 * check_s / plan_p50:.2f}% of the plan's call)")
        variants["shadow 0.01"].drain_shadow_checks()
        health = variants["shadow 0.01"].health()
        print(f"  shadow 0.01 so far: {health.shadow_checks} checks, {health.shadow_skipped} "
              f"skipped, {health.shadow_mismatches} mismatches over {health.plan_calls} plan calls")
    print(f"\nload average after {os.getloadavg()[0]:.2f}")
    decision.close()


if __name__ == "__main__":
    main()
