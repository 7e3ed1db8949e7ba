"""Every probe state: the GPU and NPU plans on this machine, bf16 on a CPU without it,
openvino or nncf missing or too old, targets the plans cannot serve. The device layer is
also run against a fake OpenVINO whose plugins fail or list devices as real ones do."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dlopt.cli.app import main as dlopt_main
from dlopt.plugin import ExecutionTarget, ProviderContext
from dlopt_openvino import clear_probe_cache
from dlopt_openvino import probe as probe_module
from dlopt_openvino.plugin import default_providers

PLANS = {p.name: p for p in default_providers()}


@pytest.fixture(autouse=True)
def _fresh_probes() -> Any:
    clear_probe_cache()
    yield
    clear_probe_cache()


def _probe(name: str, target: ExecutionTarget | None = None) -> Any:
    # A new instance: a provider caches its answers per target.
    provider = type(PLANS[name])(name, PLANS[name].device_type, PLANS[name].precision)
    return provider.probe(ProviderContext(target=target or ExecutionTarget("cpu")))


def _hide(monkeypatch: pytest.MonkeyPatch, **versions: str | None) -> None:
    """The metadata layer sees ``versions`` for these distributions (None: absent)."""
    real = probe_module.distribution_version
    monkeypatch.setattr(
        probe_module,
        "distribution_version",
        lambda name: versions[name] if name in versions else real(name),
    )


def test_every_plan_declares_its_precision() -> None:
    assert {name: p.precision.value for name, p in PLANS.items()} == {
        "openvino_cpu": "fp32",
        "openvino_cpu_bf16": "bf16",
        "openvino_cpu_int8": "int8",
        "openvino_gpu": "fp16",
        "openvino_npu": "fp16",
    }


@pytest.mark.parametrize(("name", "device"), [("openvino_gpu", "GPU"), ("openvino_npu", "NPU")])
def test_gpu_and_npu_plans_say_why_they_are_unavailable_here(name: str, device: str) -> None:
    availability = _probe(name)
    if availability.available:
        pytest.skip(f"OpenVINO lists {device} here: {availability.details}")
    reason = availability.reason or ""
    # Package and version, then which device and what its plugin said.
    assert reason.startswith("OpenVINO 20"), reason
    assert f"{device} plugin" in reason, reason
    assert availability.sdk_versions["openvino"]
    assert availability.install_hint and "driver" in availability.install_hint.lower()


def _fake_openvino(listing: Any) -> Any:
    """A stand-in for the openvino module whose Core answers device queries with
    ``listing(device)`` (a list, or an exception to raise)."""

    class Core:
        def get_property(self, device: str, name: str) -> Any:
            if name == "AVAILABLE_DEVICES":
                answer = listing(device)
                if isinstance(answer, Exception):
                    raise answer
                return answer
            if name == "FULL_DEVICE_NAME":
                return f"Intel(R) {device}"
            return ["FP32", "FP16"]

    class FakeOpenVino:
        __version__ = "2026.4.1-22982-fake"

    FakeOpenVino.Core = Core  # type: ignore[attr-defined]
    return FakeOpenVino


@pytest.fixture
def fake_core(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The probe's shared Core is the fake's (reset afterwards)."""

    def install(listing: Any) -> Any:
        ov = _fake_openvino(listing)
        monkeypatch.setattr(probe_module, "_core", ov.Core())
        return ov

    return install


def test_a_plugin_that_cannot_load_names_the_missing_library(fake_core: Any) -> None:
    error = RuntimeError(
        "Exception from src/inference/src/cpp/core.cpp:77:\nCannot load library "
        '"libopenvino_intel_gpu_plugin.so": libOpenCL.so.1: cannot open shared object file'
    )
    ov = fake_core(lambda device: error)
    check = probe_module.check_device(ov, "GPU")
    assert not check.usable
    assert check.reason == (
        "OpenVINO 2026.4.1's GPU plugin cannot be loaded: Cannot load library "
        '"libopenvino_intel_gpu_plugin.so": libOpenCL.so.1: cannot open shared object file'
    )
    assert "intel-opencl-icd" in (check.hint or "")


def test_a_plugin_that_lists_no_device_says_whether_the_driver_node_exists(
    fake_core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ov = fake_core(lambda device: [])
    monkeypatch.setattr(probe_module.glob, "glob", lambda pattern: [])
    check = probe_module.check_device(ov, "NPU")
    assert not check.usable
    assert "lists no NPU device; no /dev/accel/accel* exists" in (check.reason or "")
    clear_probe_cache()
    monkeypatch.setattr(probe_module.glob, "glob", lambda pattern: ["/dev/accel/accel0"])
    check = probe_module.check_device(ov, "NPU")
    assert "/dev/accel/accel0 exists, so the driver may be too old" in (check.reason or "")
    assert "linux-npu-driver" in (check.hint or "")


def test_a_listed_device_is_usable_and_an_absent_index_is_not(fake_core: Any) -> None:
    ov = fake_core(lambda device: ["0", "1"])
    check = probe_module.check_device(ov, "GPU", 1)
    assert check.usable and check.device == "GPU.1" and check.full_name == "Intel(R) GPU.1"
    missing = probe_module.check_device(ov, "GPU", 3)
    assert not missing.usable and "lists GPU devices 0, 1, not 3" in (missing.reason or "")


def test_gpu_plan_on_a_host_side_gpu_target_probes_that_device(
    fake_core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ov = fake_core(lambda device: ["0", "1"])
    monkeypatch.setattr(probe_module, "import_openvino", lambda: (ov, None))
    availability = _probe("openvino_gpu", ExecutionTarget("gpu:1", host="cpu"))
    assert availability.available, availability.reason
    assert availability.details["device"] == "GPU.1"


@pytest.mark.parametrize(
    ("flags", "available"),
    [
        (frozenset({"avx2", "fma"}), False),
        (frozenset({"avx2", "avx512f", "avx512_vnni"}), False),
        (frozenset({"avx2", "avx512f", "avx512_bf16"}), True),
        (frozenset({"avx2", "amx_bf16", "amx_tile"}), True),
    ],
)
def test_bf16_needs_native_bf16(
    monkeypatch: pytest.MonkeyPatch, flags: frozenset[str], available: bool
) -> None:
    monkeypatch.setattr(probe_module, "cpu_flags", lambda: flags)
    availability = _probe("openvino_cpu_bf16")
    assert availability.available is available, availability.reason
    if not available:
        assert "no native bf16 arithmetic (neither AVX512-BF16 nor AMX-BF16" in (
            availability.reason or ""
        )
        assert "Sapphire Rapids" in (availability.install_hint or "")
    # The fp32 plan does not care.
    assert _probe("openvino_cpu").available


@pytest.mark.parametrize(
    ("flags", "saturates"),
    [
        (frozenset({"avx2", "fma"}), True),
        (frozenset({"avx2", "avx_vnni"}), False),
        (frozenset({"avx512f", "avx512_vnni"}), False),
        (None, True),
    ],
)
def test_int8_saturates_on_x86_without_vnni(
    monkeypatch: pytest.MonkeyPatch, flags: frozenset[str] | None, saturates: bool
) -> None:
    monkeypatch.setattr(probe_module.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(probe_module, "cpu_flags", lambda: flags)
    assert probe_module.int8_saturates() is saturates
    monkeypatch.setattr(probe_module.platform, "machine", lambda: "aarch64")
    assert probe_module.int8_saturates() is False


def test_without_cpu_flags_openvinos_capabilities_decide_bf16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(probe_module, "cpu_flags", lambda: None)
    assert probe_module.bf16_problem(("FP32", "BF16", "INT8")) is None
    problem = probe_module.bf16_problem(("FP32", "INT8"))
    assert problem is not None and "does not list BF16" in problem


def test_missing_openvino_makes_every_plan_unavailable_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hide(monkeypatch, openvino=None)
    for name in PLANS:
        availability = _probe(name)
        assert not availability.available
        assert availability.reason == (
            "openvino is not installed; dlopt-openvino needs it (pip install dlopt-openvino)"
        )
        assert availability.install_hint == "pip install dlopt-openvino"


def test_an_old_openvino_is_named_with_the_range_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, openvino="2024.6.0")
    availability = _probe("openvino_cpu")
    assert not availability.available
    assert "openvino 2024.6.0 is installed but dlopt-openvino needs openvino>=2026.4" in (
        availability.reason or ""
    )


def test_missing_nncf_leaves_only_the_int8_plan_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hide(monkeypatch, nncf=None)
    int8 = _probe("openvino_cpu_int8")
    assert not int8.available
    assert "nncf is not installed; openvino_cpu_int8 (NNCF quantization) needs it" in (
        int8.reason or ""
    )
    assert int8.install_hint == "pip install dlopt-openvino"
    assert _probe("openvino_cpu").available


@pytest.mark.parametrize(
    ("name", "target", "needle"),
    [
        ("openvino_cpu", ExecutionTarget("cuda:0"), "inputs live on cuda:0"),
        ("openvino_cpu", ExecutionTarget("npu:0", host="cpu"), "race it on a CPU target"),
        ("openvino_npu", ExecutionTarget("gpu:0", host="cpu"), "ExecutionTarget('npu:N'"),
    ],
)
def test_targets_the_plans_cannot_serve_are_named(
    name: str, target: ExecutionTarget, needle: str
) -> None:
    availability = _probe(name, target)
    assert not availability.available
    assert needle in (availability.reason or "")


def test_dlopt_providers_without_openvino_lists_the_plans_unavailable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `dlopt providers` prints on a machine where dlopt-openvino is installed but
    openvino is not (the metadata layer says so; nothing is imported)."""
    _hide(monkeypatch, openvino=None)
    monkeypatch.setenv("DLOPT_PLUGINS", "openvino")
    assert dlopt_main(["providers"]) == 0
    table = capsys.readouterr().out
    for name in PLANS:
        line = next(ln for ln in table.splitlines() if ln.startswith(name + " "))
        assert "dlopt-openvino" in line and " unavailable " in line, line
        assert "openvino is not installed" in line, line
        assert line.rstrip().endswith("pip install dlopt-openvino"), line
    assert dlopt_main(["providers", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["providers"]}
    for name in PLANS:
        availability = rows[name]["availability"]
        assert availability["available"] is False
        assert availability["install_hint"] == "pip install dlopt-openvino"
