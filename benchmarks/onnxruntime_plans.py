"""ONNX Runtime fp32 and int8 plans vs eager fp32, measured through dlopt's pipeline.

    python benchmarks/onnxruntime_plans.py                          # demo, MLP, encoder block
    python benchmarks/onnxruntime_plans.py --models mlp --rounds 10

Per model, ``InferenceOptimizer`` exports and builds the ``onnxruntime_cpu`` (fp32) and
``onnxruntime_cpu_int8`` plans, validates them against eager fp32 (int8 at the int8
limits), and races them in interleaved rounds of settled bursts paired with eager (see
docs/measurement.md). The speedup is the report's ``speedup_vs_eager``: the per-round
paired ratio of traffic-weighted costs, eager/plan, with its interval. Per-case ratios of
mean latencies from the same race are printed as context. Figures are recorded in
docs/design/provider-figures.md.
"""

from __future__ import annotations

from _common import plan_benchmark_arguments, print_environment, race_each_model

PLANS = ["onnxruntime_cpu", "onnxruntime_cpu_int8"]


def main() -> None:
    args = plan_benchmark_arguments(__doc__, ["demo", "mlp", "encoder"]).parse_args()
    import onnxruntime

    print_environment(f"onnxruntime {onnxruntime.__version__}")
    race_each_model(args, PLANS)


if __name__ == "__main__":
    main()
