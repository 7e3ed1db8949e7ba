"""The model and the plan ``benchmarks/isolation.py`` crashes mid-race, importable by
name in a worker."""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from dlopt.contract.provider import BuiltPlan, ProviderAvailability
from dlopt.settings.workload import WorkloadCase, WorkloadProfile

#: The call (counted from the plan's first) on which the plan dereferences a null pointer.
CRASH_AT_CALL = 12


def small_mlp() -> tuple[torch.nn.Module, WorkloadProfile]:
    """A model of tens of microseconds a call: the race runs many rounds in its budget."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 128)
    ).eval()
    x = torch.randn(8, 128, generator=torch.Generator().manual_seed(1))
    return model, WorkloadProfile([WorkloadCase("batch-8", args=(x,))], name="small_mlp")


class EagerCopy:
    """Serves the model as eager does: a challenger that races on after the crash."""

    name = "eager_copy"
    #: The call this plan crashes on (``None``: never).
    crash_at_call: int | None = None

    def probe(self, context: Any) -> ProviderAvailability:
        return ProviderAvailability.ok()

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        calls = 0

        def runner(*args: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == self.crash_at_call:
                ctypes.string_at(0)  # a null-pointer read: SIGSEGV
            return model(*args)

        return BuiltPlan(runner=runner)


class CrashesMidRace(EagerCopy):
    """Serves the model as eager does, then segfaults on call :data:`CRASH_AT_CALL`."""

    name = "crashes_mid_race"
    crash_at_call = CRASH_AT_CALL
