"""Settings every test in this repository shares.

``dlopt select`` isolates the race in a worker process by default. Tests choose the mode
they exercise: in process unless a test says ``--isolate`` (or clears this setting), so
what a test patches into this process is what the race sees.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _cli_races_in_process_unless_a_test_isolates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLOPT_ISOLATE", "0")
