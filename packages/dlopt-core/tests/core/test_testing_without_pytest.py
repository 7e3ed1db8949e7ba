"""``dlopt.testing``'s fakes import where pytest is not installed (a vendor's CI script,
a serving image); only the contract suite, a pytest test class, needs pytest."""

from __future__ import annotations

import subprocess
import sys

# ``sys.modules["pytest"] = None`` makes every ``import pytest`` raise ImportError.
_WITHOUT_PYTEST = """
import sys
sys.modules["pytest"] = None
sys.modules["_pytest"] = None
import dlopt.testing
from dlopt.testing import FailingStage, FakeProvider
import dlopt.testing.fakes, dlopt.testing.models, dlopt.testing.plugins, dlopt.testing.fake_race
import dlopt.testing.fresh_process
print("imported")
"""


def test_dlopt_testing_imports_without_pytest():
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYTEST], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"
