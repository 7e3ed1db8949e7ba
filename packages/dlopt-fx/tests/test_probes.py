"""Probe reasons: distinct, actionable, and cheap (no compile, no Dynamo import)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from dlopt.plugin import ExecutionTarget, ProviderContext, WorkloadProfile
from dlopt_fx import probes
from dlopt_fx.providers import InductorProvider, default_providers


@pytest.fixture(autouse=True)
def _fresh_probe_cache() -> Iterator[None]:
    probes.forget_probe_caches()
    yield
    probes.forget_probe_caches()


def _context(device: str = "cpu", workload: WorkloadProfile | None = None) -> ProviderContext:
    return ProviderContext(target=ExecutionTarget(device), workload=workload)


def test_registered_plans() -> None:
    names = [p.name for p in default_providers()]
    assert names == ["fx", "fx_inductor", "inductor", "inductor_freezing", "inductor_max_autotune"]


def test_cpu_probe_reports_the_compiler() -> None:
    path, version = probes.find_cxx_compiler()
    if path is None:
        pytest.skip("no C++ compiler on this machine")
    availability = InductorProvider("inductor").probe(_context())
    assert availability.available, availability.reason
    assert availability.details["compiler"] == path
    assert availability.details["compiler_version"] == version


def test_no_compiler_is_reported_with_install_hint(monkeypatch: Any) -> None:
    monkeypatch.setattr(probes, "find_cxx_compiler", lambda: (None, None))
    availability = InductorProvider("inductor").probe(_context())
    assert not availability.available
    assert "no C++ compiler found" in availability.reason
    assert "apt-get install g++" in availability.install_hint


def test_broken_compiler_is_reported(monkeypatch: Any) -> None:
    monkeypatch.setattr(probes, "find_cxx_compiler", lambda: ("/bin/false", "false 0.0"))
    availability = InductorProvider("inductor").probe(_context())
    assert not availability.available
    assert "cannot build a C++17 OpenMP shared library" in availability.reason
    assert availability.details["compiler"] == "/bin/false"


def test_cuda_target_without_gpu_or_triton(monkeypatch: Any) -> None:
    provider = InductorProvider("inductor")
    if not torch.cuda.is_available():
        availability = provider.probe(_context("cuda"))
        assert not availability.available and "no CUDA device" in availability.reason
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "triton", None)
    # A provider caches its probe per target: a changed machine needs a fresh instance.
    assert provider.probe(_context("cuda")) is availability
    availability = InductorProvider("inductor").probe(_context("cuda"))
    assert not availability.available
    assert "triton is not installed" in availability.reason
    assert "pip install triton" in availability.install_hint


def test_other_devices_are_not_offered() -> None:
    availability = InductorProvider("inductor").probe(_context("mps"))
    assert not availability.available and "cpu and cuda" in availability.reason


def test_max_autotune_declines_short_deployments() -> None:
    provider = next(p for p in default_providers() if p.name == "inductor_max_autotune")
    short = WorkloadProfile(WorkloadProfile.single(torch.ones(1)).cases, expected_calls=50)
    availability = provider.probe(_context(workload=short))
    if probes.check_cxx_compiler().works:
        assert not availability.available
        assert "expects 50 calls" in availability.reason
    assert provider.options_for("cpu") == {"max_autotune": True, "freezing": True}
    assert "freezing" not in provider.options_for("cuda")


def test_probe_does_not_import_dynamo() -> None:
    code = (
        "import sys\n"
        "from dlopt.plugin import ProviderContext\n"
        "from dlopt_fx.providers import default_providers\n"
        "for p in default_providers(): p.probe(ProviderContext())\n"
        "print('torch._dynamo' in sys.modules, 'torch._inductor' in sys.modules)\n"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
