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

Two regimes: calls back to back, and paced (the caller idle ``--gap-ms`` between calls,
as a server between requests). Back to back, any work between two calls of a runtime
whose worker threads spin for a moment after a call (OpenVINO's, ONNX Runtime's) can
make the next call wait for a sleeping worker: the ``plan + pause`` control (the plan
after a busy pause as long as the non-finite check) shows how much of a difference is
that, not the guard. Paced, every call finds the workers asleep alike. On a 2-core VM a
multi-threaded plan's p50 moves by a few percent from one burst to the next, more than
the guard costs, so the guard's own cost is first measured exactly: the same decisions
over a plan that returns a ready output at once (microseconds per call, and as a share
of the selected plan's median call).

    python benchmarks/production_guard.py [--rounds 20] [--calls 200] [--gap-ms 1]
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
from dlopt.contract.provider import BuiltPlan
from dlopt.engine.decision import OptimizationDecision
from dlopt.platform.machine import cpu_model_and_flags
from dlopt.serving.served import has_nonfinite_input


def burst(call: Callable[[], object], calls: int, gap_s: float = 0.0) -> list[float]:
    """Per-call seconds of ``calls`` calls (after 10 untimed ones), each followed by an
    idle ``gap_s``."""
    for _ in range(10):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
        if gap_s:
            time.sleep(gap_s)
    return times


def busy_pause(seconds: float) -> None:
    """Keep the calling thread busy for ``seconds`` (what a check of that length does)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def guard_cost(
    decision: OptimizationDecision,
    model: torch.nn.Module,
    x: torch.Tensor,
    ready: object,
    plan_s: float,
) -> None:
    """The guard's own cost per call: each guard over a plan that returns ``ready`` at once
    (the selected plan's traits and report), against calling that plan directly."""
    instant = BuiltPlan(
        runner=lambda *_: ready, serving=decision.plan.serving, precision=decision.plan.precision
    )
    guards = {
        "guard off": GuardPolicy(on_nonfinite_input="serve"),
        "default": GuardPolicy(),
        "shadow 0.01": GuardPolicy(shadow_rate=0.01),
    }
    served = {
        label: OptimizationDecision(instant, decision.report, fallback=model, guard=guard)
        for label, guard in guards.items()
    }
    calls: dict[str, Callable[[], object]] = {"instant plan": lambda: instant(x)}
    calls.update({label: (lambda d=d: d(x)) for label, d in served.items()})
    calls["non-finite check"] = lambda: has_nonfinite_input((x,), {})
    time.sleep(0.5)  # the selected runtime's worker threads stop spinning
    # The mean of 2000 calls, least of 15 repeats in turn (preemption only adds time); the
    # shadow checks' eager calls are waited for before the next repeat starts.
    best: dict[str, float] = {}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(15):
            for label, call in calls.items():
                start = time.perf_counter()
                for _ in range(2000):
                    call()
                mean = (time.perf_counter() - start) / 2000
                best[label] = min(best.get(label, mean), mean)
                served["shadow 0.01"].drain_shadow_checks()
    base = best["instant plan"]
    print(
        f"\n  the guard's own cost per call ({tuple(x.shape)}; the selected plan's median "
        f"call, paced: {plan_s * 1e3:.3f} ms):"
    )
    for label in guards:
        extra = best[label] - base
        print(f"    {label:16s} {extra * 1e6:6.1f} us  ({100 * extra / plan_s:.2f}% of a call)")
    check = best["non-finite check"]
    print(
        f"    {'non-finite check':16s} {check * 1e6:6.1f} us  ({100 * check / plan_s:.2f}% "
        "of a call), alone"
    )
    served["shadow 0.01"].drain_shadow_checks()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument(
        "--guard-only", action="store_true", help="the guard's own cost only (no end-to-end)"
    )
    args = parser.parse_args()
    model_name, flags = cpu_model_and_flags()
    isa = ", ".join(
        f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile") if f in flags
    )
    print(
        f"CPU: {model_name} ({isa}); {os.cpu_count()} CPUs; load average before "
        f"{os.getloadavg()[0]:.2f}; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
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
    inputs = []
    for case in workload.cases:
        with torch.inference_mode():
            inputs.append(case.args[0].clone())
            ready = decision.plan(inputs[-1])
            paced = burst(lambda x=inputs[-1]: decision.plan(x), 300, 0.001)
        guard_cost(decision, model, inputs[-1], ready, statistics.median(paced))
    for case, x in zip(workload.cases, inputs if not args.guard_only else ()):
        with torch.inference_mode():
            check_s = statistics.median(burst(lambda x=x: has_nonfinite_input((x,), {}), 2000))
        calls: dict[str, Callable[[], object]] = {
            "plan": lambda x=x: decision.plan(x),
            "plan + pause": lambda x=x, pause=check_s: (busy_pause(pause), decision.plan(x)),
        }
        for label, served in variants.items():
            calls[label] = lambda served=served, x=x: served(x)
        for regime, gap_s in (
            ("back to back", 0.0),
            (f"paced {args.gap_ms:g} ms", args.gap_ms / 1e3),
        ):
            p50s: dict[str, list[float]] = {label: [] for label in calls}
            p99s: dict[str, list[float]] = {label: [] for label in calls}
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for _ in range(args.rounds):
                    order = list(calls)
                    rng.shuffle(order)
                    for label in order:
                        times = burst(calls[label], args.calls, gap_s)
                        p50s[label].append(quantile(times, 0.5))
                        p99s[label].append(quantile(times, 0.99))
            plan_p50 = statistics.median(p50s["plan"])
            print(
                f"\ncase {case.name} {tuple(x.shape)}, {regime}: plan p50 {plan_p50 * 1e3:.3f} ms"
            )
            for label in list(calls)[1:]:
                ratio = statistics.median(a / b for a, b in zip(p50s[label], p50s["plan"]))
                tail = statistics.median(a / b for a, b in zip(p99s[label], p99s["plan"]))
                print(
                    f"  {label:12s} p50 {statistics.median(p50s[label]) * 1e3:.3f} ms  "
                    f"p50 ratio {ratio:.4f}  p99 ratio {tail:.3f}"
                )
            shadow = statistics.median(a / b for a, b in zip(p50s["shadow 0.01"], p50s["default"]))
            print(f"  shadow 0.01 against shadow 0 (default): p50 ratio {shadow:.4f}")
        variants["shadow 0.01"].drain_shadow_checks()
        health = variants["shadow 0.01"].health()
        print(
            f"  shadow 0.01 so far: {health.shadow_checks} checks, {health.shadow_skipped} "
            f"skipped, {health.shadow_mismatches} mismatches over {health.plan_calls} plan calls"
        )
    print(f"\nload average after {os.getloadavg()[0]:.2f}")
    decision.close()


if __name__ == "__main__":
    main()
