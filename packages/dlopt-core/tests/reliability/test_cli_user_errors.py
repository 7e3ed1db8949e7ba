"""Fault class: a user's mistake shown as a traceback.

A model module or factory that raises, an input shape too large for memory, and
``dlopt report`` on a directory, an endless, deeply nested, huge or binary file: each is
a usage error (exit 2) whose message names the cause, never a traceback or a hang.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import uuid

import pytest

from dlopt.cli import cmd_select as cli_select
from dlopt.cli import main
from dlopt.cli.cmd_select import check_input_sizes
from dlopt.errors import WorkloadError
from dlopt.evidence import report


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write a module under a fresh name on ``sys.path``; its name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        name = f"user_model_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    return write


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("1 / 0\n", "ZeroDivisionError: division by zero"),
        ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
        ("raise KeyError('weights.pt')\n", "KeyError: 'weights.pt'"),
    ],
)
def test_a_module_that_raises_at_import_is_a_usage_error(user_module, capsys, source, expected):
    name = user_module(source)
    assert main(["select", f"{name}:build", "--input", "1x16"]) == 2
    err = capsys.readouterr().err
    assert f"importing {name!r} for {name}:build raised {expected}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("raise RuntimeError('checkpoint not found: /data/w.pt')", "RuntimeError: checkpoint"),
        ("import sys; sys.exit('bad config')", "SystemExit: bad config"),
        ("raise ValueError", "raised ValueError;"),
    ],
)
def test_a_factory_that_raises_is_a_usage_error_naming_it(user_module, capsys, body, expected):
    name = user_module(f"def build():\n    {body}\n")
    assert main(["select", f"{name}:build", "--input", "1x16"]) == 2
    err = capsys.readouterr().err
    assert f"the model factory {name}:build raised" in err and expected in err


@pytest.mark.parametrize(
    "spec", ["--case=big=100000x100000x1000@1", "--input=3000000000x3000000000:int64"]
)
def test_a_shape_too_large_for_memory_is_refused_before_allocating(monkeypatch, capsys, spec):
    def too_far(*args, **kwargs):
        pytest.fail("the CLI allocated or built before checking the input sizes")

    monkeypatch.setattr(cli_select, "load_factory", too_far)
    monkeypatch.setattr(cli_select, "_random_input", too_far)
    assert main(["select", "dlopt.testing.models:StructuredMLP", spec]) == 2
    err = capsys.readouterr().err
    assert "give smaller shapes" in err and "available" in err


def test_input_sizes_add_up_over_cases():
    specs = [("a", (1024, 1024), "float32", 1.0), ("b", (1024, 1024), "float16", 1.0)]
    check_input_sizes(specs, available=6 * 2**20)
    with pytest.raises(WorkloadError, match=r"need 6\.0 MiB.*5\.0 MiB available.*case 'a'"):
        check_input_sizes(specs, available=5 * 2**20)


def test_report_on_a_directory_names_it(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path} is a directory" in capsys.readouterr().err
    (tmp_path / "report.json").write_text("{}")
    assert main(["report", str(tmp_path)]) == 2
    assert f"did you mean {tmp_path / 'report.json'}" in capsys.readouterr().err


def test_report_on_an_endless_device_is_refused_without_reading(capsys):
    assert main(["report", "/dev/zero"]) == 2
    assert "/dev/zero: it is a character device, not a regular file" in capsys.readouterr().err


def test_report_on_a_huge_file_stops_at_the_cap(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "MAX_REPORT_BYTES", 1000)
    path = tmp_path / "huge.json"
    path.write_text(" " * 2000 + "{}")
    assert main(["report", str(path)]) == 2
    assert f"{path} is larger than" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"[" * 100_000 + b"]" * 100_000, "nested too deeply"), (b"\xff\xfe{}", "not UTF-8")],
)
def test_report_on_a_file_that_is_no_json_report_names_it(tmp_path, capsys, content, message):
    path = tmp_path / "evil.json"
    path.write_bytes(content)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err


def test_python_m_dlopt_report_on_a_directory_shows_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "dlopt", "report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"{tmp_path} is a directory" in result.stderr


@pytest.mark.parametrize("budget", ["1e308", "1e300", "700000"])
def test_a_time_budget_past_a_week_is_a_usage_error(capsys, budget):
    """1e308 used to pass the checks and overflow the deadline (a traceback in process; 64
    crashed workers in the isolated default)."""
    with pytest.raises(SystemExit) as exited:
        main(["select", "--demo", "--time-budget", budget])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "at most 604800" in err and "Traceback" not in err


@pytest.mark.parametrize("budget", [1e308, float(7 * 86400 + 1)])
def test_the_policy_refuses_a_time_budget_past_a_week(budget):
    from dlopt import OptimizationPolicy
    from dlopt.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="at most 604800"):
        OptimizationPolicy(time_budget_s=budget)
    assert OptimizationPolicy(time_budget_s=7 * 86400).time_budget_s == 7 * 86400


def test_all_plans_with_a_time_budget_is_refused_as_contradictory(capsys):
    assert main(["select", "--demo", "--all-plans", "--time-budget", "20"]) == 2
    err = capsys.readouterr().err
    assert "--all-plans builds and races every plan with no time budget" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({"time_budget_s": True}, "time_budget_s: got bool True, a boolean"),
        ({"plan_options": []}, "plan_options: expected a mapping"),
        ({"plan_options": {"onnxruntime_cpu": []}}, "plan_options['onnxruntime_cpu']:"),
    ],
)
def test_a_policy_document_of_the_wrong_types_names_the_field(document, named):
    from dlopt.errors import ConfigurationError
    from dlopt.fleet.spec import read_policy
    from dlopt.platform.serialization import from_jsonable
    from dlopt.settings.policy import OptimizationPolicy

    with pytest.raises(ConfigurationError, match=re.escape(named)):
        from_jsonable(document, OptimizationPolicy)
    with pytest.raises(ConfigurationError, match=re.escape(named)):  # a fleet spec's table
        read_policy(document)
