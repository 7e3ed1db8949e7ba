"""Plan options (declared, checked before any build, reaching the session) and loading a
saved plan back without the model (the files of a built plan plus its JSON metadata)."""

from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from dlopt import InferenceOptimizer, OptimizationPolicy
from dlopt.errors import ConfigurationError, ProviderBuildError
from dlopt.platform.serialization import strict_jsonable
from dlopt.plugin import PreparedCase, ProviderContext, Role
from dlopt.settings.policy import describe_options
from dlopt.settings.workload import WorkloadProfile
from dlopt_onnxruntime import OnnxRuntimeProvider
from dlopt_onnxruntime.options import OrtInt8Options, OrtOptions
from dlopt_onnxruntime.plugin import default_providers
from dlopt_onnxruntime.provider import SPINNING_KEY

pytestmark = pytest.mark.slow

CPU = "CPUExecutionProvider"


def _provider(name: str) -> OnnxRuntimeProvider:
    return next(p for p in default_providers() if p.name == name)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)
    ).eval()


class DictOut(torch.nn.Module):
    """Keyword input, a dict holding a tuple out."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, *, bias: torch.Tensor) -> dict[str, Any]:
        y = self.fc(x) + bias
        return {"y": y, "extra": (y.argmax(dim=-1), y.sum())}


Pair = collections.namedtuple("Pair", "a b")


class NamedOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> Pair:
        return Pair(self.fc(x), x.sum())


def _cases(model: torch.nn.Module, *inputs: tuple[tuple[Any, ...], dict[str, Any]]) -> tuple:
    """Prepared cases as core hands them to build: inputs plus eager reference outputs."""
    with torch.no_grad():
        return tuple(
            PreparedCase(f"case{i}", args, kwargs, model(*args, **kwargs))
            for i, (args, kwargs) in enumerate(inputs)
        )


def _context(tmp_path: Path, model: torch.nn.Module, *inputs: Any, **kwargs: Any) -> Any:
    return ProviderContext(artifact_dir=tmp_path, cases=_cases(model, *inputs), **kwargs)


def _as_bundle(plan: Any, directory: Path) -> Path:
    """The plan's artifacts copied side by side under their file names, as a bundle holds them."""
    directory.mkdir()
    for path in plan.artifacts.values():
        shutil.copyfile(path, directory / Path(path).name)
    return directory


def _recorded(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as a report records it and reads it back (strict JSON)."""
    return json.loads(json.dumps(strict_jsonable(metadata), allow_nan=False))


# ------------------------------------------------------------------ declared options


def test_every_plan_declares_options_with_defaults_and_help() -> None:
    for provider in default_providers():
        assert provider.role is Role.CHALLENGER
        described = {o.name: o for o in describe_options(provider.options_type)}
        assert {"graph_optimization_level", "intra_op_threads", "allow_spinning"} <= set(
            described
        ), provider.name
        assert all(o.help for o in described.values()), provider.name
        assert described["graph_optimization_level"].default == "all"
        is_int8 = provider.name == "onnxruntime_cpu_int8"
        assert ("int8_op_types" in described) is is_int8, provider.name
    int8 = {o.name: o for o in describe_options(_provider("onnxruntime_cpu_int8").options_type)}
    assert int8["int8_op_types"].default == ("MatMul", "Attention", "LSTM")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"graph_optimisation_level": "basic"}, r"no option 'graph_optimisation_level'"),
        ({"graph_optimization_level": "fast"}, r"graph_optimization_level.*'fast'"),
        ({"intra_op_threads": "two"}, r"intra_op_threads"),
        ({"intra_op_threads": 0}, r"intra_op_threads"),
        ({"allow_spinning": "yes"}, r"allow_spinning"),
    ],
)
def test_a_bad_option_is_refused_naming_the_plan_before_anything_is_built(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, Any], expected: str
) -> None:
    built: list[str] = []
    monkeypatch.setattr(
        OnnxRuntimeProvider, "build", lambda self, model, context: built.append(self.name)
    )
    policy = OptimizationPolicy(
        include=("onnxruntime_cpu",), plan_options={"onnxruntime_cpu": values}
    )
    with pytest.raises(ConfigurationError, match=expected) as info:
        InferenceOptimizer("cpu", policy).select_signature(_mlp(), torch.randn(2, 16))
    assert "onnxruntime_cpu" in str(info.value)
    assert built == []


def test_an_int8_option_on_the_fp32_plan_is_refused() -> None:
    policy = OptimizationPolicy(
        include=("onnxruntime_cpu",),
        plan_options={"onnxruntime_cpu": {"int8_op_types": ["MatMul"]}},
    )
    with pytest.raises(ConfigurationError, match=r"plan 'onnxruntime_cpu' has no option"):
        InferenceOptimizer("cpu", policy).select_signature(_mlp(), torch.randn(2, 16))


def test_options_reach_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime as ort

    seen: list[Any] = []
    real = ort.InferenceSession

    def recording(path: Any, sess_options: Any = None, **kwargs: Any) -> Any:
        seen.append(sess_options)
        return real(path, sess_options=sess_options, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", recording)
    model = _mlp()
    options = OrtOptions(
        graph_optimization_level="basic",
        intra_op_threads=1,
        allow_spinning=True,
        session_config={"session.use_env_allocators": "0"},
    )
    context = _context(tmp_path, model, ((torch.randn(3, 16),), {}), options=options)
    plan = _provider("onnxruntime_cpu").build(model, context)
    plan.close()
    session_options = seen[-1]
    assert session_options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert session_options.intra_op_num_threads == 1
    assert session_options.get_session_config_entry(SPINNING_KEY) == "1"
    assert session_options.get_session_config_entry("session.use_env_allocators") == "0"
    recorded = plan.metadata["session_options"]
    assert recorded["graph_optimization_level"] == "basic"
    assert recorded["intra_op_num_threads"] == 1
    assert plan.metadata["intra_op_allow_spinning"] == "1"


def test_cpu_plans_default_to_no_spinning_and_the_option_turns_it_on() -> None:
    cpu = _provider("onnxruntime_cpu")
    assert cpu._config(OrtOptions()) == {SPINNING_KEY: "0"}
    assert cpu._config(OrtOptions(allow_spinning=True))[SPINNING_KEY] == "1"
    cuda = _provider("onnxruntime_cuda")
    assert SPINNING_KEY not in cuda._config(OrtOptions())
    assert cuda._config(OrtOptions(allow_spinning=False))[SPINNING_KEY] == "0"
    # A variant registered in code keeps its own session config under the options.
    variant = OnnxRuntimeProvider("ort_spin", session_config={SPINNING_KEY: 1})
    assert variant._config(OrtOptions())[SPINNING_KEY] == "1"


def test_int8_op_types_option_decides_what_is_quantized(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    inputs = ((torch.randn(1, 3, 8, 8),), {})
    provider = _provider("onnxruntime_cpu_int8")
    default = _context(tmp_path / "a", model, inputs)
    with pytest.raises(ProviderBuildError, match=r"quantized 0 of 1 compute ops.*int8_op_types"):
        provider.build(model, default)
    conv = OrtInt8Options(int8_op_types=("MatMul", "Conv"), exporter="torchscript")
    plan = provider.build(model, _context(tmp_path / "b", model, inputs, options=conv))
    try:
        assert plan.metadata["quantized_ops"] == 1
        assert plan.metadata["transform"]["op_types"] == ["MatMul", "Conv"]
    finally:
        plan.close()


# ------------------------------------------------------------------ build from core's context


class ExportOnly(torch.nn.Module):
    """Runs eagerly only while ``eager`` is set; exporters trace it any time."""

    eager = True

    def __init__(self) -> None:
        super().__init__()
        self.net = _mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.eager or torch.compiler.is_exporting() or torch.jit.is_tracing()):
            raise AssertionError("build ran the model eagerly")
        return self.net(x)


def test_build_uses_the_prepared_cases_and_their_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No eager run and no probe inside build: core hands both over."""
    model = ExportOnly().eval()
    cases = _cases(model, ((torch.randn(2, 16),), {}), ((torch.randn(5, 16),), {}))
    model.eager = False
    provider = _provider("onnxruntime_cpu")
    availability = provider.probe(ProviderContext(artifact_dir=tmp_path))
    monkeypatch.setattr(OnnxRuntimeProvider, "probe", lambda *_: pytest.fail("build probed again"))
    context = ProviderContext(artifact_dir=tmp_path, cases=cases, availability=availability)
    plan = provider.build(model, context)
    try:
        assert plan.metadata["dynamic_axes"] == {"input_0": [0]}  # from the two cases
        with torch.inference_mode():
            torch.testing.assert_close(plan(cases[1].args[0]), cases[1].reference)
    finally:
        plan.close()


# ------------------------------------------------------------------ load


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Any:
    torch.manual_seed(0)
    model = DictOut().eval()
    gen = torch.Generator().manual_seed(1)
    inputs = [
        ((torch.randn(b, 8, generator=gen),), {"bias": torch.randn(b, 4, generator=gen)})
        for b in (2, 6)
    ]
    root = tmp_path_factory.mktemp("built")
    options = OrtOptions(graph_optimization_level="extended", intra_op_threads=1)
    plan = _provider("onnxruntime_cpu").build(
        model, _context(root / "plans", model, *inputs, options=options)
    )
    yield model, inputs, plan, root
    plan.close()


def test_a_saved_plan_loads_and_serves_without_the_model(built: Any, tmp_path: Path) -> None:
    model, inputs, plan, _ = built
    directory = _as_bundle(plan, tmp_path / "bundle")
    options = OrtOptions(graph_optimization_level="extended", intra_op_threads=1)
    context = ProviderContext(artifact_dir=tmp_path / "scratch", options=options)
    loaded = _provider("onnxruntime_cpu").load(directory, _recorded(plan.metadata), context)
    try:
        assert loaded.metadata["export_source"] == "loaded"
        assert loaded.metadata["session_options"]["graph_optimization_level"] == "extended"
        assert loaded.metadata["session_options"]["intra_op_num_threads"] == 1
        assert {Path(p).parent for p in loaded.artifacts.values()} == {directory}
        with torch.inference_mode():
            for args, kwargs in inputs:
                torch.testing.assert_close(loaded(*args, **kwargs), model(*args, **kwargs))
            # A batch size no case had: the dynamic axes came back with the layout.
            args = (torch.randn(3, 8),)
            kwargs = {"bias": torch.randn(3, 4)}
            torch.testing.assert_close(loaded(*args, **kwargs), model(*args, **kwargs))
    finally:
        loaded.close()


def test_the_int8_plan_loads_its_quantized_model(tmp_path: Path) -> None:
    model = _mlp()
    x = torch.randn(4, 16)
    provider = _provider("onnxruntime_cpu_int8")
    plan = provider.build(model, _context(tmp_path / "plans", model, ((x,), {})))
    try:
        directory = _as_bundle(plan, tmp_path / "bundle")
        loaded = provider.load(
            directory, _recorded(plan.metadata), ProviderContext(artifact_dir=tmp_path / "s")
        )
        with torch.inference_mode():
            torch.testing.assert_close(loaded(x), plan(x))  # the same int8 graph
        assert loaded.metadata["session_model"] == "model.int8.onnx"
        loaded.close()
    finally:
        plan.close()


def test_a_missing_model_file_is_a_clear_error(built: Any, tmp_path: Path) -> None:
    _, _, plan, _ = built
    directory = _as_bundle(plan, tmp_path / "bundle")
    (directory / "model.onnx").unlink()
    with pytest.raises(ProviderBuildError, match=r"model\.onnx.*missing"):
        _provider("onnxruntime_cpu").load(
            directory, _recorded(plan.metadata), ProviderContext(artifact_dir=tmp_path)
        )


@pytest.mark.parametrize("bad", ["../model.onnx", "/etc/passwd", "", None])
def test_metadata_naming_a_path_is_refused(built: Any, tmp_path: Path, bad: Any) -> None:
    _, _, plan, _ = built
    directory = _as_bundle(plan, tmp_path / "bundle")
    metadata = {**_recorded(plan.metadata), "session_model": bad}
    with pytest.raises(ProviderBuildError, match="session_model"):
        _provider("onnxruntime_cpu").load(
            directory, metadata, ProviderContext(artifact_dir=tmp_path)
        )


def test_metadata_of_another_execution_provider_is_refused(built: Any, tmp_path: Path) -> None:
    _, _, plan, _ = built
    directory = _as_bundle(plan, tmp_path / "bundle")
    metadata = {**_recorded(plan.metadata), "execution_provider": "CUDAExecutionProvider"}
    with pytest.raises(ProviderBuildError, match="CUDAExecutionProvider"):
        _provider("onnxruntime_cpu").load(
            directory, metadata, ProviderContext(artifact_dir=tmp_path)
        )


class OtherNamedOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[:, :4], x.sum()


def test_outputs_that_only_code_could_rebuild_come_back_from_the_models_own_outputs(
    tmp_path: Path,
) -> None:
    """A namedtuple class cannot be recreated from JSON without importing code: from a
    bundle alone the saved plan is refused; given the model's reference outputs (a plan
    cache hit) they give the structure, once they match the record."""
    model = NamedOut().eval()
    x = torch.randn(2, 8)
    provider = _provider("onnxruntime_cpu")
    plan = provider.build(model, _context(tmp_path / "plans", model, ((x,), {})))
    try:
        assert "Pair" in plan.metadata["load_problem"]
        directory = _as_bundle(plan, tmp_path / "bundle")
        recorded = _recorded(plan.metadata)
        with pytest.raises(
            ProviderBuildError, match=r"cannot be loaded without the model's own outputs.*Pair"
        ):
            provider.load(directory, recorded, ProviderContext(artifact_dir=tmp_path))
        # Another model's outputs (a plain tuple of as many tensors) do not stand in.
        other = OtherNamedOut().eval()
        with pytest.raises(ProviderBuildError, match=r"not the saved plan's"):
            provider.load(directory, recorded, _context(tmp_path / "other", other, ((x,), {})))
        y = torch.randn(2, 8)  # other values than the build saw
        loaded = provider.load(directory, recorded, _context(tmp_path / "load", model, ((y,), {})))
        try:
            with torch.inference_mode():
                out, expected = loaded(y), model(y)
            assert type(out) is Pair
            torch.testing.assert_close(out.a, expected.a, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(out.b, expected.b, rtol=1e-5, atol=1e-4)
        finally:
            loaded.close()
    finally:
        plan.close()


def test_a_direct_build_with_only_a_workload_still_works(tmp_path: Path) -> None:
    """Callers outside a race (scripts, older test suites) may pass a workload only."""
    model = _mlp()
    x = torch.randn(2, 16)
    context = ProviderContext(artifact_dir=tmp_path, workload=WorkloadProfile.single(x))
    plan = _provider("onnxruntime_cpu").build(model, context)
    try:
        with torch.inference_mode():
            torch.testing.assert_close(plan(x), model(x))
    finally:
        plan.close()
