"""The command line as a package: its entry points, its defaults and its one table printer."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import entry_points

import attrs

from dlopt._version import __version__
from dlopt.cli import build_parser, main
from dlopt.cli.console import format_table
from dlopt.cli.objectives import objective_of
from dlopt.measurement import MeasurementPolicy
from dlopt.settings.policy import OBJECTIVES, DeploymentConstraints


def _select_defaults() -> dict[str, object]:
    parser = build_parser()
    return vars(parser.parse_args(["select", "--demo"]))


def test_select_defaults_are_the_policies_defaults() -> None:
    args = _select_defaults()
    assert args["min_speedup"] == attrs.fields(DeploymentConstraints).min_speedup.default
    assert args["max_measure_time"] == attrs.fields(MeasurementPolicy).max_time_s.default
    # No --objective given: the default the command passes, its policy's.
    assert objective_of(argparse.Namespace(**args), "the policy's default") == (
        "the policy's default"
    )


def test_every_objective_is_offered() -> None:
    select = build_parser()._subparsers._group_actions[0].choices["select"]  # type: ignore[union-attr]
    (objective,) = [a for a in select._actions if a.dest == "objective"]
    assert tuple(objective.choices) == OBJECTIVES


def test_the_console_script_and_python_m_reach_main() -> None:
    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "dlopt"]
    assert script.value == "dlopt.cli:main" and script.load() is main
    done = subprocess.run(
        [sys.executable, "-m", "dlopt", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"dlopt {__version__}"


def test_format_table_shows_none_as_dash_and_keeps_the_last_column_whole() -> None:
    text = format_table(("plan", "notes"), [("a", None), ("longer_name", "x" * 60)])
    header, rule, first, second = text.splitlines()
    assert header == "plan         notes"
    assert rule == "-----------  " + "-" * 40
    assert first == "a            -"
    assert second == "longer_name  " + "x" * 60
