"""Settings every test in this repository shares.

``dlopt select`` isolates the race in a worker process by default. Tests choose the mode
they exercise: in process unless a test says ``--isolate`` (or clears this setting), so
what a test patches into this process is what the race sees.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _cli_races_in_process_unless_a_test_isolates() -> Iterator[None]:
    # Set by hand, not with ``monkeypatch``: an autouse fixture here that requested it
    # would make every test's ``monkeypatch`` outlive that test's own fixtures, whose
    # teardown would then still see the test's patches.
    previous = os.environ.get("DLOPT_ISOLATE")
    os.environ["DLOPT_ISOLATE"] = "0"
    yield
    if previous is None:
        os.environ.pop("DLOPT_ISOLATE", None)
    else:
        os.environ["DLOPT_ISOLATE"] = previous
