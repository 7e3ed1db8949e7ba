"""The command's robustness: timeouts, failed workers and bad flags."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from benchmarks.suite import run
from benchmarks.suite.results import DecisionRun


def test_a_command_over_its_timeout_is_killed_and_reported():
    started = time.perf_counter()
    error = run.run_command([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=1)
    assert error == "timed out after 1 s"
    assert time.perf_counter() - started < 30


def test_a_failed_command_reports_its_status_and_the_end_of_stderr():
    code = (
        "import sys; print('first', file=sys.stderr); print('boom', file=sys.stderr); sys.exit(3)"
    )
    error = run.run_command([sys.executable, "-c", code], timeout_s=60)
    assert error is not None and error.startswith("exit 3:") and "boom" in error
    assert run.run_command([sys.executable, "-c", "pass"], timeout_s=60) is None


def test_a_failed_worker_is_a_recorded_error(tmp_path):
    record = run.decision_run("dlopt", "no_such_workload", 1, tmp_path, False, timeout_s=120)
    assert record.pick is None and record.error is not None
    assert "unknown workload 'no_such_workload'" in record.error


def test_a_workload_whose_runs_all_fail_is_reported_and_no_oracle_runs(tmp_path, monkeypatch):
    calls = []

    def failing(tool, key, number, raw, quick, timeout_s, plan_cache=None):
        calls.append((tool, number, plan_cache.name if plan_cache is not None else None))
        return DecisionRun(tool=tool, error="exit 1: ModuleNotFoundError: No module named 'x'")

    def no_oracle(*args, **kwargs):
        raise AssertionError("the oracle must not run without a dlopt decision")

    monkeypatch.setattr(run, "decision_run", failing)
    monkeypatch.setattr(run, "run_worker", no_oracle)
    result = run.run_model("mlp", 2, tmp_path, quick=True, timeout_s=1, oracle_timeout_s=1)
    assert result.error == "every dlopt run failed" and result.oracle is None
    # Both tools ran every repeat, alternating; dlopt's last run kept its decision in the
    # workload's plan cache, and the repeat decided from it; then the budget run.
    cache = "plan-cache-mlp"
    assert calls == [
        ("dlopt", 1, None),
        ("peer", 1, None),
        ("dlopt", 2, cache),
        ("peer", 2, None),
        ("repeat", None, cache),
        ("dlopt-budget20", 1, None),
    ]
    assert result.repeat is not None and result.repeat.error is not None
    assert len(result.budget) == 1 and result.budget[0].error is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "resnet5"], "unknown workload(s) resnet5; choose from"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--budget-runs", "-1"], "--budget-runs must be at least 0"),
    ],
)
def test_bad_flags_are_refused_with_what_to_do(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_chart_draws_with_a_failed_workload(tmp_path):
    pytest.importorskip("matplotlib")
    from benchmarks.suite.results import ModelResult, OraclePlan, OracleResult, summarize

    ok = ModelResult(
        "mlp",
        "MLP",
        dlopt=(DecisionRun("dlopt", "fx", "fx", wall_s=3.0, valid_plans=("eager_fp32", "fx")),),
        peer=(DecisionRun("peer", "native", "eager_fp32", wall_s=2.0),),
        oracle=OracleResult(
            plans=(
                OraclePlan("eager_fp32", 2.0, 1.9, 2.1, "independent"),
                OraclePlan("fx", 1.0, 0.9, 1.1, "provider"),
            )
        ),
    )
    failed = ModelResult("resnet50", "resnet50", error="every dlopt run failed")
    path = run.chart([summarize(ok), summarize(failed)], tmp_path / "chart.svg", "quick")
    text = path.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text


def test_a_stopped_suite_takes_its_worker_with_it(monkeypatch, tmp_path):
    marker = tmp_path / "still-running"
    code = f"import time, pathlib; time.sleep(3); pathlib.Path({str(marker)!r}).touch()"
    real_popen = run.subprocess.Popen

    class Interrupting(real_popen):
        def communicate(self, *args, **kwargs):
            if kwargs.get("timeout") is not None:
                raise KeyboardInterrupt
            return super().communicate(*args, **kwargs)

    monkeypatch.setattr(run.subprocess, "Popen", Interrupting)
    with pytest.raises(KeyboardInterrupt):
        run.run_command([sys.executable, "-c", code], timeout_s=60)
    time.sleep(5)
    assert not marker.exists()  # killed before it could write


def test_rerender_computes_the_tables_again_from_the_records(tmp_path, capsys):
    import json

    from benchmarks.suite.results import ModelResult, OraclePlan, OracleResult, to_json_data

    # Recorded when regret came from the medians (11% apart); the paired ratio says 1.6%.
    result = ModelResult(
        "m",
        "M",
        dlopt=(DecisionRun("dlopt", "b", "b", wall_s=3.0, valid_plans=("a", "b")),),
        oracle=OracleResult(
            plans=(
                OraclePlan("a", 32.4, 31.3, 39.8, "provider", {}, 17),
                OraclePlan("b", 36.0, 31.9, 40.6, "provider", {}, 17, None, None, 1.016, 1.0, 1.04),
            ),
            rounds=17,
            settled=True,
        ),
    )
    source = tmp_path / "results.json"
    data = {"environment": {"commit": "abc1234"}, "results": to_json_data([result])}
    source.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert run.main(["--rerender", str(source), "--output-dir", str(out)]) == 0
    page = (out / "results.md").read_text()
    assert "measured at commit abc1234; tables computed again" in page
    assert "| 1.6% |" in page
    written = json.loads((out / "results.json").read_text())
    assert written["summaries"][0]["dlopt_regrets"] == [pytest.approx(0.016)]
    # A file that is not a suite's results is refused with a line, not a traceback.
    (tmp_path / "bad.json").write_text("{}")
    assert run.main(["--rerender", str(tmp_path / "bad.json")]) == 2
    assert "cannot rerender" in capsys.readouterr().err


def test_every_suite_run_starts_with_empty_compiler_caches(tmp_path):
    root = tmp_path / "compiler-caches"
    (root / "inductor" / "fxgraph").mkdir(parents=True)
    (root / "inductor" / "fxgraph" / "left-by-an-earlier-run").write_text("x")
    env = run.fresh_compiler_caches(root)
    assert env == {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor")}
    assert root.is_dir() and not any(root.iterdir())


# -- decision time (issue 39) ------------------------------------------------------------
PRUNED = "its prior is at most 1.30x (table: avx2, linear models, 1 workload(s)), and ..."
LATE = "no time left: its build and first calls are expected to take 12.0 s ..."


def _report(raw, name, candidates):
    import json

    rows = [{"name": n, "status": status, "options": options} for n, status, options in candidates]
    (raw / name).write_text(json.dumps({"candidates": rows}))


def test_the_oracle_times_every_plan_a_dlopt_run_validated_or_did_not_build(tmp_path):
    """Pruning must not shrink the oracle: a plan not built in one run is timed too, with
    its recorded options, and built through its provider when no run validated it."""
    from benchmarks.suite.results import BUDGET_TOOL

    _report(
        tmp_path,
        "dlopt-report-mlp-1.json",
        [
            ("eager_fp32", "selected", None),
            ("inductor", "rejected", {"mode": "default"}),
            ("onnxruntime_cpu", "not_built", {"opt_level": 99}),
        ],
    )
    _report(
        tmp_path,
        "dlopt-budget20-report-mlp-1.json",
        [
            ("eager_fp32", "rejected", None),
            ("onnxruntime_cpu", "selected", {"opt_level": 99}),
            ("openvino_cpu", "not_built", {"hint": "latency"}),
        ],
    )
    first = DecisionRun(
        "dlopt",
        "inductor",
        "inductor",
        valid_plans=("eager_fp32", "inductor"),
        not_built={"onnxruntime_cpu": PRUNED},
    )
    budget = DecisionRun(
        BUDGET_TOOL,
        "onnxruntime_cpu",
        "onnxruntime_cpu",
        valid_plans=("eager_fp32", "onnxruntime_cpu"),
        not_built={"openvino_cpu": LATE},
    )
    failed = DecisionRun("dlopt", error="timed out")  # its report is not read
    plans = run.oracle_plans(
        "mlp", [("dlopt", 1, first), ("dlopt", 2, failed), (BUDGET_TOOL, 1, budget)], tmp_path
    )
    assert plans == [
        {"name": "eager_fp32", "options": None, "validated": True},
        {"name": "inductor", "options": {"mode": "default"}, "validated": True},
        # Not built in run 1, validated by the budget run: built independently.
        {"name": "onnxruntime_cpu", "options": {"opt_level": 99}, "validated": True},
        # Not built by any run: the oracle builds it through its provider, validated.
        {"name": "openvino_cpu", "options": {"hint": "latency"}, "validated": False},
    ]


def test_a_workload_times_its_budget_runs_picks_and_plans_not_built(tmp_path, monkeypatch):
    import json

    from benchmarks.suite.results import BUDGET_TOOL, OracleResult, to_json_data

    def deciding(tool, key, number, raw, quick, timeout_s, plan_cache=None):
        if tool == "peer":
            return DecisionRun("peer", "native", "eager_fp32", wall_s=2.0)
        if tool == "repeat":
            return DecisionRun("dlopt-repeat", "inductor", "inductor", wall_s=0.5, cache_hit=True)
        pick = "fx" if tool == BUDGET_TOOL else "inductor"
        name = f"{'dlopt' if tool == 'dlopt' else tool}-report-{key}-{number}.json"
        _report(raw, name, [("eager_fp32", "rejected", None), (pick, "selected", None)])
        return DecisionRun(
            tool,
            pick,
            pick,
            wall_s=10.0,
            valid_plans=("eager_fp32", pick),
            not_built={"onnxruntime_cpu": PRUNED},
            mix_kind="linear",
        )

    wanted = {}

    def oracle(args, timeout_s):
        plans_file = args[args.index("--plans") + 1]
        wanted.update(json.loads(Path(plans_file).read_text()))
        out = tmp_path / "oracle-mlp.json"
        out.write_text(json.dumps(to_json_data(OracleResult(rounds=3, time_s=1.0))))
        return None

    monkeypatch.setattr(run, "decision_run", deciding)
    monkeypatch.setattr(run, "run_worker", oracle)
    result = run.run_model("mlp", 2, tmp_path, quick=True, timeout_s=1, oracle_timeout_s=1)
    assert [r.pick for r in result.budget] == ["fx"]
    assert result.operator_mix == "linear"
    names = {p["name"]: p["validated"] for p in wanted["plans"]}
    assert names == {"eager_fp32": True, "inductor": True, "onnxruntime_cpu": False, "fx": True}
    assert wanted["keep"] == ["eager_fp32", "fx", "inductor"]  # the budget run's pick too
    data = to_json_data(result)
    assert data["operator_mix"] == "linear"
    no_budget = run.run_model(
        "mlp", 1, tmp_path, quick=True, timeout_s=1, oracle_timeout_s=1, budget_runs=0
    )
    assert no_budget.budget == ()


def test_the_demo_is_not_measured_until_its_environment_exists(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("nothing runs without .nox/demo")

    monkeypatch.setattr(run, "run_command", never)
    timing = run.demo_wall_s(repo=tmp_path)
    assert timing.wall_s is None
    assert timing.note == "not measured: run python3 -m nox -s demo once first"


def test_the_demo_is_timed_in_a_fresh_process_as_a_user_runs_it(tmp_path, monkeypatch):
    (tmp_path / ".nox" / "demo").mkdir(parents=True)
    seen = {}

    def fake(command, timeout_s, env=None):
        seen.update(command=command, env=env)
        return None

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/suite/caches")
    monkeypatch.setattr(run, "run_command", fake)
    timing = run.demo_wall_s(repo=tmp_path)
    assert timing.wall_s is not None and timing.wall_s >= 0 and timing.note is None
    assert seen["command"] == ["python3", "-m", "nox", "-s", "demo", "-R"]
    assert "TORCHINDUCTOR_CACHE_DIR" not in seen["env"]  # the suite's own caches
    monkeypatch.setattr(run, "run_command", lambda *a, **k: "exit 1: No module named nox")
    failed = run.demo_wall_s(repo=tmp_path)
    assert failed.wall_s is None and "No module named nox" in (failed.note or "")
    assert failed.note.startswith("not measured:")


def test_the_users_environment_leaves_out_the_suite_and_its_virtual_environment():
    environ = {
        "PATH": "/work/.nox/bench-suite/bin:/usr/local/bin:/usr/bin",
        "VIRTUAL_ENV": "/work/.nox/bench-suite",
        "NOX_CURRENT_SESSION": "bench-suite",
        "TORCHINDUCTOR_CACHE_DIR": "/work/artifacts/bench-suite/compiler-caches/inductor",
        "HOME": "/home/user",
    }
    env = run.user_environment(environ)
    assert env["PATH"].split(":")[-2:] == ["/usr/local/bin", "/usr/bin"]
    assert "/work/.nox/bench-suite/bin" not in env["PATH"].split(":")
    assert env["HOME"] == "/home/user"
    for name in ("VIRTUAL_ENV", "NOX_CURRENT_SESSION", "TORCHINDUCTOR_CACHE_DIR"):
        assert name not in env


def test_rerender_judges_the_demo_as_recorded(tmp_path):
    import json

    from benchmarks.suite.results import ModelResult, to_json_data

    result = ModelResult("m", "M", dlopt=(DecisionRun("dlopt", "a", "a", wall_s=3.0),))
    source = tmp_path / "results.json"
    for demo, said in (
        ({"wall_s": 12.5, "note": None}, "**met** (12.5 s"),
        (
            {"wall_s": None, "note": "not measured: --skip-demo"},
            "**not measured** (not measured: --skip-demo)",
        ),
        (None, "**not measured** (not timed in this run)"),
    ):
        env = {"commit": "abc1234"} if demo is None else {"commit": "abc1234", "demo": demo}
        source.write_text(json.dumps({"environment": env, "results": to_json_data([result])}))
        assert run.main(["--rerender", str(source), "--output-dir", str(tmp_path / "out")]) == 0
        page = (tmp_path / "out" / "results.md").read_text()
        assert f"- nox -s demo within 20 s: {said}" in page
