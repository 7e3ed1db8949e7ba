"""The plan ``benchmarks/isolation.py`` crashes mid-race, importable by name in a worker."""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from dlopt.plugins.contract import BuiltPlan, ProviderAvailability

#: The call (counted from the plan's first) on which the plan dereferences a null pointer.
CRASH_AT_CALL = 40


class CrashesMidRace:
    """Serves the model as eager does, then segfaults on call :data:`CRASH_AT_CALL`."""

    name = "crashes_mid_race"

    def probe(self, context: Any) -> ProviderAvailability:
        return ProviderAvailability.ok()

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        calls = 0

        def runner(*args: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == CRASH_AT_CALL:
                ctypes.string_at(0)
            return model(*args)

        return BuiltPlan(runner=runner)
