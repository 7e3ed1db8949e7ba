"""The plan cache: process start to a ready, revalidated decision, full race vs cache hit,
and how fast the model's weights are hashed.

    python benchmarks/cache.py            # the demo with the default plans and with an
                                          # Inductor winner forced; hashing 10 MB to 1 GB
    python benchmarks/cache.py --quick    # a smoke check: one small race, 10 MB hashed

Each selection runs in a fresh process (``python -c``), timed from before the process
starts to a returned decision: the first run races and stores its record, the second
finds it, brings the plan back, validates it and runs the revalidation probe. Every
process gets its own empty ``TORCHINDUCTOR_CACHE_DIR``, as a new replica would, so an
Inductor hit compiles only with what the record brings: the winner's AOTInductor package
(saved after the race, its time included in the race's), else torch's compile caches. The ratio hit / race is
measured in one run on one machine; the load average is printed. Hashing: the key's
weight hash (``dlopt.cache.key.model_ingredients``) of a stack of fp32 Linear layers,
in MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import load_average, print_environment

CHILD = r"""
import json, sys
import torch
from dlopt import InferenceOptimizer, OptimizationPolicy, DeploymentConstraints
from dlopt.cli.demo import build_demo_model, demo_workload
from dlopt.measurement import MeasurementPolicy

cache_dir, include, min_speedup, budget = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
policy = OptimizationPolicy(
    include=tuple(include.split(",")) if include else None,
    constraints=DeploymentConstraints(min_speedup=min_speedup),
    measurement=MeasurementPolicy(max_time_s=float(budget) if budget else None),
    plan_cache_dir=cache_dir,
)
decision = InferenceOptimizer("cpu", policy).select(build_demo_model(), demo_workload())
cache = decision.report.cache
print("RESULT " + json.dumps({
    "selected": decision.selected_plan,
    "cache_hit": cache.cache_hit,
    "reason": cache.reason,
    "lookup_s": cache.lookup_time_s,
    "revalidation_s": cache.revalidation_time_s,
    "compile_cache_restored": decision.plan.metadata.get("compile_cache_restored"),
    "served_as": decision.plan.metadata.get("served_as"),
    "saved_program": cache.saved_program,
}))
"""


def run_selection(cache_dir: Path, include: str, min_speedup: float, budget: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="inductor-")}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(cache_dir), include, str(min_speedup), budget],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the selection failed:\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return {**json.loads(line.removeprefix("RESULT ")), "wall_s": wall}


def race_vs_hit(name: str, include: str, min_speedup: float, budget: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="dlopt-cache-bench-") as root:
        cache_dir = Path(root) / "cache"
        race = run_selection(cache_dir, include, min_speedup, budget)
        hit = run_selection(cache_dir, include, min_speedup, budget)
    ratio = hit["wall_s"] / race["wall_s"]
    print(
        f"{name:28s} race {race['wall_s']:7.1f} s ({race['selected']})  "
        f"hit {hit['wall_s']:6.1f} s ({hit['selected']}, cache_hit={hit['cache_hit']}, "
        f"lookup {hit['lookup_s'] or 0:.2f} s, revalidation {hit['revalidation_s'] or 0:.2f} s, "
        f"compile caches restored: {hit['compile_cache_restored']}, "
        f"served as: {hit['served_as'] or 'built'})  hit/race {ratio:.3f}"
    )
    if race["saved_program"]:
        print(f"  the race's winner as a program: {race['saved_program']}")
    if not hit["cache_hit"]:
        print(f"  the second run missed: {hit['reason']}")
    return {"name": name, "race": race, "hit": hit, "hit_over_race": ratio}


def hashing(sizes_mb: list[int]) -> list[dict]:
    import torch

    from dlopt.cache.key import model_ingredients

    rows = []
    for size in sizes_mb:
        width = 1024
        layers = max(1, round(size * 2**20 / (4 * width * width)))
        model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
        total = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        model_ingredients(model)  # first touch of every page
        start = time.perf_counter()
        model_ingredients(model)
        seconds = time.perf_counter() - start
        print(
            f"hash {total:8.1f} MiB of parameters: {seconds * 1e3:8.1f} ms, {total / seconds:8.0f} MiB/s"
        )
        rows.append({"mib": total, "seconds": seconds, "mib_per_s": total / seconds})
        del model
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke check, not a measurement")
    parser.add_argument("--json", metavar="PATH", help="write the figures here as JSON")
    args = parser.parse_args()
    print_environment()
    results: dict = {"selections": [], "hashing": []}
    if args.quick:
        results["selections"].append(
            race_vs_hit("demo, native_channels_last", "native_channels_last", 1.02, "1")
        )
        results["hashing"] = hashing([10])
    else:
        results["selections"].append(race_vs_hit("demo, default plans", "", 1.02, ""))
        # Forced: Inductor is the only challenger and the bar is low enough that it serves.
        results["selections"].append(race_vs_hit("demo, Inductor winner", "inductor", 0.01, ""))
        full, inductor = results["selections"]
        # The forced race is short (two plans); the hit is also set against the demo's
        # full race, the one a serving process would otherwise pay at restart.
        results["inductor_hit_over_full_race"] = inductor["hit"]["wall_s"] / full["race"]["wall_s"]
        print(
            f"Inductor winner's hit / the demo's full race: "
            f"{results['inductor_hit_over_full_race']:.3f}"
        )
        results["hashing"] = hashing([10, 100, 1000])
    print(f"load average (1/5/15 min) at end: {load_average()}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
