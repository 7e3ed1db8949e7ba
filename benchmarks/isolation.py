"""What isolation costs and how fast it recovers: the demo selection in process and
isolated (``dlopt select --demo`` vs ``--isolate``), wall time and ratio in one run; then
the time an isolated selection of a small MLP takes to recover from a plan that segfaults
mid-race.

    python benchmarks/isolation.py            # the timing run (a quiet machine)
    python benchmarks/isolation.py --quick    # a smoke check: two plans, 1 s budgets

Each selection is a fresh ``python -m dlopt`` process (or, for the recovery, a fresh
host), timed from start to exit, so interpreter and import costs count as a user pays
them; the in-process and isolated runs alternate ``--repeats`` times and the medians are
compared. Recovery: from the host's announcement of the crash (``candidate_crashed``) to
the new worker's first finished round, and the whole selection against the same one
without the crashing plan.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import load_average, print_environment

HERE = Path(__file__).resolve().parent
QUICK_PLANS = ("eager_fp32", "native_channels_last")


def demo_seconds(isolate: bool, quick: bool) -> float:
    """Wall time of one ``dlopt select --demo`` (``--isolate`` when asked)."""
    command = [sys.executable, "-m", "dlopt", "select", "--demo", "--plain"]
    if quick:
        command += ["--max-measure-time", "1"]
        for plan in QUICK_PLANS:
            command += ["--include", plan]
    if isolate:
        command.append("--isolate")
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=1800)
    return time.perf_counter() - start


def recovery(quick: bool) -> tuple[float, float, float]:
    """``(crash to racing again, isolated selection with the crash, without it)`` in s."""
    sys.path.insert(0, str(HERE))
    from _isolation_plans import CrashesMidRace, EagerCopy

    from dlopt import InferenceOptimizer, OptimizationPolicy
    from dlopt.events import EventKind
    from dlopt.measurement import MeasurementPolicy

    budget = MeasurementPolicy(max_time_s=3.0 if quick else 10.0, seed=0)
    marks: dict[str, Any] = {}

    def watch(event) -> None:
        now = time.perf_counter()
        if event.kind is EventKind.CANDIDATE_CRASHED:
            marks["crashed"] = now
            marks["crash_stage"] = event.data.get("stage")
        elif event.kind is EventKind.ROUND_FINISHED and "crashed" in marks:
            marks.setdefault("racing_again", now)

    def run(providers: list, include: tuple[str, ...]) -> float:
        policy = OptimizationPolicy(isolation="process", include=include, measurement=budget)
        start = time.perf_counter()
        optimizer = InferenceOptimizer("cpu", policy, providers, observers=[watch])
        optimizer.select("_isolation_plans:small_mlp").close()
        return time.perf_counter() - start

    plans = ("eager_fp32", EagerCopy.name)
    clean = run([EagerCopy()], plans)
    crashed = run([EagerCopy(), CrashesMidRace()], (*plans, CrashesMidRace.name))
    if "racing_again" not in marks:
        raise SystemExit(
            f"no round followed a crash (events seen: {sorted(marks)}): the plan must crash "
            "in the race; adjust _isolation_plans.CRASH_AT_CALL"
        )
    if marks.get("crash_stage") != "measure":
        raise SystemExit(f"the plan crashed at {marks.get('crash_stage')}, not mid-race")
    return marks["racing_again"] - marks["crashed"], crashed, clean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke check, not a timing")
    parser.add_argument("--repeats", type=int, default=None, help="alternating runs of each")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 5)
    print_environment()
    in_process, isolated = [], []
    for _ in range(repeats):
        in_process.append(demo_seconds(False, args.quick))
        isolated.append(demo_seconds(True, args.quick))
    base, iso = statistics.median(in_process), statistics.median(isolated)
    print(f"demo selection{' (quick)' if args.quick else ''}, median of {repeats}:")
    print(f"  in process  {base:8.2f} s")
    print(f"  isolated    {iso:8.2f} s   ratio {iso / base:.2f}  (+{iso - base:.2f} s)")
    to_racing, with_crash, without = recovery(args.quick)
    print("recovery from a segfault mid-race (isolated):")
    print(f"  crash announced -> racing again   {to_racing:8.2f} s")
    print(f"  selection with the crash          {with_crash:8.2f} s")
    print(f"  same selection without the plan   {without:8.2f} s   (+{with_crash - without:.2f} s)")
    print(f"load average (1/5/15 min) at end: {load_average()}")


if __name__ == "__main__":
    main()
