"""The fleet on a local Ray instance: one run of a small spec, started once for the module.

The spec: ``mlp`` (the ``demo_mlp`` entry point) and ``crashy`` (a tiny model raced with
a plan that segfaults when called) on two simulated machine kinds, and ``killed`` (the
same model and policy as ``mlp``, from a factory that kills its Ray worker the first
time) on one. One node advertises both kinds and one ``dlopt_race`` unit, so the
one-race-per-node rule is checked from the recorded start and end of every race on it.
On one machine both kinds have the same cache key, so the second race of a job is a
revalidated hit of the first one's record: what a serving process of that kind sees.
Waits are bounded (the run's own time limit).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the fleet extra is not installed (dlopt-core[fleet])")

import fleet_models  # noqa: E402

from dlopt.cache.record_store import PlanCache  # noqa: E402
from dlopt.cli import main  # noqa: E402
from dlopt.fleet.result_store import ResultStore  # noqa: E402
from dlopt.fleet.runner import run_fleet  # noqa: E402
from dlopt.fleet.spec import load_spec  # noqa: E402

QUICK_POLICY = """
[jobs.policy]
include = [{plans}]
build_timeout_s = 60.0
call_timeout_floor_s = 5.0
probe_timeout_s = 10.0
exhaustive = true
measurement = {{ max_time_s = 1.0, seed = 3 }}
"""

SPEC = """
name = "qual"
store = "{store}"

[kinds.kind_a]
resources = {{ sim_kind_a = 1 }}
[kinds.kind_b]
resources = {{ sim_kind_b = 1 }}

[[jobs]]
name = "mlp"
model = "demo_mlp"
kinds = ["kind_a", "kind_b"]
{mlp_policy}

[[jobs]]
name = "crashy"
model = "fleet_models:tiny"
providers = ["faulty_plans:FastPlan", "faulty_plans:SegfaultsWhenCalled"]
kinds = ["kind_a", "kind_b"]
{crashy_policy}

[[jobs]]
name = "killed"
model = "fleet_models:killed_once"
kinds = ["kind_b"]
{mlp_policy}
"""


def write_spec(folder: Path, store: str) -> Path:
    path = folder / "fleet.toml"
    path.write_text(
        SPEC.format(
            store=store,
            mlp_policy=QUICK_POLICY.format(plans='"eager_fp32", "native_channels_last"'),
            crashy_policy=QUICK_POLICY.format(
                plans='"eager_fp32", "fast", "segfaults_when_called"'
            ),
        )
    )
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The spec run once on a local Ray instance: ``(spec path, spec, outcome, lines)``."""
    folder = tmp_path_factory.mktemp("fleet")
    marker = folder / "killed-once"
    os.environ[fleet_models.KILL_MARKER_ENV] = str(marker)  # Ray's workers inherit it
    spec_path = write_spec(folder, str(folder / "store"))
    spec, jobs = load_spec(spec_path, allow_imports=True)
    lines: list[str] = []
    try:
        outcome = run_fleet(
            spec, jobs, address="local", allow_imports=True, timeout_s=240, echo=lines.append
        )
        yield spec_path, spec, outcome, lines, marker
    finally:
        ray.shutdown()
        os.environ.pop(fleet_models.KILL_MARKER_ENV, None)


def results_by_pair(outcome):
    return {(r.job, r.kind): r for r in outcome.results}


def test_every_job_and_kind_runs_to_a_decision(fleet):
    _, spec, outcome, lines, _ = fleet
    assert outcome.cancelled == () and not outcome.interrupted
    results = results_by_pair(outcome)
    assert set(results) == {(job.name, kind) for job, kind in spec.pairs()}
    assert all(r.status == "done" for r in results.values()), [r.error for r in outcome.results]
    # A progress line per race, as each finished.
    assert [line.split("]")[0] for line in lines if line.startswith("[")] == [
        f"[{n}/5" for n in range(1, 6)
    ]
    # On one machine every kind has the same key: one job, one record, one race.
    for job in ("mlp", "crashy"):
        first, second = (results[(job, kind)] for kind in ("kind_a", "kind_b"))
        assert first.key == second.key
        assert sorted([first.cache_hit, second.cache_hit]) == [False, True]
    assert results[("killed", "kind_b")].key == results[("mlp", "kind_a")].key


def test_races_never_overlap_on_a_node(fleet):
    _, _, outcome, _, _ = fleet
    by_node: dict[str, list] = {}
    for result in outcome.results:
        assert result.node_id
        by_node.setdefault(result.node_id, []).append(result)
    for races in by_node.values():
        races.sort(key=lambda r: r.started_at)
        for earlier, later in itertools.pairwise(races):
            assert earlier.ended_at <= later.started_at, (earlier, later)


def test_a_killed_ray_worker_is_retried(fleet):
    _, _, outcome, lines, marker = fleet
    killed = results_by_pair(outcome)[("killed", "kind_b")]
    # The first attempt's process wrote the marker and died; Ray's retry decided.
    assert marker.exists()
    assert killed.status == "done" and killed.attempt == 2
    assert killed.pid != int(marker.read_text())
    assert any("killed@kind_b" in line and "(attempt 2: Ray retried it)" in line for line in lines)


def test_a_provider_crash_is_evidence_not_a_retry(fleet):
    _, spec, outcome, _, _ = fleet
    store = ResultStore.open(spec.store)
    crashy = [r for r in outcome.results if r.job == "crashy"]
    raced = next(r for r in crashy if not r.cache_hit)
    # Ray started the task once; the supervisor inside it named the culprit and resumed.
    assert [r.attempt for r in crashy] == [1, 1]
    assert {f.plan: f.fault for f in raced.failures} == {
        "segfaults_when_called": "crashed at measure (SIGSEGV)"
    }
    report = store.read_report(spec.name, "crashy", raced.kind)
    assert report is not None and report.isolation is not None
    assert report.isolation.crashed == ("segfaults_when_called",)
    assert report.isolation.workers == 2
    # The record is keyed by the plan set the job asked for, culprit included: a serving
    # process with the job's policy finds it (the other kind did) and never runs the culprit.
    record = PlanCache(spec.store).lookup(raced.key)
    assert record is not None
    assert [p["name"] for p in record.ingredients["plans"]] == [
        "eager_fp32",
        "fast",
        "segfaults_when_called",
    ]


def test_status_and_report_show_one_table(fleet, tmp_path, capsys):
    spec_path, _, _, _, _ = fleet
    assert main(["fleet", "status", str(spec_path), "--plain"]) == 0
    shown = capsys.readouterr().out
    assert "segfaults_when_called: crashed at measure (SIGSEGV)" in shown
    assert "5 of 5 races decided" in shown
    html, csv_path, export = tmp_path / "f.html", tmp_path / "f.csv", tmp_path / "export"
    code = main(
        [
            "fleet",
            "report",
            str(spec_path),
            "--plain",
            "--html",
            str(html),
            "--csv",
            str(csv_path),
            "--export",
            str(export),
        ]
    )
    assert code == 0
    rows = csv_path.read_text().splitlines()
    assert rows[0].startswith("job,machine kind,status,selected plan,speedup vs eager")
    assert len(rows) == 6 and any(r.startswith("crashy,kind_a,done,") for r in rows)
    page = html.read_text()
    assert "crashy@kind_b" in page and "<script" not in page
    # The export's table has a column per job@kind.
    assert "killed@kind\\_b" in (export / "table.tex").read_text()


FRESH_PROCESS = """
import json, sys
from dlopt import InferenceOptimizer
from dlopt.cli.demo import demo_mlp
from dlopt.fleet.spec import read_policy
import attrs

policy = attrs.evolve(read_policy(json.loads(sys.argv[1])), plan_cache_dir=sys.argv[2])
model, workload = demo_mlp()
with InferenceOptimizer("cpu", policy).select(model, workload) as decision:
    cache = decision.report.cache
    print(json.dumps({"hit": cache.cache_hit, "key": cache.key,
                      "revalidation_s": cache.revalidation_time_s,
                      "plan": decision.selected_plan}))
"""


def test_a_fresh_serving_process_reuses_the_record_after_revalidation(fleet):
    _, spec, outcome, _, _ = fleet
    raced = results_by_pair(outcome)[("mlp", "kind_a")]
    policy = json.dumps(spec.job("mlp").policy)
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, policy, spec.store],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    served = json.loads(done.stdout.strip().splitlines()[-1])
    assert served["key"] == raced.key
    assert served["hit"] is True and served["revalidation_s"] is not None
    assert served["plan"] == raced.selected_plan
