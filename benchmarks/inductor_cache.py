"""What TorchInductor's on-disk caches spare the Inductor plans: each variant's first call
(its compile) in a fresh process, twice over one cache directory, and whether torch's FX
graph cache served the graph, missed it or was bypassed (with torch's reason).

    python benchmarks/inductor_cache.py     # the demo conv net at batch 8

Each variant runs in its own process (``python -c``) in the order default, freezing,
default, freezing, all over one empty ``TORCHINDUCTOR_CACHE_DIR``, as the plans of one
decision and of the next share torch's default directory (``cache_in_plan_dir`` off). The
second round shows what a warm cache spares each variant; the first round's freezing run
shows what it gains from the default variant's kernels. Ratios to the first cold compile
are printed, measured in one run on one machine, with the load average.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from _common import load_average, print_environment

CHILD = r"""
import json, logging, sys, time
import torch
import torch._inductor.config as config
from torch._dynamo.utils import counters
from dlopt.cli.demo import build_demo_model

reasons = []

class Reasons(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if "Bypassing FX Graph Cache" in message:
            reasons.append(message.split("because", 1)[-1].strip(" '"))

logging.getLogger("torch._inductor.codecache").addHandler(Reasons())
logging.getLogger("torch._inductor.codecache").setLevel(logging.INFO)
config.freezing = sys.argv[1] == "freezing"
torch.manual_seed(0)
model = build_demo_model().eval()
x = torch.randn(8, 3, 64, 64)
with torch.no_grad():
    compiled = torch.compile(model)
    start = time.perf_counter()
    compiled(x)
    seconds = time.perf_counter() - start
graph = {k.removeprefix("fxgraph_cache_"): v for k, v in counters["inductor"].items()
         if k.startswith("fxgraph_cache_")}
print(json.dumps({"first_call_s": seconds, "fx_graph_cache": graph, "bypassed": reasons}))
"""


def first_call(variant: str, cache_dir: str) -> dict[str, object]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, variant],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    print_environment()
    with tempfile.TemporaryDirectory(prefix="inductor-cache-") as cache_dir:
        rows = [
            (label, variant, first_call(variant, cache_dir))
            for label in ("cold", "warm")
            for variant in ("default", "freezing")
        ]
    base = float(rows[0][2]["first_call_s"])  # type: ignore[arg-type]
    print(f"{'cache':6} {'variant':9} {'first call s':>12} {'/ cold default':>15}  FX graph cache")
    for label, variant, found in rows:
        seconds = float(found["first_call_s"])  # type: ignore[arg-type]
        why = "; bypassed: " + ", ".join(found["bypassed"]) if found["bypassed"] else ""  # type: ignore[arg-type]
        print(
            f"{label:6} {variant:9} {seconds:12.2f} {seconds / base:15.2f}  "
            f"{found['fx_graph_cache']}{why}"
        )
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
