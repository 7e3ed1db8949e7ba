"""The ``dlopt`` command line (console script ``dlopt = "dlopt.cli:main"``)."""

from __future__ import annotations

from dlopt.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
