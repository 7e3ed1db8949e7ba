"""A report written by a real ``dlopt select`` (core's built-in plans, 1 s budget)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlopt.cli import main


@pytest.fixture(scope="session")
def report_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``dlopt select`` on a small MLP: eager fp32, native bf16 raced, channels-last
    rejected at build (it needs image inputs)."""
    path = tmp_path_factory.mktemp("select") / "r.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
        code = main(
            [
                "select",
                "dlopt.testing.models:StructuredMLP",
                "--case",
                "b1=1x16@70",
                "--case",
                "b4=4x16@30",
                "--include",
                "native_channels_last",
                "--include",
                "native_bf16",
                "--max-measure-time",
                "1",
                "--seed",
                "3",
                "--report",
                str(path),
            ]
        )
    assert code == 0
    return path
