"""Model factories the fleet tests name as ``module:factory`` (with spec imports allowed).

Ray workers and the isolated workers they start import this module by name: the fleet
hands them the test process's import path, which holds this directory and
tests/isolation (for ``faulty_plans``, the providers that crash).
"""

from __future__ import annotations

import os
from pathlib import Path

import faulty_plans

from dlopt.cli.demo import demo_mlp

#: The file whose absence makes :func:`killed_once` kill its process (set by the tests
#: before Ray starts, so every Ray worker inherits it).
KILL_MARKER_ENV = "DLOPT_TEST_FLEET_KILL_MARKER"


def tiny():
    """The isolation tests' tiny linear model and its one-case workload."""
    return faulty_plans.tiny_model()


def killed_once():
    """``demo_mlp``'s model and workload, but the first call ever kills the calling
    process outright (as the OOM killer would a Ray worker); the marker file remembers
    it happened."""
    marker = Path(os.environ[KILL_MARKER_ENV])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return demo_mlp()
