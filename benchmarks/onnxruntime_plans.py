"""ONNX Runtime fp32 and int8 plans vs eager fp32, measured through dlopt's pipeline.

    python benchmarks/onnxruntime_plans.py                          # demo, MLP, encoder block
    python benchmarks/onnxruntime_plans.py --models mlp --rounds 10

Per model, ``InferenceOptimizer`` exports and builds the ``onnxruntime_cpu`` (fp32) and
``onnxruntime_cpu_int8`` plans, validates them against eager fp32 (int8 at the int8
limits), and races them in interleaved rounds of settled bursts paired with eager (see
docs/measurement.md). The speedup is the report's ``speedup_vs_eager``: the per-round
paired ratio of traffic-weighted costs, eager/plan, with its interval. Per-case ratios of
mean latencies from the same race are printed as context. Figures are recorded in
docs/providers/onnxruntime.md.
"""

from __future__ import annotations

import argparse

from _common import MODELS, measurement_policy, print_environment, print_report, race

PLANS = ["onnxruntime_cpu", "onnxruntime_cpu_int8"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models", nargs="+", choices=sorted(MODELS), default=["demo", "mlp", "encoder"]
    )
    parser.add_argument("--rounds", type=int, default=30, help="race rounds per model")
    parser.add_argument("--max-time", type=float, default=120.0, help="race time cap (s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle", type=float, default=0.2, help="untimed settling per burst (s)")
    args = parser.parse_args()
    import onnxruntime

    print_environment(f"onnxruntime {onnxruntime.__version__}")
    policy = measurement_policy(args.rounds, args.max_time, args.seed, args.settle)
    for key in args.models:
        title, model, workload = MODELS[key]()
        print_report(title, race(model, workload, PLANS, measurement=policy))


if __name__ == "__main__":
    main()
