"""One measurement in a fresh process: a dlopt decision, a peer decision or the oracle.

    python -m benchmarks.suite.worker dlopt  --workload mlp --out DIR --run 1
    python -m benchmarks.suite.worker dlopt  --workload mlp --out DIR --run 3 --plan-cache C
    python -m benchmarks.suite.worker repeat --workload mlp --out DIR --plan-cache C
    python -m benchmarks.suite.worker dlopt-budget20 --workload mlp --out DIR --run 1
    python -m benchmarks.suite.worker dlopt-busy --workload mlp --out DIR --run 1
    python -m benchmarks.suite.worker peer   --workload mlp --out DIR --run 1
    python -m benchmarks.suite.worker oracle --workload mlp --out DIR --plans PLANS.json

The suite (``python -m benchmarks.suite``) starts these, each with a timeout; each writes
strict JSON into ``--out`` (dlopt's own report, then the suite's record) and nothing else.
Wall time to a decision is timed the same way for both tools: from constructing the
optimizer (plugin discovery included) to the decision in hand.

``--plan-cache C`` on a dlopt run races as always (``reuse_cached_plan=False``) and keeps
the decision in the plan cache ``C``; ``repeat`` then decides again from ``C`` in a fresh
process: the time a repeat decision on the same machine takes (docs/cache.md).
``dlopt-budget20`` is a dlopt decision under ``OptimizationPolicy(time_budget_s=20.0)``
(``dlopt select --time-budget 20``); ``dlopt-busy`` a default one (the suite starts the
busy processes around it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from .models import build
from .results import (
    BUDGET_S,
    BUDGET_TOOL,
    BUSY_TOOL,
    PEER_PLAN_IN_ORACLE,
    DecisionRun,
    Interval,
    OracleResult,
    PriorRange,
    to_json_data,
)


def record_file(tool: str, key: str, run: int | None) -> str:
    """The suite's record of one decision (``run`` None: the repeat)."""
    return f"dlopt-{key}-repeat.json" if run is None else f"{tool}-{key}-{run}.json"


def report_file(tool: str, key: str, run: int | None) -> str:
    """dlopt's own report of one decision (``run`` None: the repeat)."""
    prefix = "dlopt" if tool in ("dlopt", "repeat") else tool
    return f"{prefix}-report-{key}-{'repeat' if run is None else run}.json"


def _write(path: Path, record: Any) -> None:
    path.write_text(json.dumps(to_json_data(record), indent=2, allow_nan=False) + "\n")


def _dlopt_policy(
    quick: bool,
    plan_cache: Path | None = None,
    reuse: bool = False,
    time_budget_s: float | None = None,
) -> Any:
    """The default policy (its ``auto`` time budget, plans pruned by their priors);
    ``--quick`` shortens the race. With ``plan_cache`` the decision is kept there, and
    served from it when ``reuse``; ``time_budget_s`` replaces the ``auto`` budget."""
    from dlopt.measurement import MeasurementPolicy
    from dlopt.settings.policy import OptimizationPolicy

    options: dict[str, Any] = {}
    if plan_cache is not None:
        options = {"plan_cache_dir": str(plan_cache), "reuse_cached_plan": reuse}
    if time_budget_s is not None:
        options["time_budget_s"] = time_budget_s
    if not quick:
        return OptimizationPolicy(**options)
    return OptimizationPolicy(
        measurement=MeasurementPolicy(max_rounds=4, max_time_s=10.0), **options
    )


def run_dlopt(
    key: str,
    out: Path,
    run: int | None,
    quick: bool,
    plan_cache: Path | None = None,
    tool: str = "dlopt",
) -> None:
    """One decision (``run``), or with ``run=None`` the repeat decision from ``plan_cache``;
    ``tool`` :data:`BUDGET_TOOL` decides under a time budget of :data:`BUDGET_S`."""
    import dlopt
    from dlopt.settings.workload import WorkloadCase, WorkloadProfile

    model, cases = build(key)
    workload = WorkloadProfile(
        name=key, cases=tuple(WorkloadCase(n, args=a, kwargs=k, weight=w) for n, a, k, w in cases)
    )
    budget = BUDGET_S if tool == BUDGET_TOOL else None
    policy = _dlopt_policy(quick, plan_cache, reuse=run is None, time_budget_s=budget)
    started = time.perf_counter()
    optimizer = dlopt.InferenceOptimizer("cpu", policy)
    decision = optimizer.select(model, workload)
    wall_s = time.perf_counter() - started
    report_path = out / report_file(tool, key, run)
    decision.save_report(report_path)
    decision.close()
    record = decision_from_report(report_path, wall_s)
    if run is None:
        record = attrs.evolve(record, tool="dlopt-repeat")
    elif tool != "dlopt":
        record = attrs.evolve(record, tool=tool)
    _write(out / record_file(tool, key, run), record)


def decision_from_report(report_path: Path, wall_s: float) -> DecisionRun:
    """The suite's record of one dlopt decision, read back from its saved JSON report."""
    from dlopt.evidence.report import load_report
    from dlopt.vocabulary import Status

    report = load_report(report_path)
    pick = report.candidate(report.selected_plan)
    speedup = pick.speedup_vs_eager
    measurement = report.measurement
    lifecycles = {c.name: c.lifecycle for c in report.candidates}
    costs = {
        name: (life.setup_time_s or 0.0) + (life.first_call_time_s or 0.0)
        for name, life in lifecycles.items()
        if life.setup_time_s is not None or life.first_call_time_s is not None
    }
    timing = report.decision_time
    mix = timing.operator_mix if timing is not None else None
    return DecisionRun(
        tool="dlopt",
        pick=report.selected_plan,
        oracle_name=report.selected_plan,
        wall_s=wall_s,
        measure_s=measurement.total_time_s if measurement is not None else None,
        timed_calls=measurement.timed_calls if measurement is not None else None,
        pick_speedup=(
            Interval(speedup.point, speedup.low, speedup.high) if speedup is not None else None
        ),
        stop_reason=str(measurement.stop_reason.value) if measurement is not None else None,
        valid_plans=tuple(
            c.name
            for c in report.candidates
            if c.validation.first_calls is not None and c.validation.first_calls.passed
        ),
        cache_hit=report.cache.cache_hit if report.cache is not None else None,
        build_s=math.fsum(life.setup_time_s or 0.0 for life in lifecycles.values()),
        first_calls_s=math.fsum(life.first_call_time_s or 0.0 for life in lifecycles.values()),
        plan_costs_s=costs,
        not_built={
            c.name: c.not_built or "not built"
            for c in report.candidates
            if c.not_built is not None or c.status == Status.NOT_BUILT
        },
        budget_s=timing.budget_s if timing is not None else None,
        budget_rule=timing.budget_rule if timing is not None else None,
        decision_spent_s=timing.spent_s if timing is not None else None,
        mix_kind=timing.mix_kind if timing is not None else None,
        operator_mix=(
            {
                "conv": mix.conv,
                "linear": mix.linear,
                "attention": mix.attention,
                "recurrent": mix.recurrent,
                "other": mix.other,
            }
            if mix is not None
            else {}
        ),
        operator_calls=(mix.operator_calls or None) if mix is not None else None,
        priors={
            c.name: PriorRange(c.prior.low, c.prior.high, c.prior.source)
            for c in report.candidates
            if c.prior is not None
        },
    )


def run_peer(key: str, out: Path, run: int) -> None:
    from custom_dl_optimizer import ExecutionTarget, InferenceOptimizer
    from custom_dl_optimizer import WorkloadCase as PeerCase
    from custom_dl_optimizer import WorkloadProfile as PeerProfile

    model, cases = build(key)
    workload = PeerProfile(
        name=key, cases=tuple(PeerCase(n, args=a, kwargs=k, weight=w) for n, a, k, w in cases)
    )
    started = time.perf_counter()
    optimizer = InferenceOptimizer(target=ExecutionTarget("cpu"))  # its default policy
    decision = optimizer.select(model, workload)
    wall_s = time.perf_counter() - started
    report = decision.report
    timed = sum(
        len(c.latency_samples_ms) for cand in report.candidates for c in cand.workload_cases
    )
    _write(
        out / f"peer-{key}-{run}.json",
        DecisionRun(
            tool="peer",
            pick=report.selected_plan,
            oracle_name=PEER_PLAN_IN_ORACLE.get(report.selected_plan, report.selected_plan),
            wall_s=wall_s,
            timed_calls=timed,
            valid_plans=tuple(c.name for c in report.candidates if c.parity),  # the peer's report
        ),
    )


def run_oracle(key: str, out: Path, plans_file: Path, quick: bool) -> None:
    from dlopt.platform.serialization import parse_strict_json

    from .oracle import build_all
    from .results import OraclePlan
    from .timing import OracleSettings, time_interleaved

    wanted = parse_strict_json(plans_file.read_text())
    plans = [(str(p["name"]), p.get("options")) for p in wanted["plans"]]
    # A plan no dlopt run validated (only not built) is built through its provider, which
    # validates it as a race would: one that fails is not timed.
    unvalidated = {str(p["name"]) for p in wanted["plans"] if not p.get("validated", True)}
    model, cases = build(key)
    settings = (
        OracleSettings(
            min_rounds=3, max_rounds=5, max_time_s=20.0, timed_calls=3, drop_after_rounds=1
        )
        if quick
        else OracleSettings()
    )
    built, failures, providers = build_all(
        model, cases, plans, peer_fx=bool(wanted["peer_fx"]), unvalidated=unvalidated
    )
    weights = {name: weight for name, _, _, weight in cases}
    if not built:
        providers.close()
        failed = OracleResult(failures=failures, error="the oracle could build none of the plans")
        _write(out / f"oracle-{key}.json", failed)
        return
    try:
        timing = time_interleaved(
            {n: calls for n, (_, calls) in built.items()},
            weights,
            settings,
            keep=set(wanted.get("keep", ())),
        )
    finally:
        providers.close()
    result = OracleResult(
        plans=tuple(
            OraclePlan(
                t.name,
                t.latency.median,
                t.latency.low,
                t.latency.high,
                built[t.name][0],
                t.case_median_ms,
                len(t.rounds_ms),
                t.dropped_after,
                t.left_because,
                vs_leader=t.vs_leader.median if t.vs_leader else None,
                vs_leader_low=t.vs_leader.low if t.vs_leader else None,
                vs_leader_high=t.vs_leader.high if t.vs_leader else None,
            )
            for t in timing.plans
        ),
        rounds=timing.rounds,
        time_s=timing.time_s,
        settled=timing.settled,
        stop_reason=timing.stop_reason,
        failures=failures,
    )
    _write(out / f"oracle-{key}.json", result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "mode", choices=("dlopt", BUDGET_TOOL, BUSY_TOOL, "repeat", "peer", "oracle")
    )
    parser.add_argument("--workload", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--run", type=int, default=1)
    parser.add_argument("--plans", type=Path, help="oracle: JSON file of the plans to time")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--plan-cache", type=Path, help="dlopt: keep the decision here; repeat: decide from it"
    )
    args = parser.parse_args(argv)
    if args.mode in ("dlopt", BUDGET_TOOL, BUSY_TOOL):
        run_dlopt(args.workload, args.out, args.run, args.quick, args.plan_cache, args.mode)
    elif args.mode == "repeat":
        if args.plan_cache is None:
            parser.error("repeat needs --plan-cache DIR (written by a dlopt run)")
        run_dlopt(args.workload, args.out, None, args.quick, args.plan_cache)
    elif args.mode == "peer":
        run_peer(args.workload, args.out, args.run)
    else:
        if args.plans is None:
            parser.error("oracle needs --plans FILE")
        run_oracle(args.workload, args.out, args.plans, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
