"""dlopt.testing's fakes import without pytest; the contract suite says it needs pytest."""

from __future__ import annotations

import json
import subprocess
import sys

# ``sys.modules["pytest"] = None`` makes every ``import pytest`` raise ImportError.
_CODE = """
import json, sys
sys.modules["pytest"] = None
import dlopt.testing
from dlopt.testing import FailingStage, FakeProvider
import dlopt.testing.fakes, dlopt.testing.models, dlopt.testing.plugins, dlopt.testing.fake_race
try:
    from dlopt.testing import ProviderContractSuite
except ImportError as exc:
    suite_error = str(exc)
else:
    suite_error = None
print(json.dumps({"fake": FakeProvider("x").name, "suite_error": suite_error}))
"""


def test_fakes_import_without_pytest_and_the_suite_names_what_it_needs():
    out = subprocess.run(
        [sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["fake"] == "x"
    assert "pip install pytest" in result["suite_error"]


def test_the_suite_is_reachable_from_dlopt_testing():
    import dlopt.testing
    from dlopt.testing.provider_suite import ProviderContractSuite

    assert dlopt.testing.ProviderContractSuite is ProviderContractSuite
