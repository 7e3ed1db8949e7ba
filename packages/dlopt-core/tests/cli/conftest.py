"""Shared CLI fixtures: a report written by a real ``dlopt select`` (core's built-in
plans, 1 s budget), and ``no_work``, which fails a test whose command starts work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dlopt.cli.cmd_select as cli_select
from dlopt.cli import main


@pytest.fixture(scope="session")
def report_path(tmp_path_factory: pytest.TempPathFactory, select_argv: Any) -> Path:
    """``dlopt select`` on a small MLP: eager fp32, native bf16 raced, channels-last
    rejected at build (it needs image inputs)."""
    path = tmp_path_factory.mktemp("select") / "r.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
        extra = ["--include", "native_bf16", "--seed", "3", "--report", str(path)]
        code = main(select_argv("b1=1x16@70", "b4=4x16@30", extra=extra))
    assert code == 0
    return path


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the command imports the model or allocates an input (it must
    refuse its arguments before any work starts); plugins are not loaded."""

    def too_far(*args: object, **kwargs: object) -> None:
        pytest.fail("the command started work before refusing its arguments")

    monkeypatch.setattr(cli_select, "load_factory", too_far)
    monkeypatch.setattr(cli_select, "_random_input", too_far)
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
