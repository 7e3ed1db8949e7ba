"""The fleet tests import ``fleet_models`` and ``faulty_plans`` by name, and so does every
Ray worker and isolated worker they start (the fleet passes on this import path)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
for folder in (HERE, HERE.parent / "isolation"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
