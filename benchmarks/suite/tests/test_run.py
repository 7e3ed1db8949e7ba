"""The command's robustness: timeouts, failed workers and bad flags."""

from __future__ import annotations

import sys
import time

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
    # workload's plan cache, and the repeat decided from it.
    cache = "plan-cache-mlp"
    assert calls == [
        ("dlopt", 1, None),
        ("peer", 1, None),
        ("dlopt", 2, cache),
        ("peer", 2, None),
        ("repeat", None, cache),
    ]
    assert result.repeat is not None and result.repeat.error is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "resnet5"], "unknown workload(s) resnet5; choose from"),
        (["--repeats", "0"], "--repeats must be at least 1"),
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
