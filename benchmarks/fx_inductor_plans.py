"""FX and TorchInductor plans vs eager fp32, measured through dlopt's pipeline in one run.

    python benchmarks/fx_inductor_plans.py                     # demo conv net + encoder block
    python benchmarks/fx_inductor_plans.py --max-autotune      # also inductor_max_autotune
    python benchmarks/fx_inductor_plans.py --models encoder --rounds 10

Per model, ``InferenceOptimizer`` builds every plan (setup time), times each case's first
call (where Inductor compiles), validates against eager fp32 and races the plans in
interleaved rounds paired with eager (see docs/measurement.md). Printed per plan: the
report's speedup vs eager fp32 (point and interval), setup and first-call cost, and the
break-even call count vs eager ((extra setup + first calls) / per-call saving, the
report's ``break_even_calls_vs_baseline``).

Inductor's on-disk caches point at a fresh temporary directory, so first calls are cold
compiles (what a first deployment pays). Figures are recorded in docs/providers/fx.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile

# Before torch._inductor is imported anywhere: cold compiles, not a warm user cache.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="dlopt-bench-inductor-")

from _common import MODELS, measurement_policy, print_environment, print_report, race

PLANS = ["fx", "fx_inductor", "inductor", "inductor_freezing"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["demo", "encoder"])
    parser.add_argument(
        "--max-autotune", action="store_true", help="also race inductor_max_autotune (slow compile)"
    )
    parser.add_argument("--rounds", type=int, default=30, help="race rounds per model")
    parser.add_argument("--max-time", type=float, default=120.0, help="race time cap (s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle", type=float, default=0.2, help="untimed settling per burst (s)")
    args = parser.parse_args()
    plans = PLANS + (["inductor_max_autotune"] if args.max_autotune else [])
    print_environment(f"Inductor cache (fresh): {os.environ['TORCHINDUCTOR_CACHE_DIR']}")
    policy = measurement_policy(args.rounds, args.max_time, args.seed, args.settle)
    for key in args.models:
        title, model, workload = MODELS[key]()
        print_report(title, race(model, workload, plans, measurement=policy))


if __name__ == "__main__":
    main()
