"""Probe reasons: distinct, actionable, and cheap (no compile, no Dynamo import)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import torch

from dlopt.plugin import ExecutionTarget, Precision, ProviderContext, WorkloadProfile
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
    assert names == [
        "fx",
        "fx_inductor",
        "inductor",
        "inductor_freezing",
        "inductor_channels_last_freezing",
        "inductor_bf16",
        "inductor_bf16_freezing",
        "inductor_bf16_channels_last",
        "inductor_bf16_channels_last_freezing",
        "inductor_max_autotune",
    ]


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


def _bf16_plan() -> InductorProvider:
    return next(p for p in default_providers() if p.name == "inductor_bf16_channels_last_freezing")


@pytest.mark.parametrize(("flags", "native"), [(("avx2",), False), (("avx2", "amx_bf16"), True)])
def test_bf16_plans_need_native_bf16_on_cpu(
    monkeypatch: Any, flags: tuple[str, ...], native: bool
) -> None:
    if not probes.check_cxx_compiler().works:
        pytest.skip("TorchInductor cannot compile on this CPU (no working C++ compiler)")
    machine = attrs.evolve(probes.cpu_info(), isa_flags=flags)
    monkeypatch.setattr(probes, "cpu_info", lambda: machine)
    availability = _bf16_plan().probe(_context())
    assert availability.available is native
    assert availability.details["isa"] == ",".join(flags)
    if not native:
        assert "lacks AVX-512 BF16 and AMX: bf16 would be emulated" in availability.reason
        assert "AVX-512 BF16 or AMX" in availability.install_hint
    # The fp32 plans do not depend on bf16.
    assert InductorProvider("inductor").probe(_context()).available


@pytest.mark.parametrize(("capability", "native"), [((7, 5), False), ((8, 0), True)])
def test_bf16_plans_need_native_bf16_on_cuda(
    monkeypatch: Any, capability: tuple[int, int], native: bool
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(probes, "module_present", lambda name: True)
    monkeypatch.setattr(probes, "cuda_bf16_native", lambda index=None: capability >= (8, 0))
    availability = _bf16_plan().probe(_context("cuda"))
    assert availability.available is native
    if not native:
        assert "no native bf16" in availability.reason and availability.install_hint


def test_plans_declare_the_precision_they_compute_in() -> None:
    precisions = {p.name: p.precision for p in default_providers()}
    assert precisions["inductor_bf16_channels_last_freezing"] is Precision.BF16
    assert precisions["inductor_bf16"] is Precision.BF16
    assert precisions["inductor_channels_last_freezing"] is Precision.FP32
    with pytest.raises(ValueError, match="autocast_dtype must be one of"):
        InductorProvider("inductor_fp16", autocast_dtype=torch.float16)
