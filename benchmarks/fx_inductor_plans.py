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
compiles (what a first deployment pays). Figures are recorded in docs/design/provider-figures.md.
"""

from __future__ import annotations

import os
import tempfile

# Before torch._inductor is imported anywhere: cold compiles, not a warm user cache.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="dlopt-bench-inductor-")

from _common import plan_benchmark_arguments, print_environment, race_each_model

PLANS = ["fx", "fx_inductor", "inductor", "inductor_freezing"]


def main() -> None:
    parser = plan_benchmark_arguments(__doc__, ["demo", "encoder"])
    parser.add_argument(
        "--max-autotune", action="store_true", help="also race inductor_max_autotune (slow compile)"
    )
    args = parser.parse_args()
    print_environment(f"Inductor cache (fresh): {os.environ['TORCHINDUCTOR_CACHE_DIR']}")
    race_each_model(args, PLANS + (["inductor_max_autotune"] if args.max_autotune else []))


if __name__ == "__main__":
    main()
