"""Every probe state, simulated: each gives its own reason and a fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import dlopt.platform.probing
from dlopt.plugin import ExecutionTarget, ProviderContext
from dlopt_torchao import Scheme, TorchAOProvider
from dlopt_torchao import cpu as cpu_module
from dlopt_torchao import plans as plans_module
from dlopt_torchao import provider as provider_module
from dlopt_torchao.provider import TorchAOOptions, not_offered_by_default


def _context(device: str = "cpu", *, everywhere: bool = False) -> ProviderContext:
    """A plain probe's context; ``everywhere``: the option that also offers plans dlopt
    leaves out by default (eager int8 dynamic and fp8 on CUDA), to probe their gates."""
    options = TorchAOOptions(offer_everywhere=True) if everywhere else None
    return ProviderContext(target=ExecutionTarget(device), options=options)


def _fake_versions(monkeypatch: Any, **versions: str | None) -> None:
    real = dlopt.platform.probing.distribution_version

    def fake(name: str) -> str | None:
        return versions[name] if name in versions else real(name)

    monkeypatch.setattr(dlopt.platform.probing, "distribution_version", fake)


def _hide_torchao(monkeypatch: Any) -> None:
    for name in [m for m in sys.modules if m == "torchao" or m.startswith("torchao.")]:
        monkeypatch.delitem(sys.modules, name)


def _fake_gpu(monkeypatch: Any, capability: tuple[int, int]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_every_scheme_declares_its_precision() -> None:
    names = {p.name: p.precision.value for p in plans_module.all_providers()}
    assert names == {
        "torchao_int8_dynamic": "int8",
        "torchao_int8_dynamic_inductor": "int8",
        "torchao_int8_weight_only": "int8",
        "torchao_int8_weight_only_inductor": "int8",
        "torchao_int4_weight_only": "int4",
        "torchao_int4_weight_only_inductor": "int4",
        "torchao_fp8": "fp8",
        "torchao_fp8_inductor": "fp8",
        "torchao_pt2e_int8_static": "int8",
    }


@pytest.mark.parametrize(
    ("scheme", "compiled", "device", "needle"),
    [
        (Scheme.INT8_DYNAMIC, False, "cpu", "slower than fp32 on every workload measured"),
        (Scheme.INT8_WEIGHT_ONLY, False, "cpu", "torchao_int8_weight_only_inductor fuses"),
        (Scheme.INT8_DYNAMIC, True, "cpu", None),
        (Scheme.INT8_WEIGHT_ONLY, True, "cpu", None),
        (Scheme.INT4_WEIGHT_ONLY, False, "cpu", "100x slower than fp32"),
        (Scheme.INT4_WEIGHT_ONLY, True, "cpu", "tinygemm"),
        (Scheme.INT8_DYNAMIC, False, "cuda", "separate eager kernels"),
        (Scheme.FP8, False, "cuda", "torchao_fp8_inductor"),
        (Scheme.FP8, True, "cuda", None),
        # The eager variants stay where they are the fast path: weight-only on CUDA.
        (Scheme.INT8_WEIGHT_ONLY, False, "cuda", None),
        (Scheme.INT4_WEIGHT_ONLY, False, "cuda", None),
    ],
)
def test_which_plans_are_offered_by_default(
    scheme: Scheme, compiled: bool, device: str, needle: str | None
) -> None:
    why_not = not_offered_by_default(scheme, compiled, device, int8_dot=True)
    if needle is None:
        assert why_not is None
    else:
        assert why_not is not None and needle in why_not


@pytest.mark.parametrize(
    ("scheme", "compiled", "device", "offered"),
    [
        (Scheme.INT8_DYNAMIC, True, "cpu", False),  # int8 x int8 matmuls, emulated
        (Scheme.INT8_WEIGHT_ONLY, True, "cpu", True),  # float matmuls on int8 weights
        (Scheme.INT8_DYNAMIC, True, "cuda", True),  # a GPU flag is not a CPU flag
    ],
)
def test_without_int8_dot_products_int8_dynamic_is_not_offered_on_cpu(
    scheme: Scheme, compiled: bool, device: str, offered: bool
) -> None:
    why_not = not_offered_by_default(scheme, compiled, device, int8_dot=False)
    assert (why_not is None) is offered
    if not offered:
        assert "no int8 dot-product instructions (VNNI or AMX-INT8)" in why_not
        assert not_offered_by_default(scheme, compiled, device, int8_dot=True) is None


@pytest.mark.parametrize(("flags", "offered"), [({"avx2"}, False), ({"avx2", "avx_vnni"}, True)])
def test_int8_dynamic_inductor_reads_this_cpus_flags(
    monkeypatch: Any, flags: set[str], offered: bool
) -> None:
    monkeypatch.setattr(cpu_module, "cpu_flags", lambda: frozenset(flags))
    why_not = not_offered_by_default(Scheme.INT8_DYNAMIC, True, "cpu")
    assert (why_not is None) is offered


def test_a_plan_not_offered_by_default_says_how_to_race_it() -> None:
    provider = TorchAOProvider(Scheme.INT8_DYNAMIC)
    availability = provider.probe(_context())
    assert not availability.available
    assert availability.reason.startswith("not offered by default: eager torchao on CPU")
    assert availability.install_hint == (
        "to race it anyway: --option torchao_int8_dynamic.offer_everywhere=true"
    )
    assert provider.probe(_context(everywhere=True)).available


def test_compiled_plans_need_dlopt_fx(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "dlopt_fx", None)
    monkeypatch.setitem(sys.modules, "dlopt_fx.probes", None)
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC, compiled=True).probe(_context())
    assert not availability.available
    assert (
        "compiles with TorchInductor, but the compiled torchao plans compile through dlopt-fx"
        in (availability.reason)
    )
    assert 'pip install "dlopt-torchao[inductor]"' in availability.install_hint


def test_compiled_plans_need_a_working_compiler(monkeypatch: Any) -> None:
    probes = pytest.importorskip("dlopt_fx.probes", reason="needs dlopt-torchao[inductor]")

    missing = probes.CompilerCheck(None, None, False, "no C++ compiler found (looked at $CXX)")
    monkeypatch.setattr(probes, "check_cxx_compiler", lambda: missing)
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC, compiled=True).probe(_context())
    assert not availability.available
    assert "torchao_int8_dynamic_inductor compiles with TorchInductor" in availability.reason
    assert "no C++ compiler found" in availability.reason
    assert "apt-get install g++" in availability.install_hint


def test_not_installed(monkeypatch: Any) -> None:
    _fake_versions(monkeypatch, torchao=None)
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context())
    assert not availability.available
    assert availability.reason.startswith("torchao is not installed")
    # The hint installs the release paired with this torch.
    assert 'pip install "torchao==' in availability.install_hint
    assert availability.sdk_versions["torchao"] is None


def test_too_old(monkeypatch: Any) -> None:
    _fake_versions(monkeypatch, torchao="0.9.0")
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context())
    assert not availability.available
    assert "torchao 0.9.0 is installed but >=0.10 is required" in availability.reason


def test_torch_too_old_for_this_torchao(monkeypatch: Any) -> None:
    _fake_versions(monkeypatch, torchao="0.18.0")
    monkeypatch.setattr(torch, "__version__", "2.8.0+cu128")
    availability = TorchAOProvider(Scheme.INT8_WEIGHT_ONLY).probe(_context())
    assert not availability.available
    assert "needs torch >= 2.9" in availability.reason
    assert availability.install_hint == 'pip install "torchao==0.13.*"'
    assert availability.details["torch_pairing"] == "unsupported"


def test_python_api_only_pairing_is_usable_and_says_so(monkeypatch: Any) -> None:
    _fake_versions(monkeypatch, torchao="0.16.0")
    monkeypatch.setattr(torch, "__version__", "2.9.1")
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context(everywhere=True))
    assert availability.available, availability.reason
    assert availability.details["torch_pairing"] == "python-api-only"
    assert "C++ extensions are skipped" in availability.details["torch_pairing_note"]


def test_import_blocked(monkeypatch: Any) -> None:
    _hide_torchao(monkeypatch)
    monkeypatch.setitem(sys.modules, "torchao", None)
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context())
    assert not availability.available
    assert "is installed but does not import: ModuleNotFoundError: import of torchao halted" in (
        availability.reason
    )
    assert "--force-reinstall" in availability.install_hint


def test_import_raising_oserror_reports_the_loader_message(
    monkeypatch: Any, tmp_path: Path
) -> None:
    # A torchao whose native library is missing fails inside its own __init__.
    package = tmp_path / "torchao"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise OSError('libcudart.so.12: cannot open shared object file: No such file')\n"
    )
    _hide_torchao(monkeypatch)
    monkeypatch.syspath_prepend(str(tmp_path))
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context())
    assert not availability.available
    assert "OSError: libcudart.so.12: cannot open shared object file" in availability.reason


def test_extension_report_from_a_real_import() -> None:
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context(everywhere=True))
    assert availability.available, availability.reason
    assert availability.details["cpp_extensions"]
    assert availability.sdk_versions["torchao"]


def test_fp8_needs_a_gpu() -> None:
    availability = TorchAOProvider(Scheme.FP8).probe(_context("cpu"))
    assert not availability.available
    assert "8.9+" in availability.reason
    assert "download.pytorch.org/whl/cu" in availability.install_hint


def test_cuda_target_without_cuda(monkeypatch: Any) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context("cuda"))
    assert not availability.available
    assert "sees no CUDA device" in availability.reason


@pytest.mark.parametrize(
    ("scheme", "capability", "available", "needle"),
    [
        (Scheme.FP8, (8, 6), False, "8.9+"),
        (Scheme.FP8, (9, 0), True, None),
        (Scheme.INT4_WEIGHT_ONLY, (7, 5), False, "8.0+"),
        (Scheme.INT4_WEIGHT_ONLY, (8, 0), True, None),
        (Scheme.INT8_DYNAMIC, (7, 5), True, None),
    ],
)
def test_gpu_generation_gates(
    monkeypatch: Any,
    scheme: Scheme,
    capability: tuple[int, int],
    available: bool,
    needle: str | None,
) -> None:
    _fake_gpu(monkeypatch, capability)
    availability = TorchAOProvider(scheme).probe(_context("cuda", everywhere=True))
    assert availability.available is available, availability.reason
    if needle:
        assert needle in availability.reason
        assert f"{capability[0]}.{capability[1]}" in availability.reason


def test_int4_on_cuda_uses_tinygemm_in_bf16(monkeypatch: Any) -> None:
    _fake_gpu(monkeypatch, (9, 0))
    availability = TorchAOProvider(Scheme.INT4_WEIGHT_ONLY).probe(_context("cuda"))
    assert "tile_packed_to_4d" in availability.details["layout"]


def test_missing_cuda_device_index(monkeypatch: Any) -> None:
    _fake_gpu(monkeypatch, (9, 0))
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context("cuda:3"))
    assert not availability.available
    assert "cuda:3 does not exist" in availability.reason


def test_unsupported_device_type() -> None:
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context("mps"))
    assert not availability.available
    assert "cpu and cuda" in availability.reason


def test_probe_never_raises(monkeypatch: Any) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("metadata store is corrupt")

    monkeypatch.setattr(provider_module, "check_distribution", boom)
    availability = TorchAOProvider(Scheme.INT8_DYNAMIC).probe(_context())
    assert not availability.available
    assert "metadata store is corrupt" in availability.reason


def test_a_target_without_an_index_asks_the_current_gpu(monkeypatch: Any) -> None:
    """Target ``cuda`` runs on torch's current device, so that device's generation decides."""
    capabilities = {0: (8, 6), 1: (9, 0)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capabilities[index])
    assert TorchAOProvider(Scheme.FP8).probe(_context("cuda", everywhere=True)).available
    assert not TorchAOProvider(Scheme.FP8).probe(_context("cuda:0", everywhere=True)).available
