"""Eager latency and page faults per call under glibc's default malloc thresholds and
after the race settles them (``dlopt.measurement.allocator.GlibcAllocator``).

    python benchmarks/allocator_regime.py

Each regime runs in a fresh process (the setting stays in a process): a stack of 3x3
convolutions on 8x32x112x112 activations (12.8 MB each), 2 intra-op threads, 6 blocks of
5 calls; per block the mean latency and minor page faults per call. Ratios between the
two regimes are measured on the same machine in one run; the load average is printed.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import resource, sys, time, torch
from dlopt.measurement.allocator import GlibcAllocator
torch.set_num_threads(2)
if sys.argv[1] == "settled":
    print("settled by", GlibcAllocator().settle())
layers = [torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU())
          for _ in range(6)]
model = torch.nn.Sequential(*layers).eval()
x = torch.randn(8, 32, 112, 112)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
with torch.inference_mode():
    for block in range(6):
        f0, t0 = faults(), time.perf_counter()
        for _ in range(5):
            model(x)
        ms = (time.perf_counter() - t0) / 5 * 1e3
        print(f"{sys.argv[1]:8s} block {block}: {ms:7.1f} ms per call, "
              f"{(faults() - f0) / 5:9.0f} minor faults per call")
"""


def main() -> None:
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for regime in ("default", "settled"):
        subprocess.run([sys.executable, "-c", CHILD, regime], check=True)
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
