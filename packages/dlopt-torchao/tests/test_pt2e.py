"""Static int8 through PT2E: probe layers, options, calibration file reading, and a real
build calibrated on the workload's cases plus a calibration file.

The plan is offered where the CPU has VNNI or AMX-INT8; its build path runs on any x86 CPU
(the x86 quantizer and oneDNN's int8 kernels work on AVX2 too, only slower), so the build
is checked here on a tiny conv net, compiled once for the module.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from dlopt.plugin import (
    BuiltPlan,
    ExecutionTarget,
    Precision,
    PreparedCase,
    ProviderBuildError,
    ProviderContext,
)
from dlopt.testing import ProviderContractSuite
from dlopt.testing.contexts import build_context, case_outputs
from dlopt.testing.models import Elementwise, SmallConvNet
from dlopt.validation import validate_outputs
from dlopt_torchao import cpu
from dlopt_torchao.provider import probe_inductor
from dlopt_torchao.pt2e import PT2EOptions, PT2EStaticInt8Provider, read_calibration_file


def _context(model: nn.Module, *inputs: torch.Tensor, **options: Any) -> ProviderContext:
    return build_context(model, *inputs, options=PT2EOptions(**options))


def _skip_without_inductor() -> None:
    """Skip with the compiled plans' own probe reason (no dlopt-fx, no C++ compiler)."""
    availability = probe_inductor("cpu")
    if not availability.available:
        pytest.skip(f"TorchInductor is unavailable here: {availability.reason}")


# -- probe ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "offered"), [(frozenset({"avx2"}), False), (frozenset({"avx2", "amx_int8"}), True)]
)
def test_offered_where_the_cpu_has_vnni_or_amx(
    monkeypatch: pytest.MonkeyPatch, flags: frozenset[str], offered: bool
) -> None:
    _skip_without_inductor()
    monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)
    availability = PT2EStaticInt8Provider().probe(ProviderContext())
    assert availability.available is offered, availability.reason
    assert availability.details["int8_dot_flags"] == ("amx_int8" if offered else "none")
    if not offered:
        assert "no int8 dot-product instructions (VNNI or AMX-INT8)" in availability.reason
        assert "AVX-512 VNNI, AVX-VNNI or AMX" in availability.install_hint


def test_cpu_targets_only() -> None:
    availability = PT2EStaticInt8Provider().probe(ProviderContext(target=ExecutionTarget("cuda")))
    assert not availability.available and "CPU targets only" in availability.reason


# -- options and the calibration file ------------------------------------------------
def test_options_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="calibration_passes must be an integer >= 1"):
        PT2EOptions(calibration_passes=0)
    with pytest.raises(ValueError, match=r"calibration_file must name a \.npz file"):
        PT2EOptions(calibration_file="inputs.pt")


def test_calibration_file_is_read_as_tensors_by_the_shared_reader(tmp_path: Path) -> None:
    """The file's checks are ``dlopt.plugin.read_npz``'s (tested in dlopt-core); here:
    entries come back as tensors, and what is refused is a build error that names the
    option, complex numbers and empty archives included."""
    good = tmp_path / "good.npz"
    np.savez(good, a=np.ones((2, 3), dtype=np.float32), b=np.zeros((1, 3), dtype=np.float32))
    entries = read_calibration_file(str(good))
    assert [(key, tuple(t.shape)) for key, t in entries] == [("a", (2, 3)), ("b", (1, 3))]
    assert all(isinstance(t, torch.Tensor) for _, t in entries)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ProviderBuildError, match=r"calibration_file .* without pickle"):
        read_calibration_file(str(pickled))
    complex_ = tmp_path / "complex.npz"
    np.savez(complex_, z=np.ones(2, dtype=np.complex64))
    with pytest.raises(ProviderBuildError, match="entry 'z' has dtype complex64"):
        read_calibration_file(str(complex_))
    np.savez(tmp_path / "empty.npz")
    with pytest.raises(ProviderBuildError, match="holds no arrays"):
        read_calibration_file(str(tmp_path / "empty.npz"))


def test_calibration_file_needs_a_single_tensor_input(tmp_path: Path) -> None:
    path = tmp_path / "cal.npz"
    np.savez(path, a=np.ones((1, 4), dtype=np.float32))
    context = ProviderContext(
        cases=[PreparedCase("b1", (torch.ones(1, 4),), {"scale": 2.0}, None)],
        options=PT2EOptions(calibration_file=str(path)),
    )
    with pytest.raises(ProviderBuildError, match="one positional tensor per call"):
        PT2EStaticInt8Provider().build(nn.Linear(4, 2).eval(), context)


@pytest.mark.slow
def test_a_calibration_entry_that_does_not_fit_the_model_is_named(tmp_path: Path) -> None:
    path = tmp_path / "cal.npz"
    np.savez(path, wrong=np.ones((2, 7), dtype=np.float32))
    model = nn.Sequential(nn.Linear(4, 2)).eval()
    context = _context(model, torch.randn(2, 4), calibration_file=str(path))
    with pytest.raises(
        ProviderBuildError, match=r"calibration_file entry 'wrong' \(shape \(2, 7\)\)"
    ):
        PT2EStaticInt8Provider().build(model, context)


def test_build_without_cases_says_it_needs_inputs() -> None:
    with pytest.raises(ProviderBuildError, match="calibrates on the workload's inputs"):
        PT2EStaticInt8Provider().build(nn.Linear(4, 2).eval(), ProviderContext())


@pytest.mark.slow
def test_a_model_the_quantizer_leaves_alone_is_rejected() -> None:
    model = Elementwise()
    with pytest.raises(ProviderBuildError, match=r"quantized 0 of 0 compute layers"):
        PT2EStaticInt8Provider().build(model, _context(model, torch.randn(2, 8)))


class _ResidualBlock(nn.Module):
    """A ResNet block: one ``relu`` module called three times, a residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.stem = nn.Conv2d(3, 8, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.relu(self.stem(x))
        out = self.relu(self.conv1(identity))
        out = self.conv2(out)
        out += identity
        return self.relu(out)


def test_each_call_of_a_reused_module_gets_its_own_partition() -> None:
    from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

    from dlopt_torchao.pt2e import _one_partition_per_call

    model = _ResidualBlock().eval()
    graph_module = torch.export.export(model, (torch.randn(1, 3, 8, 8),)).module()
    before = get_source_partitions(graph_module.graph, [nn.ReLU]).get(nn.ReLU, [])
    assert _one_partition_per_call(graph_module, model) == 3  # the relu's calls, not the convs
    after = get_source_partitions(graph_module.graph, [nn.ReLU])[nn.ReLU]
    assert len(after) == 3
    assert all(len(partition.output_nodes) == 1 for partition in after)
    # What the quantizer refused: one partition with three outputs (or none found at all).
    assert len(before) != 3


@pytest.mark.slow
def test_a_residual_block_with_a_reused_relu_quantizes() -> None:
    """The x86 quantizer refused such a block (torchvision's resnet50) with "Input
    partition has more than one output node"."""
    _skip_without_inductor()
    torch.manual_seed(0)
    model = _ResidualBlock().eval()
    gen = torch.Generator().manual_seed(1)
    context = _context(model, torch.randn(2, 3, 8, 8, generator=gen))
    plan = PT2EStaticInt8Provider().build(model, context)
    try:
        assert plan.metadata["quantized_weights"] == 3
        (out,) = case_outputs(plan, context)
        result = validate_outputs(
            out,
            context.cases[0].reference,
            precision=plan.precision,
            output_dtype=None,
            case_name=context.cases[0].name,
        )
        assert result.passed, result.reason
    finally:
        plan.close()


# -- a real build --------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory: Any) -> Any:
    import torch._inductor.config as inductor_config

    _skip_without_inductor()
    before = (inductor_config.freezing, inductor_config.pre_grad_custom_pass)
    torch.manual_seed(0)
    model = SmallConvNet().eval()
    gen = torch.Generator().manual_seed(1)
    calibration = tmp_path_factory.mktemp("cal") / "extra.npz"
    np.savez(calibration, wide=np.random.default_rng(2).normal(size=(3, 3, 16, 16)).astype("f4"))
    context = _context(
        model,
        torch.randn(2, 3, 16, 16, generator=gen),
        torch.randn(4, 3, 16, 16, generator=gen),
        calibration_passes=2,
        calibration_file=str(calibration),
    )
    plan = PT2EStaticInt8Provider().build(model, context)
    yield {
        "plan": plan,
        "context": context,
        "outputs": case_outputs(plan, context),
        "before": before,
        "after": (inductor_config.freezing, inductor_config.pre_grad_custom_pass),
    }
    plan.close()


@pytest.mark.slow
def test_static_int8_plan_passes_the_gate_and_quantized(built: Any) -> None:
    plan = built["plan"]
    assert plan.precision is Precision.INT8
    for case, out in zip(built["context"].cases, built["outputs"]):
        assert not torch.equal(out, case.reference)  # quantized, not a pass-through
        result = validate_outputs(
            out, case.reference, precision=plan.precision, output_dtype=None, case_name=case.name
        )
        assert result.passed, result.reason


@pytest.mark.slow
def test_static_int8_plan_records_its_calibration(built: Any) -> None:
    meta = built["plan"].metadata
    assert meta["quantized_weights"] == 2  # the conv and the linear
    assert meta["quantizable_layer_types"] == {"Conv2d": 1, "Linear": 1}
    # Two passes over two cases and the file's one entry.
    assert meta["calibration_calls"] == 6
    assert meta["calibration_cases"] == ["b2", "b4"]
    assert meta["calibration_file_entries"] == 1
    assert meta["inductor_options"]["freezing"] is True
    assert meta["dynamic_dims"] == {"0": [0]}


@pytest.mark.slow
def test_static_int8_plan_comes_back_from_its_recorded_calibration(
    built: Any, tmp_path: Path
) -> None:
    """A bundle or cache record keeps no inputs: the rebuild reads the recorded observer
    parameters and example shapes instead, and is the same int8 plan."""
    record_file = built["plan"].artifacts["calibration"]
    record = json.loads(record_file.read_text())
    assert record["example"]["args"] == [{"shape": [4, 3, 16, 16], "dtype": "float32"}]
    assert len(record["observers"]) == 4  # weights and inputs of the conv and the linear
    saved = tmp_path / "saved"
    saved.mkdir()
    shutil.copy(record_file, saved / record_file.name)
    torch.manual_seed(0)
    model = SmallConvNet().eval()  # the same weights, a new object
    again = ProviderContext(
        artifact_dir=tmp_path / "artifacts", options=PT2EOptions(), saved_plan_dir=saved
    )
    with PT2EStaticInt8Provider().build(model, again) as rebuilt:
        assert rebuilt.metadata["calibration_record"] == "reused from the saved plan"
        assert rebuilt.metadata["calibration_calls"] == 0
        for case, first in zip(built["context"].cases, built["outputs"]):
            with torch.inference_mode():
                out = rebuilt(*case.args)
            assert torch.allclose(out, first, atol=1e-6), (out - first).abs().max()


# -- the selected plan saved as a program (an AOTInductor package) ---------------------
@pytest.fixture(scope="module")
def packaged(built: Any, tmp_path_factory: Any) -> dict[str, Any]:
    """The built plan's int8 graph packaged once for the module (an ahead-of-time
    compile: tens of seconds)."""
    directory = tmp_path_factory.mktemp("program")
    metadata = PT2EStaticInt8Provider().save_program(built["plan"], directory, built["context"])
    assert metadata is not None
    return {"directory": directory, "metadata": metadata}


def _package_sources(path: Path) -> str:
    """The C++ the package was generated as (its wrapper and kernels), concatenated."""
    with zipfile.ZipFile(path) as archive:
        return "".join(
            archive.read(name).decode() for name in archive.namelist() if name.endswith(".cpp")
        )


@pytest.mark.slow
def test_the_program_is_the_int8_graph_lowered_as_the_compiled_plan_lowers_it(
    packaged: Any,
) -> None:
    from dlopt_torchao.pt2e import _import_quantizer

    metadata = packaged["metadata"]
    assert json.loads(json.dumps(metadata)) == metadata  # strict JSON, as records hold it
    expected = {"freezing": True}
    if _import_quantizer()[2] is not None:
        expected["pre_grad_custom_pass"] = "QuantLiftUp"
    assert metadata["inductor_options"] == expected
    assert metadata["dynamic_dims"] == {"0": [0]}  # the cases' batch sizes differ
    # Frozen weights, prepacked for oneDNN's int8 convolution and linear kernels: what the
    # x86 lowering makes of the quantized conv and linear (without freezing it would not).
    code = _package_sources(packaged["directory"] / metadata["file"])
    assert "qconv_pointwise" in code and "qlinear_pointwise" in code


@pytest.mark.slow
def test_the_loaded_program_serves_what_the_compiled_plan_served(built: Any, packaged: Any) -> None:
    from dlopt_fx.compiled import COMPILED_SERVING

    provider = PT2EStaticInt8Provider()
    plan = provider.load_program(
        packaged["directory"], packaged["metadata"], ProviderContext(options=PT2EOptions())
    )
    assert plan.precision is Precision.INT8 and plan.serving == COMPILED_SERVING
    assert plan.metadata["served_as"] == "aotinductor_package"
    cases = built["context"].cases
    # On inference tensors in inference mode (the compiled plan copies such inputs first:
    # its compile fails on them; the package compiles nothing), and on ordinary ones.
    with torch.inference_mode():
        inference = [tuple(t.clone() for t in case.args) for case in cases]
        assert all(t.is_inference() for args in inference for t in args)
        served = [plan(*args) for args in inference]
    with torch.no_grad():
        ordinary = [plan(*case.args) for case in cases]
    for case, out, again, compiled in zip(cases, served, ordinary, built["outputs"]):
        assert torch.allclose(out, compiled, atol=1e-5), (out - compiled).abs().max()
        assert torch.equal(out, again)
        result = validate_outputs(
            out, case.reference, precision=plan.precision, output_dtype=None, case_name=case.name
        )
        assert result.passed, result.reason


@pytest.mark.slow
def test_a_fresh_process_serves_the_program_without_model_torchao_or_compiler(
    built: Any, packaged: Any, tmp_path: Path
) -> None:
    cases = built["context"].cases
    torch.save(
        {"inputs": [case.args for case in cases], "expected": built["outputs"]},
        tmp_path / "cases.pt",
    )
    (tmp_path / "metadata.json").write_text(json.dumps(packaged["metadata"]))
    script = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        import torch
        from dlopt.plugin import ProviderContext
        from dlopt_torchao.pt2e import PT2EStaticInt8Provider
        data = torch.load({str(tmp_path / "cases.pt")!r})
        metadata = json.loads(Path({str(tmp_path / "metadata.json")!r}).read_text())
        plan = PT2EStaticInt8Provider().load_program(
            Path({str(packaged["directory"])!r}), metadata, ProviderContext()
        )
        with torch.inference_mode():
            worst = max(
                (plan(*args) - want).abs().max().item()
                for args, want in zip(data["inputs"], data["expected"])
            )
        print(json.dumps({{
            "worst": worst,
            "imported": [m for m in ("torchao", "torch._dynamo", "torch._inductor")
                         if m in sys.modules],
        }}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["worst"] < 1e-5
    assert result["imported"] == []


def test_a_plan_without_its_source_is_not_packaged_and_says_why(tmp_path: Path) -> None:
    pytest.importorskip("dlopt_fx")
    from dlopt_torchao.pt2e import OrdinaryTensorInputs

    closed = BuiltPlan(runner=OrdinaryTensorInputs(object()), precision=Precision.INT8)
    context = ProviderContext(options=PT2EOptions())
    with pytest.raises(
        ProviderBuildError, match="torchao_pt2e_int8_static: the plan was closed, or not built"
    ):
        PT2EStaticInt8Provider().save_program(closed, tmp_path, context)
    off = ProviderContext(options=PT2EOptions(aot_package=False))
    assert PT2EStaticInt8Provider().save_program(closed, tmp_path, off) is None


def test_a_calibration_record_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    from dlopt_torchao.calibration import (
        apply_recorded_qparams,
        example_from_record,
        read_calibration_record,
    )

    (tmp_path / "calibration.json").write_text('{"format": 99}')
    with pytest.raises(ProviderBuildError, match="not a calibration record of format 1"):
        read_calibration_record(tmp_path, "p")
    (tmp_path / "calibration.json").write_text('{"format": 1, "observers": {"a": NaN}}')
    with pytest.raises(ProviderBuildError, match=r"unreadable.*NaN is not a finite number"):
        read_calibration_record(tmp_path, "p")
    assert read_calibration_record(None, "p") is None
    with pytest.raises(ProviderBuildError, match=r"example args\[0\] is malformed"):
        example_from_record({"example": {"args": [{"shape": [-1], "dtype": "float32"}]}}, "p")
    observed = nn.Module()
    observed.activation_post_process_0 = torch.ao.quantization.MinMaxObserver()
    with pytest.raises(ProviderBuildError, match=r"no longer match.*1 observers now, 0 recorded"):
        apply_recorded_qparams(observed, {"observers": {}}, "p")


@pytest.mark.slow
def test_static_int8_build_leaves_inductor_config_alone(built: Any) -> None:
    assert built["after"] == built["before"]


class TestPT2EStaticInt8Contract(ProviderContractSuite):
    """Runs where the CPU has VNNI or AMX-INT8; skips elsewhere with the probe's reason."""

    distribution = "dlopt-torchao"
    entry_point = "torchao"
    heavy_modules = ("torchao",)
    max_probe_seconds = 30.0
    supports_dynamic_shapes = True

    def make_provider(self) -> PT2EStaticInt8Provider:
        return PT2EStaticInt8Provider()


@pytest.mark.slow
class TestPT2EStaticInt8ContractOnAnyCpu(TestPT2EStaticInt8Contract):
    """The same checks on a CPU without VNNI, its probe told otherwise: export, the x86
    quantizer and oneDNN's int8 kernels run there too, only slower."""

    @pytest.fixture(autouse=True)
    def _claim_int8_dot_products(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if not cpu.int8_dot_flags():
            flags = (cpu.cpu_flags() or frozenset()) | {"amx_int8"}
            monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)
