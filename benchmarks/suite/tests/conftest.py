"""The suite's unit tests import it as ``benchmarks.suite`` from the repository root."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
