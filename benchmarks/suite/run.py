"""The benchmark suite: dlopt vs the peer vs an oracle, one command.

    python3 -m nox -s bench-suite                              # every workload, 3 runs each
    python3 -m nox -s bench-suite -- --models mlp bert         # some workloads
    python3 -m nox -s bench-suite -- --quick --models mlp      # a smoke run (numbers: none)

Per workload: ``--repeats`` fresh processes of dlopt (default policy: its ``auto`` time
budget, plans pruned by their priors) alternating with as many of the peer
(custom-dl-optimizer 3.0.0, its default policy), each under a timeout; a repeat decision
from the plan cache; ``--budget-runs`` more dlopt decisions under
``OptimizationPolicy(time_budget_s=20.0)``; then one oracle process that times every plan
a dlopt run validated or did not build (and the peer's own pick) in interleaved rounds
until the ranking is settled. Before the workloads, ``python3 -m nox -s demo -R`` is timed
in a fresh process (``--skip-demo``: not). Targets are printed as met, not met or not
measured. Writes ``results.md``, ``results.json`` and ``results.svg`` into ``--output-dir``
(docs/benchmarks/; a ``--quick`` run writes to artifacts/bench-suite-quick/ unless told
otherwise, so smoke numbers never land in the docs), and the raw reports into
artifacts/bench-suite/runs/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .models import WORKLOADS
from .results import (
    BUDGET_TOOL,
    BUSY_PROCESSES,
    BUSY_TOOL,
    BUSY_WORKLOADS,
    CONVERTER,
    DecisionRun,
    DemoTiming,
    ModelResult,
    ModelSummary,
    OracleResult,
    TargetOutcome,
    evaluate_targets,
    markdown,
    mix_kind_of,
    model_result_from_json,
    summarize,
    to_json_data,
    verdict,
)
from .worker import record_file, report_file

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "benchmarks"
RAW = REPO / "artifacts" / "bench-suite" / "runs"
QUICK_OUTPUT = REPO / "artifacts" / "bench-suite-quick"


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-600:] or "no output"


def run_worker(args: list[str], timeout_s: float) -> str | None:
    """Run ``python -m benchmarks.suite.worker ARGS``; its error or None."""
    return run_command([sys.executable, "-m", "benchmarks.suite.worker", *args], timeout_s)


def run_command(
    command: list[str], timeout_s: float, env: dict[str, str] | None = None
) -> str | None:
    """Run ``command`` in the repository, in a fresh process group (in ``env`` when
    given); the error (exit status or timeout, with the end of stderr) or None."""
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its compile workers go with it on a timeout
        env=env,
    )
    try:
        _, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return f"timed out after {timeout_s:.0f} s"
    except BaseException:
        # The suite itself is stopped (Ctrl-C, SIGTERM): its worker's group goes too.
        os.killpg(process.pid, signal.SIGKILL)
        raise
    if process.returncode != 0:
        return f"exit {process.returncode}: {_tail(stderr)}"
    return None


def _read(path: Path) -> Any:
    from dlopt.platform.serialization import parse_strict_json

    return parse_strict_json(path.read_text())


def decision_run(
    tool: str,
    key: str,
    run: int | None,
    raw: Path,
    quick: bool,
    timeout_s: float,
    plan_cache: Path | None = None,
) -> DecisionRun:
    """One decision in a fresh process, as a record (its error if it failed).

    ``tool`` "repeat" (``run`` None) is dlopt deciding from ``plan_cache``; a dlopt run
    given ``plan_cache`` keeps its decision there; ``BUDGET_TOOL`` is dlopt deciding with
    a 20 s time budget."""
    args = [tool, "--workload", key, "--out", str(raw)]
    args += ["--run", str(run)] if run is not None else []
    args += ["--plan-cache", str(plan_cache)] if plan_cache is not None else []
    record = raw / record_file(tool, key, run)
    record.unlink(missing_ok=True)  # a record from an earlier suite run is not this run's
    error = run_worker([*args, "--quick"] if quick and tool != "peer" else args, timeout_s)
    if error is not None or not record.is_file():
        return DecisionRun(tool=tool, error=error or "the worker wrote no record")
    return CONVERTER.structure(_read(record), DecisionRun)


#: How long the busy processes spin before the busy decision starts (the scheduler has
#: them running; the 1-minute load average has not caught up, which the report's own
#: measure of other processes' work does not need).
BUSY_LEAD_S = 2.0


def busy_decision(key: str, raw: Path, quick: bool, timeout_s: float) -> DecisionRun:
    """dlopt's default decision on ``key`` in a fresh process while
    :data:`BUSY_PROCESSES` processes spin on the CPUs (each in its own session, ended
    when the decision is over)."""
    spinners = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(BUSY_PROCESSES)
    ]
    try:
        time.sleep(BUSY_LEAD_S)
        return decision_run(BUSY_TOOL, key, 1, raw, quick, timeout_s)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def oracle_plans(
    key: str, runs: list[tuple[str, int, DecisionRun]], raw: Path
) -> list[dict[str, Any]]:
    """Every plan any dlopt run (``(tool, run number, record)``) validated or did not build
    (pruned by its prior, or no time left), with the options it was raced or planned with
    and whether a run validated it: the oracle must not shrink with pruning, or regret
    would be judged against fewer plans than dlopt could have built."""
    options: dict[str, Any] = {}
    validated: dict[str, bool] = {}
    for tool, number, run in runs:
        if run.error is not None:
            continue
        report = _read(raw / report_file(tool, key, number))
        by_name = {c["name"]: c for c in report["candidates"]}
        for name in (*run.valid_plans, *run.not_built):
            options.setdefault(name, by_name.get(name, {}).get("options"))
            validated[name] = validated.get(name, False) or name in run.valid_plans
    return [
        {"name": name, "options": value, "validated": validated[name]}
        for name, value in options.items()
    ]


def run_model(
    key: str,
    repeats: int,
    raw: Path,
    quick: bool,
    timeout_s: float,
    oracle_timeout_s: float,
    budget_runs: int = 1,
    busy: bool = False,
) -> ModelResult:
    title = WORKLOADS[key][0]
    dlopt_runs: list[DecisionRun] = []
    peer_runs: list[DecisionRun] = []
    budget: list[DecisionRun] = []
    # dlopt's last run keeps its decision in a plan cache of its own; the repeat decides from it.
    plan_cache = raw / f"plan-cache-{key}"
    shutil.rmtree(plan_cache, ignore_errors=True)
    for run in range(1, repeats + 1):
        # Alternating tools spreads slow drift of the machine over both.
        for tool, runs in (("dlopt", dlopt_runs), ("peer", peer_runs)):
            keep = plan_cache if tool == "dlopt" and run == repeats else None
            record = decision_run(tool, key, run, raw, quick, timeout_s, keep)
            runs.append(record)
            _say(key, f"{tool} run {run}/{repeats}", record)
    repeat = decision_run("repeat", key, None, raw, quick, timeout_s, plan_cache)
    _say(key, "dlopt repeat from the plan cache", repeat)
    for run in range(1, budget_runs + 1):
        record = decision_run(BUDGET_TOOL, key, run, raw, quick, timeout_s)
        budget.append(record)
        _say(key, f"dlopt --time-budget 20 run {run}/{budget_runs}", record)
    busy_runs = [busy_decision(key, raw, quick, timeout_s)] if busy else []
    for record in busy_runs:
        _say(key, f"dlopt beside {BUSY_PROCESSES} busy processes", record)
    mix = mix_kind_of([*dlopt_runs, *budget])
    if all(r.error for r in (*dlopt_runs, *budget)):
        return ModelResult(
            key,
            title,
            dlopt_runs,
            peer_runs,
            None,
            repeat,
            "every dlopt run failed",
            budget,
            mix,
            busy_runs,
        )
    labelled = [("dlopt", n, r) for n, r in enumerate(dlopt_runs, start=1)]
    labelled += [(BUDGET_TOOL, n, r) for n, r in enumerate(budget, start=1)]
    labelled += [(BUSY_TOOL, n, r) for n, r in enumerate(busy_runs, start=1)]
    plans = oracle_plans(key, labelled, raw)
    peer_fx = any(r.oracle_name == "peer_fx" for r in peer_runs)
    # The picks (and eager fp32, for the speedup) are timed every round: their regret is wanted.
    decided = (*dlopt_runs, *budget, *busy_runs, *peer_runs)
    picks = {r.oracle_name for r in decided if r.oracle_name} | {"eager_fp32"}
    plans_file = raw / f"oracle-plans-{key}.json"
    wanted = {"plans": plans, "peer_fx": peer_fx, "keep": sorted(picks)}
    plans_file.write_text(json.dumps(wanted, allow_nan=False))
    args = ["oracle", "--workload", key, "--out", str(raw), "--plans", str(plans_file)]
    oracle_file = raw / f"oracle-{key}.json"
    oracle_file.unlink(missing_ok=True)
    error = run_worker([*args, "--quick"] if quick else args, oracle_timeout_s)
    if error is None and oracle_file.is_file():
        oracle = CONVERTER.structure(_read(oracle_file), OracleResult)
        for name, why in oracle.failures.items():
            print(f"  {key}: oracle could not time {name}: {why}", flush=True)
        print(
            f"  {key}: oracle {oracle.rounds} rounds, {oracle.time_s:.0f} s, "
            f"{'settled' if oracle.settled else oracle.stop_reason}",
            flush=True,
        )
    else:
        oracle = OracleResult(error=f"oracle: {error or 'no record written'}")
        print(f"  {key}: {oracle.error}", flush=True)
    return ModelResult(
        key, title, dlopt_runs, peer_runs, oracle, repeat, None, budget, mix, busy_runs
    )


def _say(key: str, what: str, record: DecisionRun) -> None:
    outcome = record.error or (
        f"{record.wall_s:.1f} s, pick {record.pick}" if record.wall_s else record.pick
    )
    if record.cache_hit is not None:
        outcome = f"{outcome} ({'plan cache hit' if record.cache_hit else 'no plan cache hit'})"
    if record.error is None and record.mix_kind is not None:
        outcome = f"{outcome}; {len(record.not_built)} plan(s) not built"
    print(f"  {key}: {what}: {outcome}", flush=True)


#: The suite's own variables, which a user's ``nox -s demo`` would not have.
_SUITE_ONLY = ("TORCHINDUCTOR_CACHE_DIR", "VIRTUAL_ENV", "NOX_CURRENT_SESSION")
DEMO_COMMAND = ["python3", "-m", "nox", "-s", "demo", "-R"]
DEMO_TIMEOUT_S = 600.0


def user_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a user's shell would have: without the suite's compiler caches
    and without the bench-suite virtual environment (its ``python3`` has no nox)."""
    env = dict(os.environ if environ is None else environ)
    venvs = {str(Path(p) / "bin") for p in (env.get("VIRTUAL_ENV"), sys.prefix) if p}
    if sys.prefix == sys.base_prefix:
        venvs.discard(str(Path(sys.prefix) / "bin"))  # not a virtual environment
    if env.get("PATH"):
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p not in venvs)
    for name in _SUITE_ONLY:
        env.pop(name, None)
    return env


def demo_wall_s(repo: Path = REPO, timeout_s: float = DEMO_TIMEOUT_S) -> DemoTiming:
    """``python3 -m nox -s demo -R`` from the repository root, timed in a fresh process
    (its virtual environment reused, nothing installed), as a user would run it."""
    if not (repo / ".nox" / "demo").is_dir():
        return DemoTiming(None, "not measured: run python3 -m nox -s demo once first")
    started = time.perf_counter()
    error = run_command(DEMO_COMMAND, timeout_s, env=user_environment())
    wall_s = time.perf_counter() - started
    if error is not None:
        return DemoTiming(None, f"not measured: `{' '.join(DEMO_COMMAND)}` failed: {error}")
    return DemoTiming(wall_s, None)


def _num_s(value: float | None) -> str:
    return "" if value is None else f"{value:.1f} s"


def fresh_compiler_caches(root: Path) -> dict[str, str]:
    """Empty the suite's own compiler cache folder and return the environment that points
    every worker at it: each suite run starts cold, as on a fresh machine, whatever
    earlier runs left in torch's default cache (``/tmp/torchinductor_<user>``)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor")}


def environment(
    command: str,
    repeats: int,
    quick: bool,
    budget_runs: int = 1,
    busy_models: tuple[str, ...] = (),
) -> dict[str, Any]:
    import torch

    import dlopt
    from dlopt.platform.machine import cpu_model_and_flags

    from .._common import git_commit, load_average

    try:
        from importlib.metadata import version

        peer = version("custom-dl-optimizer")
    except Exception:
        peer = "not installed"
    model, flags = cpu_model_and_flags()
    return {
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "isa_flags": list(flags),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "dlopt": dlopt.__version__,
        "commit": git_commit(),
        "peer": peer,
        "python": platform.python_version(),
        "load_before": load_average(),
        "command": command,
        "repeats": repeats,
        "budget_runs": budget_runs,
        "busy_models": list(busy_models),
        "quick": quick,
    }


def chart(summaries: list[ModelSummary], path: Path, note: str = "") -> Path | None:
    """Time to a decision, regret and the pick's speedup per workload, dlopt vs the peer.
    A figure that is unknown (a failed run) draws no bar."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    import math
    import statistics

    def known(value: float | None) -> float:
        return math.nan if value is None else value

    def median_pct(values: tuple[float | None, ...]) -> float:
        made = [v for v in values if v is not None]
        return statistics.median(made) * 100 if made else math.nan

    names = [s.key for s in summaries]
    x = list(range(len(names)))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    width = 0.4
    panels = [
        (
            "time to a decision (s, median of runs)",
            [known(s.dlopt_wall_s) for s in summaries],
            [known(s.peer_wall_s) for s in summaries],
        ),
        (
            "regret vs the oracle's best (%, median of runs)",
            [median_pct(s.dlopt_regrets) for s in summaries],
            [median_pct(s.peer_regrets) for s in summaries],
        ),
    ]
    for ax, (title, ours, theirs) in zip(axes, panels):
        ax.bar([i - width / 2 for i in x], ours, width, label="dlopt")
        ax.bar([i + width / 2 for i in x], theirs, width, label="peer")
        ax.set_title(title)
        ax.legend()
    speedups = [known(s.pick_speedup_vs_eager) for s in summaries]
    axes[2].bar(x, speedups, 0.6, color="tab:green")
    axes[2].axhline(1.0, color="grey", linewidth=0.8)
    axes[2].set_title("dlopt pick's speedup over eager fp32 (oracle)")
    for ax in axes:
        ax.set_xticks(x, names, rotation=45, ha="right")
    if note:
        fig.suptitle(note, color="tab:red")
    fig.tight_layout()
    fig.savefig(path)  # the format follows the suffix (.svg here)
    plt.close(fig)
    return path


def write_outputs(
    output: Path,
    env: dict[str, Any],
    results: list[ModelResult],
    summaries: list[ModelSummary],
    targets: list[TargetOutcome],
) -> list[Path]:
    output.mkdir(parents=True, exist_ok=True)
    data = {
        "environment": env,
        "targets": to_json_data(targets),
        "summaries": to_json_data(summaries),
        "results": to_json_data(results),
    }
    written = [output / "results.json", output / "results.md"]
    written[0].write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    oracles = {r.key: r.oracle for r in results}
    written[1].write_text(markdown(summaries, targets, env, oracles))
    note = "quick mode: a smoke run, the numbers mean nothing" if env.get("quick") else ""
    svg = chart(summaries, output / "results.svg", note)
    if svg is not None:
        written.append(svg)
    return written


def rerender(results_json: Path, output: Path) -> int:
    """Regret, targets and tables computed again from ``results_json``'s records."""
    from .._common import git_commit

    try:
        data = json.loads(results_json.read_text())
        env = dict(data["environment"])
        results = [model_result_from_json(item) for item in data["results"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cannot rerender {results_json}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    env["rendered_at_commit"] = git_commit()
    summaries = [summarize(r) for r in results]
    targets = evaluate_targets(summaries, recorded_demo(env))
    for path in write_outputs(output, env, results, summaries, targets):
        print(f"wrote {path}")
    return 0


def recorded_demo(env: dict[str, Any]) -> DemoTiming | None:
    """The demo's timing as a results file recorded it (None: none recorded)."""
    demo = env.get("demo")
    return CONVERTER.structure(demo, DemoTiming) if isinstance(demo, dict) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.suite", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(WORKLOADS),
        metavar="NAME",
        help=f"workloads to run, of: {', '.join(WORKLOADS)} (default: all)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="fresh processes per tool and workload (default 3; --quick: 1)",
    )
    parser.add_argument(
        "--budget-runs",
        type=int,
        default=1,
        help="dlopt decisions per workload with time_budget_s=20 (--time-budget 20), "
        "besides the default runs (default 1)",
    )
    parser.add_argument(
        "--busy-models",
        nargs="*",
        default=list(BUSY_WORKLOADS),
        metavar="NAME",
        help=f"workloads that get one more default decision with {BUSY_PROCESSES} CPU-bound "
        f"processes beside it (default: {' '.join(BUSY_WORKLOADS)}; none: no busy pass)",
    )
    parser.add_argument(
        "--skip-demo",
        action="store_true",
        help="do not time `python3 -m nox -s demo -R` (its target is then not measured)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: short races, a short oracle, 1 process; numbers mean nothing",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where results.md/.json/.svg go (default docs/benchmarks/; "
        "--quick: artifacts/bench-suite-quick/)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds one dlopt or peer run may take (default 900)",
    )
    parser.add_argument(
        "--oracle-timeout",
        type=float,
        default=1200.0,
        help="seconds one workload's oracle may take (default 1200)",
    )
    parser.add_argument(
        "--rerender",
        type=Path,
        default=None,
        metavar="RESULTS_JSON",
        help="measure nothing: compute the tables again from a results.json's records "
        "(after a change to the arithmetic) and write them to --output-dir",
    )
    args = parser.parse_args(argv)
    if args.rerender is not None:
        return rerender(args.rerender, args.output_dir or args.rerender.parent)
    unknown = [m for m in (*args.models, *args.busy_models) if m not in WORKLOADS]
    if unknown:
        parser.error(
            f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}"
        )
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.budget_runs < 0:
        parser.error("--budget-runs must be at least 0")
    # SIGTERM (a timeout around the suite) unwinds like Ctrl-C, so no worker is left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    output = args.output_dir or (QUICK_OUTPUT if args.quick else DOCS)
    raw = RAW if not args.quick else QUICK_OUTPUT / "runs"
    raw.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks.suite " + " ".join(argv if argv is not None else sys.argv[1:])
    compiler_caches = fresh_compiler_caches(raw.parent / "compiler-caches")
    os.environ.update(compiler_caches)  # the workers inherit it
    env = environment(
        command.strip(), repeats, args.quick, args.budget_runs, tuple(args.busy_models)
    )
    env["compiler_caches"] = f"empty at the start: {compiler_caches}"
    print(f"CPU {env['cpu_model']}, ISA {', '.join(env['isa_flags'])}; load {env['load_before']}")
    started = time.perf_counter()
    demo = DemoTiming(None, "not measured: --skip-demo") if args.skip_demo else demo_wall_s()
    env["demo"] = to_json_data(demo)
    print(f"demo: {_num_s(demo.wall_s)}{demo.note or ''}", flush=True)
    results = []
    for key in args.models:
        print(f"{key}: {WORKLOADS[key][0]}", flush=True)
        try:
            result = run_model(
                key,
                repeats,
                raw,
                args.quick,
                args.timeout,
                args.oracle_timeout,
                args.budget_runs,
                busy=key in args.busy_models,
            )
        except Exception as exc:  # a broken record fails its workload, not the suite
            result = ModelResult(key, WORKLOADS[key][0], error=f"{type(exc).__name__}: {exc}")
            print(f"  {key}: failed: {result.error}", flush=True)
        results.append(result)
    from .._common import load_average

    env["load_after"] = load_average()
    env["suite_time_s"] = time.perf_counter() - started
    summaries = [summarize(r) for r in results]
    targets = evaluate_targets(summaries, demo)
    for target in targets:
        said = "NOT met" if target.met is False else verdict(target.met)
        print(f"target: {target.name}: {said} ({target.detail})")
    for path in write_outputs(output, env, results, summaries, targets):
        print(f"wrote {path}")
    print(f"raw reports in {raw}")
    return 0
