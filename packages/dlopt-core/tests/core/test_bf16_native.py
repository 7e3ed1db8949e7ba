"""bf16 is offered on CUDA only where the target GPU computes it natively (sm80+), not
where torch would emulate it, and the target's own GPU is asked, not the current one."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from dlopt.contract.provider import ProviderContext
from dlopt.evidence.provenance import inspect_runtime
from dlopt.platform.probing import cuda_bf16_native
from dlopt.plugins.builtin import native_variants
from dlopt.settings.target import ExecutionTarget

#: A Turing card (bf16 only emulated) as device 0 and a Hopper card as device 1.
CAPABILITY = {0: (7, 5), 1: (9, 0)}


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    state = {"current": 0}

    @contextlib.contextmanager
    def device(index: int) -> Iterator[None]:
        before, state["current"] = state["current"], int(index)
        try:
            yield
        finally:
            state["current"] = before

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        # torch's semantics: the current device; emulation counts unless told otherwise.
        return including_emulation or CAPABILITY[state["current"]][0] >= 8

    def properties(index: int) -> Any:
        major, minor = CAPABILITY[index]
        return types.SimpleNamespace(
            name=f"gpu{index}", major=major, minor=minor, total_memory=2**34
        )

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["current"])
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    return state


def _native_bf16(target: str) -> Any:
    provider = next(p for p in native_variants() if p.name == "native_bf16")
    return provider.probe(ProviderContext(target=ExecutionTarget(target)))


def test_emulated_bf16_is_not_offered(two_gpus: dict[str, int]) -> None:
    availability = _native_bf16("cuda:0")
    assert not availability.available
    assert "no native bf16" in availability.reason


def test_the_targets_gpu_decides_not_the_current_one(two_gpus: dict[str, int]) -> None:
    assert _native_bf16("cuda:1").available
    two_gpus["current"] = 1
    assert not _native_bf16("cuda:0").available
    assert two_gpus["current"] == 1, "the current device is left as it was"


def test_cuda_bf16_native(two_gpus: dict[str, int]) -> None:
    assert (cuda_bf16_native(0), cuda_bf16_native(1)) == (False, True)
    assert cuda_bf16_native() is False  # the current device, 0


def test_runtime_lists_bf16_autocast_only_where_native(two_gpus: dict[str, int]) -> None:
    assert inspect_runtime("cuda:0", with_providers=False).amp_dtypes == ("float16",)
    assert inspect_runtime("cuda:1", with_providers=False).amp_dtypes == (
        "float16",
        "bfloat16",
    )
