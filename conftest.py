"""Settings every test in this repository shares.

``dlopt select`` isolates the race in a worker process by default. Tests choose the mode
they exercise: in process unless a test says ``--isolate`` (or clears this setting), so
what a test patches into this process is what the race sees.

What dlopt keeps per machine (boundary calibrations, probe answers) goes to a directory
of this test session, never the user's; and probes are not read back from it (a test
that patches a probe must see its own answer), but where a test turns that on.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

if "DLOPT_USER_CACHE_DIR" not in os.environ:
    _session_cache = tempfile.mkdtemp(prefix="dlopt-test-user-cache-")
    atexit.register(shutil.rmtree, _session_cache, True)
    os.environ["DLOPT_USER_CACHE_DIR"] = _session_cache
os.environ.setdefault("DLOPT_PROBE_CACHE", "off")


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
