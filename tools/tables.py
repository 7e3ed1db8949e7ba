"""Regenerate the tables dlopt-core ships, so that no selection pays for them.

    python tools/tables.py boundaries   # measurement/boundary_levels.json (a few minutes)
    python tools/tables.py priors [RESULTS.json ...]   # selection/priors.json, from the
                                        # benchmark suite's results (docs/benchmarks/)
    python tools/tables.py priors --machine avx2 --costs-from R.json --costs-for 'onnxruntime_*'
                                        # one machine class's rows, ONNX Runtime's costs
                                        # from R.json only (after its builds got cheaper)
    python tools/tables.py shared-miss RESULTS.json ...   # how much of a plan's miss of
                                        # its prior the others share (SHARED_MODEL_FACTOR)

(or ``python3 -m nox -s tables -- boundaries``). Each table is written whole, sorted, as
strict JSON; the tests check that a shipped table matches what its code computes.
"""

from __future__ import annotations

import argparse
import fnmatch
import itertools
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from dlopt.platform.machine import machine_class_of
from dlopt.selection.prior_table import UNKNOWN_COST_S

CORE = Path(__file__).resolve().parents[1] / "packages" / "dlopt-core" / "src" / "dlopt"

#: The (first look, last look) settings every default race and cache recheck use:
#: MeasurementPolicy's min_rounds..max_rounds, and the recheck probe's with and without a
#: recorded spread (cache/recheck.py).
BOUNDARY_SETTINGS = ((3, 100), (3, 12), (2, 12))


def boundaries() -> Path:
    from dlopt.measurement.sequential import (
        ALPHA_GRID_LOW,
        ALPHA_GRID_RATIO,
        TABLE_FILE,
        alpha_grid,
        exact_per_look_level,
    )

    settings = []
    for first, last in BOUNDARY_SETTINGS:
        start = time.perf_counter()
        alphas = [float(a) for a in alpha_grid()]
        levels = [exact_per_look_level(a, first, last) for a in alphas]
        settings.append({"first": first, "last": last, "alphas": alphas, "levels": levels})
        print(f"looks {first}..{last}: {len(alphas)} levels in {time.perf_counter() - start:.0f} s")
    table = {
        "format": 1,
        "alpha_grid": {"low": ALPHA_GRID_LOW, "ratio": ALPHA_GRID_RATIO},
        "settings": settings,
    }
    path = CORE / "measurement" / TABLE_FILE
    path.write_text(json.dumps(table, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


# -- priors ----------------------------------------------------------------------------
# The shipped prior table, made from the benchmark suite's results.
#
# For every machine class the suite ran on, every operator-mix kind of its workloads and
# every plan that passed validation there: the speedup over eager fp32 the oracle measured
# (geometric mean over the workloads of that kind, the interval their spread widened by
# WIDEN, more for a kind measured on one workload only), the median seconds dlopt's own
# runs spent building and first-calling it (the highest such median over the documents:
# see plan_cost), and on how many workloads of that kind it failed (see failed_plans).
# The coverage of such intervals is what the suite checks (``prior coverage`` in
# docs/benchmarks/results.md).


#: How far beyond the measured spread an interval reaches (x/÷), and further still when
#: one workload is all that was measured.
WIDEN = 1.3
WIDEN_ONE = 1.6
#: The cheapest cost a prior claims (seconds): a plan is never free to build.
MIN_COST_S = 0.05
#: Plans that reuse one export within a process (dlopt-onnxruntime keeps its ONNX export
#: for the plans after the first, dlopt-openvino its converted model): whichever is built
#: first pays it, and a run records the others at their cheap path. Each plan of a group
#: costs what the group's costliest plan does on that machine class and mix. A table made
#: with these costs (commit de579f2, and with the pass rates at 321a0a7) is not shipped:
#: the 20 s budget runs of the ImageNet models kept native or eager plans
#: (docs/benchmarks/README.md, "The prior table's costs"); regenerate it only with a full
#: suite run beside it.
SHARED_EXPORT_GROUPS = (
    ("onnxruntime_cpu", "onnxruntime_cpu_int8", "onnxruntime_cpu_int8_static"),
    ("openvino_cpu", "openvino_cpu_bf16", "openvino_cpu_int8"),
)
#: The mix kind of the suite's workloads whose results recorded none (older results):
#: what :func:`dlopt.pipeline.ground_truth.operator_mix` gives for each.
SUITE_MIX = {
    "mlp": "linear",
    "convnet": "conv",
    "convnet_weighted": "conv",
    "encoder": "attention",
    "bert": "attention",
    "mobilenet_v2": "conv",
    "efficientnet_b0": "conv",
    "resnet50": "conv",
}
#: The torch operator calls of one reference call (the first case) of each of the suite's
#: workloads, for results whose dlopt reports did not count them: what
#: ``python tools/tables.py operator-calls`` prints in the bench-suite environment.
SUITE_OPERATOR_CALLS: dict[str, int] = {
    "mlp": 3,
    "convnet": 35,
    "convnet_weighted": 35,
    "encoder": 28,
    "bert": 122,
    "mobilenet_v2": 205,
    "efficientnet_b0": 289,
    "resnet50": 228,
}
DEFAULT_RESULTS = (
    "docs/benchmarks/results.json",
    "docs/benchmarks/first-run/results.json",
    "docs/benchmarks/avx2-only/results.json",
    "docs/benchmarks/avx2-only/757ccd4/results.json",
    "docs/benchmarks/avx2-only/19db104/results.json",
    "docs/benchmarks/avx2-only/3343764/results.json",
    "docs/benchmarks/avx2-only/55bd2e5/results.json",
    "docs/benchmarks/avx2-only/6d57c7e/results.json",
    "docs/benchmarks/avx2-only/8f3fabd/results.json",
    "docs/benchmarks/avx2-only/2417098/results.json",
    "docs/benchmarks/avx2-only/6316fd4/results.json",
    "docs/benchmarks/avx2-only/first-run/results.json",
)


def measured_speedups(result: Mapping[str, Any]) -> dict[str, float]:
    """Per dlopt plan the oracle timed, its speedup over eager fp32: from the paired
    ratios to the leader (eager's over the plan's; the leader's own is 1) where the
    results hold them, else from the medians (results of the oracle before it paired)."""
    plans = {
        p["name"]: p
        for p in (result.get("oracle") or {}).get("plans", [])
        if not str(p.get("name", "")).startswith("peer_")
    }
    eager = plans.get("eager_fp32")
    if eager is None:
        return {}
    paired = any(p.get("vs_leader") for p in plans.values())
    if paired:
        ratio = {name: float(p.get("vs_leader") or 1.0) for name, p in plans.items()}
        return {name: ratio["eager_fp32"] / value for name, value in ratio.items()}
    medians = {name: p.get("median_ms") for name, p in plans.items()}
    if not medians.get("eager_fp32"):
        return {}
    return {name: float(medians["eager_fp32"]) / float(ms) for name, ms in medians.items() if ms}


#: How a validation failure's message names the limits it missed: "(bf16 limits)",
#: "(int8 limits + override for out)".
VALIDATION_LIMITS = re.compile(r"\(\w+ limits[ )]")


def failed_plans(result: Mapping[str, Any], passed: Collection[str]) -> set[str]:
    """The plans that did not pass on this workload (``passed``: those that did): the
    oracle's failures in validation (its message names the limits), and the plans a dlopt
    run built (it spent their build) that no run validated. A plan that does not apply to
    the model (channels-last without images, an fx trace error) fails fast and is not
    counted."""
    oracle = result.get("oracle") or {}
    failed = {
        name
        for name, message in (oracle.get("failures") or {}).items()
        if VALIDATION_LIMITS.search(str(message))
    }
    runs = decision_runs(result)
    validated = {name for run in runs for name in run.get("valid_plans") or ()}
    for run in runs:
        failed.update(name for name in run.get("plan_costs_s") or {} if name not in validated)
    return failed - set(passed)


def decision_runs(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """dlopt's runs of one workload: the default ones and the ``--time-budget`` ones."""
    return [*(result.get("dlopt") or []), *(result.get("budget") or [])]


def plan_costs(result: Mapping[str, Any]) -> dict[str, float]:
    """Per plan, the most its build plus first calls took over dlopt's runs (the default
    ones and the ``--time-budget`` ones): the first decision on a machine compiles with
    cold caches, and that is the one a prior's cost must not promise too little for
    (later runs find torch's compile caches warm)."""
    seen: dict[str, list[float]] = {}
    for run in decision_runs(result):
        for name, seconds in (run.get("plan_costs_s") or {}).items():
            if seconds is not None:
                seen.setdefault(name, []).append(float(seconds))
    return {name: max(values) for name, values in seen.items()}


def plan_cost(spent_per_document: Sequence[Sequence[float]]) -> float:
    """A prior's cost from what dlopt's runs of several documents spent on one plan (per
    document, one figure per workload): the highest of the documents' medians.

    A plan's cost depends on what its distribution built before it in the same process:
    the dynamic int8 ONNX Runtime plan, built after another ONNX Runtime plan, reused its
    export and cost 0.03-0.7 s on the conv nets of one run, and 3.4-6.4 s in later runs
    where it was the first ONNX Runtime plan built. A prior that promises the cheap path
    puts the plan first and spends seconds the scheduler did not count; one that
    promises the full path at worst builds it later. A plan that no document built first
    (ONNX Runtime fp32 and OpenVINO bf16 so far) gets its group's cost instead:
    :data:`SHARED_EXPORT_GROUPS`."""
    return max(statistics.median(spent) for spent in spent_per_document if spent)


def workload_operator_calls(result: Mapping[str, Any]) -> int | None:
    """The torch operator calls of one reference call of the workload, as dlopt's runs of
    it counted them, else as :data:`SUITE_OPERATOR_CALLS` has them (``None``: unknown)."""
    for run in decision_runs(result):
        if run.get("operator_calls"):
            return int(run["operator_calls"])
    return SUITE_OPERATOR_CALLS.get(str(result.get("key", "")))


def cost_per_operator(points: Sequence[tuple[int, float]]) -> float:
    """The seconds a plan's cost grows by per operator call, from ``(operator calls,
    cost)`` of the workloads it was built on: the median of the slopes between every two
    workloads of different sizes (one cold compile or one reused export among them does
    not set it), never below 0; 0 without two sizes."""
    slopes = [
        (cost_b - cost_a) / (calls_b - calls_a)
        for (calls_a, cost_a), (calls_b, cost_b) in itertools.combinations(sorted(points), 2)
        if calls_b > calls_a
    ]
    return max(statistics.median(slopes), 0.0) if slopes else 0.0


def document_machine(document: Mapping[str, Any]) -> str:
    """The machine class a results document ran on: as it says, else from its CPU flags."""
    return document.get("machine_class") or machine_class_of(
        document.get("environment", {}).get("isa_flags", ())
    )


def result_mix(result: Mapping[str, Any]) -> str | None:
    """A workload's operator-mix kind: as dlopt measured it, else the suite's own."""
    return result.get("operator_mix") or SUITE_MIX.get(result.get("key", ""))


def prior_entries(
    documents: Sequence[Mapping[str, Any]],
    costs_from: Collection[int] | None = None,
    costs_for: Sequence[str] = ("*",),
) -> list[dict[str, Any]]:
    """The table's entries from suite results documents (``results.json``). ``costs_from``:
    the indices of the documents whose dlopt runs supersede the others' costs, for the
    plans named by ``costs_for`` (shell patterns): such a plan they built on a machine
    class costs there only what they measured (``None``: every document counts alike).
    The speedups pool every document either way."""
    grouped: dict[tuple[str, str, str], tuple[list[float], dict[int, list[float]]]] = {}
    failures: dict[tuple[str, str, str], int] = {}
    # What dlopt's runs spent: (document, machine, mix, plan, operator calls, seconds).
    spending: list[tuple[int, str, str, str, int | None, float]] = []
    for index, document in enumerate(documents):
        machine = document_machine(document)
        for result in document.get("results", []):
            mix = result_mix(result)
            if mix is None:
                continue
            costs = plan_costs(result)
            speedups = measured_speedups(result)
            calls = workload_operator_calls(result)
            for plan, speedup in speedups.items():
                grouped.setdefault((machine, mix, plan), ([], {}))[0].append(speedup)
                if plan in costs:
                    spending.append((index, machine, mix, plan, calls, costs[plan]))
            for plan in failed_plans(result, speedups):
                failures[(machine, mix, plan)] = failures.get((machine, mix, plan), 0) + 1
    superseded = {
        (machine, plan)
        for index, machine, _, plan, _, _ in spending
        if costs_from is not None
        and index in costs_from
        and any(fnmatch.fnmatchcase(plan, pattern) for pattern in costs_for)
    }
    # Per (machine, plan), the (operator calls, cost) of every workload that built it: how
    # its cost grows with the model (a compiler's work per operator does not depend on
    # the mix); per (machine, mix, plan), the sizes its cost was measured at.
    sized_costs: dict[tuple[str, str], list[tuple[int, float]]] = {}
    measured_at: dict[tuple[str, str, str], list[int]] = {}
    for index, machine, mix, plan, calls, seconds in spending:
        if (machine, plan) in superseded and index not in (costs_from or ()):
            continue
        grouped[(machine, mix, plan)][1].setdefault(index, []).append(seconds)
        if calls:
            sized_costs.setdefault((machine, plan), []).append((calls, seconds))
            measured_at.setdefault((machine, mix, plan), []).append(calls)
    # A plan dlopt never built on a (machine, mix) (it was not built for want of time)
    # costs there what it cost at the most elsewhere, else what dlopt assumes of a plan
    # nothing is known of: never the 1 s that would put an unmeasured compile first.
    slowest: dict[str, float] = {}
    for (_, _, plan), (_, spent) in grouped.items():
        for seconds in spent.values():
            slowest[plan] = max(slowest.get(plan, 0.0), max(seconds))
    cost_of = {
        key: plan_cost(list(spent.values())) if spent else slowest.get(key[2], UNKNOWN_COST_S)
        for key, (_, spent) in grouped.items()
    }
    # Only what was measured on this machine class and mix sets a group's cost (not a
    # member's cost from elsewhere).
    for group in SHARED_EXPORT_GROUPS:
        for machine, mix in {(m, x) for m, x, plan in cost_of if plan in group}:
            members = [(machine, mix, plan) for plan in group if (machine, mix, plan) in cost_of]
            measured = [cost_of[key] for key in members if grouped[key][1]]
            if measured:
                cost_of.update(dict.fromkeys(members, max(measured)))
    growth = {key: cost_per_operator(points) for key, points in sized_costs.items()}
    # A group's export grows alike for each of its plans: the steepest measured sets it,
    # and each of its plans is priced at the sizes any of them was measured at.
    for group in SHARED_EXPORT_GROUPS:
        for machine in {m for m, plan in growth if plan in group}:
            steepest = max(growth.get((machine, plan), 0.0) for plan in group)
            growth.update({(machine, plan): steepest for plan in group})
        for machine, mix in {(m, x) for m, x, plan in measured_at if plan in group}:
            sizes = [n for plan in group for n in measured_at.get((machine, mix, plan), [])]
            measured_at.update({(machine, mix, plan): sizes for plan in group})
    entries = []
    for (machine, mix, plan), (points, _) in sorted(grouped.items()):
        widen = WIDEN if len(points) > 1 else WIDEN_ONE
        center = math.exp(statistics.fmean(math.log(p) for p in points))
        cost = cost_of[(machine, mix, plan)]
        sizes = measured_at.get((machine, mix, plan), [])
        entries.append(
            {
                "machine": machine,
                "mix": mix,
                "plan": plan,
                "speedup": round(center, 4),
                "low": round(min(points) / widen, 4),
                "high": round(max(points) * widen, 4),
                "cost_s": round(max(cost, MIN_COST_S), 3),
                "operator_calls": round(statistics.median(sizes)) if sizes else 0,
                "cost_per_operator_s": round(growth.get((machine, plan), 0.0), 5) if sizes else 0.0,
                "workloads": len(points),
                "failed": failures.get((machine, mix, plan), 0),
            }
        )
    return entries


def runs_document(runs: Path, machine: str) -> dict[str, Any]:
    """A results document made of a suite run's raw records (``artifacts/bench-suite/runs``,
    from a run that was stopped before it wrote ``results.json``): each workload whose
    oracle finished, with dlopt's runs of it. ``machine``: the class of the CPU it ran on."""
    results = []
    for oracle_file in sorted(runs.glob("oracle-*.json")):
        key = oracle_file.stem.removeprefix("oracle-")
        if key.startswith("plans-"):
            continue
        dlopt_runs = [
            json.loads(path.read_text(encoding="utf-8"))
            for path in sorted(runs.glob(f"dlopt-{key}-*.json"))
            if path.stem.removeprefix(f"dlopt-{key}-").isdigit()
        ]
        mix = next((r.get("mix_kind") for r in dlopt_runs if r.get("mix_kind")), None)
        oracle = json.loads(oracle_file.read_text(encoding="utf-8"))
        results.append({"key": key, "operator_mix": mix, "oracle": oracle, "dlopt": dlopt_runs})
    return {"machine_class": machine, "from_runs": str(runs), "results": results}


def priors(
    results: Sequence[Path] | None = None,
    runs: Sequence[Path] = (),
    machines: Collection[str] = (),
    costs_from: Sequence[Path] = (),
    costs_for: Sequence[str] = ("*",),
) -> Path:
    """Write the shipped prior table from ``results`` (default: the suite's latest) and the
    raw records of the suite ``runs`` (directories; run on this machine). ``machines``:
    regenerate only these machine classes' entries, keeping the shipped table's others
    (a class whose new table has not been run in full beside it stays as it is).
    ``costs_from``: results whose dlopt runs' costs supersede the others' for the plans
    they built that ``costs_for`` names (shell patterns; read for speedups too), for when
    a change made those plans' builds cheaper and older runs' costs no longer hold."""
    from dlopt.platform.machine import machine_class
    from dlopt.selection.prior_table import TABLE_FILE, TABLE_FORMAT
    from dlopt.settings.target import ExecutionTarget

    root = CORE.parents[3]
    path = CORE / "selection" / TABLE_FILE
    paths = list(results) if results else [root / p for p in DEFAULT_RESULTS]
    costing = {p.resolve() for p in costs_from}
    paths += [p for p in costs_from if p.resolve() not in {q.resolve() for q in paths}]
    paths = [p for p in paths if p.is_file()]
    documents = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    cost_documents = (
        {i for i, p in enumerate(paths) if p.resolve() in costing} if costs_from else None
    )
    here = machine_class(ExecutionTarget("cpu").device)
    documents += [runs_document(directory, here) for directory in runs]
    paths += runs
    sources = [str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in paths]
    entries = prior_entries(documents, cost_documents, costs_for)
    if machines:
        shipped = json.loads(path.read_text(encoding="utf-8"))
        kept = [e for e in shipped["entries"] if e["machine"] not in machines]
        entries = sorted(
            kept + [e for e in entries if e["machine"] in machines],
            key=lambda e: (e["machine"], e["mix"], e["plan"]),
        )
        sources = list(dict.fromkeys([*shipped.get("from", []), *sources]))
    table = {"format": TABLE_FORMAT, "from": sources, "entries": entries}
    path.write_text(json.dumps(table, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def shared_miss(
    documents: Sequence[Mapping[str, Any]], table: Mapping[tuple[str, str, str], float]
) -> dict[str, dict[str, float]]:
    """How much of one plan's miss of its prior another plan on the same workload shares
    (the selection's ``SHARED_MODEL_FACTOR``): over every ordered pair of plans the oracle
    timed on a workload, both with a prior in ``table`` (``(machine, mix, plan) ->
    speedup``), the least-squares slope of the second's log miss on the first's, and the
    root-mean-square of the second's log miss before and after the first's predicts it.
    Per operator mix, and ``all``."""
    pairs: dict[str, list[tuple[float, float]]] = {}
    for document in documents:
        machine = document_machine(document)
        for result in document.get("results", []):
            mix = result_mix(result)
            misses = {
                plan: math.log(speedup / table[(machine, mix, plan)])
                for plan, speedup in measured_speedups(result).items()
                if plan != "eager_fp32" and (machine, mix, plan) in table
            }
            for first, second in itertools.permutations(sorted(misses), 2):
                pair = (misses[first], misses[second])
                pairs.setdefault(str(mix), []).append(pair)
                pairs.setdefault("all", []).append(pair)
    fits = {}
    for mix, points in sorted(pairs.items()):
        across = sum(a * a for a, _ in points)
        slope = sum(a * b for a, b in points) / across if across > 0 else 0.0
        fits[mix] = {
            "pairs": len(points),
            "slope": round(slope, 3),
            "rms_log_miss": round(math.sqrt(statistics.fmean(b * b for _, b in points)), 3),
            "rms_after": round(
                math.sqrt(statistics.fmean((b - slope * a) ** 2 for a, b in points)), 3
            ),
        }
    return fits


def shipped_speedups() -> dict[tuple[str, str, str], float]:
    """The checkout's prior table's speedups, ``(machine, mix, plan) -> speedup``, read
    as a selection reads it."""
    from dlopt.platform.serialization import parse_strict_json
    from dlopt.selection.prior_table import TABLE_FILE, table_from_json

    text = (CORE / "selection" / TABLE_FILE).read_text(encoding="utf-8")
    return {
        key: entry.prior.speedup for key, entry in table_from_json(parse_strict_json(text)).items()
    }


def suite_operator_calls() -> dict[str, int]:
    """The torch operator calls of one call of each suite workload's first case, in
    inference mode (as a selection counts them under the default calling context)."""
    import torch

    sys.path.insert(0, str(CORE.parents[3]))
    from benchmarks.suite.models import WORKLOADS, build
    from dlopt.pipeline.ground_truth import count_operator_calls

    counted = {}
    for key in WORKLOADS:
        model, cases = build(key)
        _, args, kwargs, _ = cases[0]
        with torch.inference_mode():
            counted[key] = count_operator_calls(model, args, kwargs)
    return counted


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="table", required=True)
    sub.add_parser("boundaries", help="the sequential boundary's per-look levels")
    prior_parser = sub.add_parser("priors", help="the plans' priors from benchmark suite results")
    prior_parser.add_argument(
        "results", nargs="*", help="results.json files (default: docs/benchmarks)"
    )
    prior_parser.add_argument(
        "--runs",
        action="append",
        default=[],
        type=Path,
        help="also a suite run's raw records (artifacts/bench-suite/runs of a run stopped "
        "before its results.json; the CPU it ran on is this one's)",
    )
    prior_parser.add_argument(
        "--machine",
        action="append",
        default=[],
        help="regenerate only this machine class's entries (avx2, avx512_bf16, ...), keeping "
        "the others as shipped (repeatable)",
    )
    prior_parser.add_argument(
        "--costs-from",
        action="append",
        default=[],
        type=Path,
        metavar="RESULTS_JSON",
        help="these results' costs supersede the others' for the plans they built on a "
        "machine class (all are read for speedups), when a change made builds cheaper and "
        "older runs' costs no longer hold (repeatable)",
    )
    prior_parser.add_argument(
        "--costs-for",
        action="append",
        default=[],
        metavar="PATTERN",
        help="with --costs-from: only the plans this shell pattern names (e.g. "
        "'onnxruntime_*'; repeatable; default: every plan)",
    )
    sub.add_parser(
        "operator-calls",
        help="print the torch operator calls of the suite's workloads (SUITE_OPERATOR_CALLS; "
        "in the bench-suite environment)",
    )
    miss_parser = sub.add_parser(
        "shared-miss",
        help="print how much of one plan's miss of its shipped prior another plan on the "
        "same workload shares (the selection's SHARED_MODEL_FACTOR), per operator mix",
    )
    miss_parser.add_argument(
        "results", nargs="+", type=Path, help="results.json files (e.g. docs/benchmarks/...)"
    )
    args = parser.parse_args(argv)
    if args.table == "shared-miss":
        missing = [str(p) for p in args.results if not p.is_file()]
        if missing:
            parser.error(f"no such results file: {', '.join(missing)}")
        documents = [json.loads(p.read_text(encoding="utf-8")) for p in args.results]
        print(json.dumps(shared_miss(documents, shipped_speedups()), indent=1))
        return 0
    if args.table == "boundaries":
        print(f"wrote {boundaries()}")
        return 0
    if args.table == "operator-calls":
        print(json.dumps(suite_operator_calls(), indent=1))
        return 0
    results = [Path(p) for p in args.results] or None
    missing = [str(p) for p in args.costs_from if not p.is_file()]
    if missing:
        parser.error(f"--costs-from: no such results file: {', '.join(missing)}")
    if args.costs_for and not args.costs_from:
        parser.error("--costs-for names the plans whose costs --costs-from supersedes: add it")
    written = priors(
        results,
        args.runs,
        machines=args.machine,
        costs_from=args.costs_from,
        costs_for=args.costs_for or ("*",),
    )
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
