"""ONNX Runtime fp32 and int8 plans vs eager fp32, measured side by side in one run.

    python benchmarks/onnxruntime_plans.py [--rounds 15] [--timed 5]

Models: dlopt's demo conv net (batch 1 and 8), an MLP, and a transformer encoder block.
Every round runs every plan of a model, in a fresh random order, as a burst: untimed
calls until the plan has settled (~30 ms, at least 3 calls), then ``--timed`` timed
calls whose median is the round's sample. The speedup is the geometric mean over
rounds of eager's sample divided by the plan's in the same round (drift shared by a
round cancels), with the 10th-90th percentile of those per-round ratios.
Int8 outputs are checked against the int8 quality limits of ``dlopt.validation``.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from dlopt.providers.contract import ProviderContext
from dlopt.validation import validate_outputs
from dlopt.workload import WorkloadCase, WorkloadProfile
from dlopt_onnxruntime.plugin import default_providers

SETTLE_SECONDS = 0.03


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def models() -> list[tuple[str, torch.nn.Module, WorkloadProfile]]:
    gen = torch.Generator().manual_seed(0)
    try:
        from dlopt.demo import build_demo_model, demo_workload

        demo = [("demo conv net", build_demo_model(), demo_workload())]
    except ImportError:  # an older core without the demo module
        demo = []
    torch.manual_seed(0)
    mlp = Mlp().eval()
    encoder = torch.nn.TransformerEncoderLayer(
        d_model=256, nhead=4, dim_feedforward=1024, batch_first=True, dropout=0.0
    ).eval()
    return [
        *demo,
        (
            "MLP 512-2048-512",
            mlp,
            WorkloadProfile(
                cases=(
                    WorkloadCase("batch-1", args=(torch.randn(1, 512, generator=gen),)),
                    WorkloadCase("batch-32", args=(torch.randn(32, 512, generator=gen),)),
                )
            ),
        ),
        (
            "encoder block d256 seq64",
            encoder,
            WorkloadProfile(
                cases=(
                    WorkloadCase("batch-1", args=(torch.randn(1, 64, 256, generator=gen),)),
                    WorkloadCase("batch-8", args=(torch.randn(8, 64, 256, generator=gen),)),
                )
            ),
        ),
    ]


def burst(fn: Callable[[], Any], timed: int) -> float:
    start = time.perf_counter()
    calls = 0
    while calls < 3 or time.perf_counter() - start < SETTLE_SECONDS:
        fn()
        calls += 1
    samples = []
    for _ in range(timed):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--timed", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(0)
    providers = {p.name: p for p in default_providers()}
    chosen = [providers["onnxruntime_cpu"], providers["onnxruntime_cpu_int8"]]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    rows = []
    with tempfile.TemporaryDirectory() as artifacts:
        for title, model, workload in models():
            context = ProviderContext(workload=workload, artifact_dir=artifacts)
            plans: dict[str, Callable[..., Any]] = {"eager_fp32": model}
            built = []
            notes: dict[str, str] = {}
            for provider in chosen:
                start = time.perf_counter()
                plan = provider.build(model, context)
                built.append(plan)
                plans[provider.name] = plan
                notes[provider.name] = (
                    f"{plan.metadata['exporter']} opset {plan.metadata['opset']}, "
                    f"build {time.perf_counter() - start:.1f}s"
                )
            quality: dict[tuple[str, str], str] = {}
            with torch.inference_mode():
                for case in workload.cases:
                    reference = model(*case.args, **case.kwargs)
                    for plan in built:
                        result = validate_outputs(
                            plan(*case.args, **case.kwargs),
                            reference,
                            precision=plan.precision,
                            case_name=case.name,
                        )
                        leaf = result.leaves[0] if getattr(result, "leaves", None) else None
                        rel = getattr(leaf, "rel_l2", None)
                        quality[(plan.metadata["transform"]["precision"], case.name)] = (
                            f"{'pass' if result.passed else 'FAIL'}"
                            + (f" relL2 {rel:.1e}" if rel is not None else "")
                        )
                for case in workload.cases:
                    samples: dict[str, list[float]] = {name: [] for name in plans}
                    for _ in range(args.rounds):
                        order = list(plans)
                        rng.shuffle(order)
                        for name in order:
                            fn = plans[name]
                            samples[name].append(
                                burst(lambda fn=fn, c=case: fn(*c.args, **c.kwargs), args.timed)
                            )
                    for name in plans:
                        ratios = [e / c for e, c in zip(samples["eager_fp32"], samples[name])]
                        geo = math.exp(statistics.fmean(math.log(r) for r in ratios))
                        precision = "fp32" if name != "onnxruntime_cpu_int8" else "int8"
                        rows.append(
                            (
                                title,
                                case.name,
                                name,
                                statistics.median(samples[name]) * 1e3,
                                geo,
                                percentile(ratios, 0.1),
                                percentile(ratios, 0.9),
                                quality.get((precision, case.name), "reference")
                                if name != "eager_fp32"
                                else "reference",
                            )
                        )
            for plan in built:
                plan.close()
            for name, note in notes.items():
                print(f"  {title}: {name}: {note}")
    header = f"{'model':<26}{'case':<10}{'plan':<22}{'median ms':>10}{'speedup':>9}{'p10-p90':>14}  quality"
    print(header)
    print("-" * len(header))
    for title, case, name, ms, geo, lo, hi, q in rows:
        print(f"{title:<26}{case:<10}{name:<22}{ms:>10.3f}{geo:>8.2f}x{lo:>7.2f}-{hi:<5.2f}  {q}")


if __name__ == "__main__":
    main()
