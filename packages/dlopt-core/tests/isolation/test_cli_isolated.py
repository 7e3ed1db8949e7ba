"""``dlopt providers --isolate`` and ``dlopt select --isolate`` with hostile plugins
installed through entry points in a temporary directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent

PLUGIN = '''
"""A plugin whose plans crash or hang (a test fixture)."""
import os
from dlopt.plugin import hookimpl

DLOPT_PLUGIN_API_VERSION = "2.0"
if os.environ.get("HOSTILE_CRASH_AT_IMPORT"):
    import faulty_plans
    faulty_plans.segfault()
if os.environ.get("HOSTILE_HANG_AT_IMPORT"):
    import time
    time.sleep(3600)


@hookimpl
def dlopt_register_providers(register):
    import faulty_plans

    for name in os.environ.get("HOSTILE_PLANS", "").split(","):
        if name:
            register(getattr(faulty_plans, name)())
'''


def _install_hostile_plugin(root: Path) -> dict[str, str]:
    """A distribution found through its entry point only: the environment to run with."""
    (root / "hostile_plugin.py").write_text(PLUGIN, encoding="utf-8")
    info = root / "hostile_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hostile-plugin\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[dlopt.providers]\nhostile = hostile_plugin\n", encoding="utf-8"
    )
    path = os.pathsep.join([str(root), str(HERE), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, DLOPT_PROBE_TIMEOUT_S="2")


def _dlopt(
    args: list[str], env: dict[str, str], cwd: Path, timeout: int
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dlopt", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,  # the test's own bound
    )


def _providers_isolated(tmp_path: Path, **hostile: str) -> dict:
    """``dlopt providers --isolate --json`` with the hostile plugin set up by ``hostile``
    (environment variables); it must exit 0; its JSON."""
    env = {**_install_hostile_plugin(tmp_path), **hostile}
    done = _dlopt(["providers", "--isolate", "--json"], env, tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_providers_returns_with_a_hanging_and_a_crashing_probe_installed(tmp_path):
    data = _providers_isolated(tmp_path, HOSTILE_PLANS="HangsInProbe,SegfaultsInProbe,FastPlan")
    statuses = {s["name"]: s for s in data["providers"]}
    assert statuses["fast"]["availability"]["available"] is True
    assert statuses["eager_fp32"]["availability"]["available"] is True
    # Either the probe stage's own limit answered and the worker's exit ended the probe,
    # or the watchdog killed the worker with it: never left running, never holding.
    hung = statuses["hangs_in_probe"]["availability"]
    assert hung["available"] is False
    assert "hung at probe" in hung["reason"] or "probe took 2.0 s" in hung["reason"]
    crashed = statuses["segfaults_in_probe"]["availability"]
    assert crashed["available"] is False and "crashed at probe (SIGSEGV)" in crashed["reason"]


@pytest.mark.slow
def test_a_plugin_that_crashes_at_import_is_that_plugins_failure(tmp_path):
    data = _providers_isolated(tmp_path, HOSTILE_CRASH_AT_IMPORT="1")
    (failure,) = [f for f in data["plugin_failures"] if f["plugin"] == "hostile"]
    assert failure["stage"] == "load" and "crashed at load (SIGSEGV)" in failure["error"]
    assert any(s["name"] == "eager_fp32" for s in data["providers"])


@pytest.mark.slow
def test_select_writes_a_full_report_when_one_plan_segfaults_and_another_hangs_in_build(tmp_path):
    env = _install_hostile_plugin(tmp_path)
    env["HOSTILE_PLANS"] = "SegfaultsWhenCalled,HangsInBuild,FastPlan"
    report_path = tmp_path / "r.json"
    args = [
        "select",
        "faulty_plans:tiny_model",
        "--isolate",
        "--report",
        str(report_path),
        "--max-measure-time",
        "5",
        "--build-timeout",
        "4",
        "--plain",
        "--all-plans",
    ]
    for plan in ("eager_fp32", "fast", "segfaults_when_called", "hangs_in_build"):
        args += ["--include", plan]
    done = _dlopt(args, env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    by_name = {c["name"]: c for c in report["candidates"]}
    assert report["selected_plan"] == "fast"
    assert by_name["segfaults_when_called"]["fault"]["signal"] == "SIGSEGV"
    assert by_name["segfaults_when_called"]["fault"]["stage"] == "measure"
    assert by_name["hangs_in_build"]["fault"]["kind"] == "hung"
    assert by_name["hangs_in_build"]["fault"]["stage"] == "build"
    assert report["isolation"]["workers"] == 3
    # The progress line named both as they happened.
    assert "segfaults_when_called: crashed at measure (SIGSEGV)" in done.stderr
    assert "hangs_in_build: hung at build" in done.stderr


def _default_env(root: Path) -> dict[str, str]:
    """The hostile plugin's environment as a user's: isolation left at its default (the
    suite's conftest turns it off for every other test)."""
    env = _install_hostile_plugin(root)
    env.pop("DLOPT_ISOLATE", None)
    return env


def _select_args(report: Path, *plans: str) -> list[str]:
    """``dlopt select`` of the tiny model, isolated (the default), racing ``plans``."""
    args = ["select", "faulty_plans:tiny_model", "--report", str(report), "--plain"]
    args += ["--max-measure-time", "5", "--all-plans"]
    for plan in plans:
        args += ["--include", plan]
    return args


@pytest.mark.slow
def test_an_isolated_select_leaves_nothing_in_the_temp_directory(tmp_path):
    env = _default_env(tmp_path)
    temp = tmp_path / "t"
    temp.mkdir()
    env.update(TMPDIR=str(temp), HOSTILE_PLANS="WritesArtifacts,FastPlan")
    report_path = tmp_path / "r.json"
    done = _dlopt(_select_args(report_path, "eager_fp32", "fast_artifact"), env, tmp_path, 300)
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["selected_plan"] == "fast_artifact" and report["isolation"]["workers"] == 1
    assert sorted(str(p.relative_to(temp)) for p in temp.rglob("*")) == []


@pytest.mark.slow
def test_the_helpers_of_a_winning_plugin_plan_end_with_dlopt_select(tmp_path):
    from dlopt.platform.processes import has_ended

    env = _default_env(tmp_path)
    pids_file = tmp_path / "pids"
    env.update(HOSTILE_PLANS="StartsProcessesAndWins", FAULTY_PLANS_PIDS_FILE=str(pids_file))
    report_path = tmp_path / "r.json"
    args = _select_args(report_path, "eager_fp32", "starts_processes_and_wins")
    done = _dlopt(args, env, tmp_path, 300)
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["selected_plan"] == "starts_processes_and_wins"
    pids = [int(line) for line in pids_file.read_text(encoding="utf-8").split()]
    # Built in the worker and again in the host (a child, a setsid child, a daemon each).
    assert len(pids) == 6
    assert [pid for pid in pids if not has_ended(pid)] == []


@pytest.mark.slow
def test_a_module_in_the_working_directory_shadows_nothing_in_the_worker(tmp_path):
    """A stray ``faulty_plans.py`` where ``dlopt`` (the console script, which does not
    search the working directory) is run: the worker imports what the host imported."""
    env = _default_env(tmp_path)
    env["HOSTILE_PLANS"] = "FastPlan"
    work = tmp_path / "work"
    work.mkdir()
    shadow = work / "faulty_plans.py"
    shadow.write_text(
        "import pathlib\n"
        "pathlib.Path(__file__).with_name('shadowed').write_text('imported')\n"
        "raise ImportError('the stray module in the working directory was imported')\n",
        encoding="utf-8",
    )
    script = Path(sys.executable).with_name("dlopt")
    assert script.exists(), "dlopt's console script is installed beside this interpreter"
    report_path = tmp_path / "r.json"
    done = subprocess.run(
        [str(script), *_select_args(report_path, "eager_fp32", "fast")],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert not (work / "shadowed").exists()
    assert json.loads(report_path.read_text(encoding="utf-8"))["selected_plan"] == "fast"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "words"),
    [("HOSTILE_CRASH_AT_IMPORT", "crashed at load (SIGSEGV)"), ("HOSTILE_HANG_AT_IMPORT", "hung")],
)
def test_a_plugin_that_crashes_or_hangs_at_load_is_never_loaded_by_the_host(
    tmp_path, variable, words
):
    env = {**_default_env(tmp_path), variable: "1"}
    report_path = tmp_path / "r.json"
    done = _dlopt(_select_args(report_path, "eager_fp32"), env, tmp_path, 300)
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["selected_plan"] == "eager_fp32"
    (failure,) = [f for f in report["plugin_failures"] if f["plugin"] == "hostile"]
    assert failure["stage"] == "load" and words in failure["error"]


@pytest.mark.slow
def test_sigterm_ends_select_with_143_one_line_and_no_worker_left(tmp_path):
    from dlopt.platform.processes import descendants, has_ended

    env = _default_env(tmp_path)
    env["HOSTILE_PLANS"] = "HangsInBuild,FastPlan"
    args = _select_args(tmp_path / "r.json", "eager_fp32", "hangs_in_build", "fast")
    args += ["--build-timeout", "600"]
    process = subprocess.Popen(
        [sys.executable, "-m", "dlopt", *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        workers: list = []
        while time.monotonic() < deadline and not workers:
            time.sleep(0.5)
            workers = descendants(process.pid)
        assert workers, "the isolated select started a worker"
        time.sleep(5)  # into the hanging build
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("dlopt: terminated (SIGTERM)")
    time.sleep(1)
    assert all(has_ended(w.pid) for w in workers)
