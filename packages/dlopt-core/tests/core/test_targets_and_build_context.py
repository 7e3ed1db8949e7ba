"""Plugin API 2.0 beyond CUDA: any torch device type, host-side targets, plans that bring
their own synchronize and device-memory figure, and what build receives."""

from __future__ import annotations

import types

import pytest
import torch

from dlopt.contract.provider import BuiltPlan, ProviderAvailability, ProviderContext
from dlopt.errors import ConfigurationError
from dlopt.evidence.report import load_report
from dlopt.measurement import MemoryProbe
from dlopt.platform.serialization import dumps
from dlopt.precision import Precision
from dlopt.settings.policy import DeploymentConstraints
from dlopt.settings.target import ExecutionTarget
from dlopt.testing.models import StructuredMLP


@pytest.mark.parametrize("device", ["xla:0", "privateuseone:0", "meta", "cuda:1"])
def test_any_device_type_torch_knows_is_a_target(device):
    ExecutionTarget(device).check_known()


def test_a_device_torch_does_not_know_needs_its_extension_or_a_host():
    target = ExecutionTarget("npu:0")  # forms are checked here; torch's knowledge later
    with pytest.raises(ConfigurationError, match=r"torch does not know.*'npu'.*host='cpu'"):
        target.check_known()
    host_side = ExecutionTarget("npu:0", host="cpu")
    host_side.check_known()
    assert host_side.input_device == "cpu" and host_side.torch_device() == torch.device("cpu")


def test_a_report_naming_a_vendor_device_loads_anywhere(race, x, tmp_path):
    decision = race.optimizer(race.fake("eager_fp32", 1e-3)).select_signature(StructuredMLP(), x)
    report = decision.report
    import attrs

    text = dumps(attrs.evolve(report, target=ExecutionTarget("npu:0")))
    path = tmp_path / "r.json"
    path.write_text(text)
    assert load_report(path).target.device == "npu:0"


class AsyncNpu:
    """A host-side plan whose runner only enqueues: the time passes when it synchronizes."""

    name = "async_npu"
    precision = Precision.FP32

    def __init__(self, advance, latency_s: float, device_mb: float = 12.0) -> None:
        self.advance = advance
        self.latency_s = latency_s
        self.device_mb = device_mb
        self.pending = 0
        self.syncs = 0
        self.context: ProviderContext | None = None

    def probe(self, context):
        return ProviderAvailability.ok(details={"npu": "0"})

    def build(self, model, context):
        self.context = context

        def runner(*args, **kwargs):
            self.pending += 1
            return model(*args, **kwargs)

        def synchronize():
            self.syncs += 1
            self.advance(self.pending * self.latency_s)
            self.pending = 0

        return BuiltPlan(
            runner=runner,
            synchronize=synchronize,
            device_memory_mb=lambda: self.device_mb,
        )


def test_an_asynchronous_plan_is_timed_through_its_own_synchronize(race, x):
    npu = AsyncNpu(race.clock.advance, latency_s=1e-3)
    optimizer = race.optimizer(race.fake("eager_fp32", 3e-3), npu)
    optimizer.target = ExecutionTarget("npu:0", host="cpu")
    decision = optimizer.select_signature(StructuredMLP(), x)

    evidence = decision.report.candidate("async_npu")
    assert npu.syncs > 0
    # Timed at enqueue it would look free; synchronized it costs its 1 ms.
    assert evidence.latency_ms == pytest.approx(1.0, rel=0.05)
    assert evidence.speedup_vs_eager.point == pytest.approx(3.0, rel=0.1)
    assert evidence.device_memory_mb == 12.0
    assert decision.report.target.host == "cpu"


def test_the_plans_device_memory_is_held_to_max_peak_memory(race, x):
    npu = AsyncNpu(race.clock.advance, latency_s=1e-3, device_mb=5000.0)
    optimizer = race.optimizer(
        race.fake("eager_fp32", 3e-3),
        npu,
        constraints=DeploymentConstraints(max_peak_memory_mb=1000),
    )
    decision = optimizer.select_signature(StructuredMLP(), x)
    evidence = decision.report.candidate("async_npu")
    assert evidence.status == "rejected" and evidence.error.stage == "constraint"
    assert "device memory" in evidence.error.message and "5000" in evidence.error.message


def test_build_receives_prepared_inputs_reference_outputs_probe_result_and_options(race, x):
    import attrs

    @attrs.frozen
    class NpuOptions:
        cores: int = attrs.field(default=1, metadata={"help": "NPU cores to use"})

    npu = AsyncNpu(race.clock.advance, latency_s=1e-3)
    npu.options_type = NpuOptions
    model = StructuredMLP()
    optimizer = race.optimizer(race.fake("eager_fp32", 3e-3), npu)
    optimizer.policy = attrs.evolve(optimizer.policy, plan_options={"async_npu": {"cores": 4}})
    decision = optimizer.select_signature(model, x)

    context = npu.context
    assert context is not None
    (case,) = context.cases
    assert torch.equal(case.args[0], x) and case.args[0] is not x  # a private copy
    torch.testing.assert_close(case.reference, model(x))
    assert context.availability.available and context.availability.details == {"npu": "0"}
    assert context.options == NpuOptions(cores=4)
    assert decision.report.candidate("async_npu").options == {"cores": 4}


def test_unknown_or_ill_typed_options_are_refused_before_anything_is_built(race, x):
    import attrs

    @attrs.frozen
    class NpuOptions:
        cores: int = 1

    npu = AsyncNpu(race.clock.advance, latency_s=1e-3)
    npu.options_type = NpuOptions
    eager = race.fake("eager_fp32", 3e-3)
    for bad, needle in (
        ({"async_npu": {"core": 2}}, "no option 'core'"),
        ({"async_npu": {"cores": "two"}}, "cores: expected an integer"),
        ({"async_nup": {"cores": 2}}, "did you mean 'async_npu'"),
        ({"eager_fp32": {"x": 1}}, "takes no options"),
    ):
        optimizer = race.optimizer(eager, npu)
        optimizer.policy = attrs.evolve(optimizer.policy, plan_options=bad)
        with pytest.raises(ConfigurationError, match=needle):
            optimizer.select_signature(StructuredMLP(), x)
    assert eager.builds == 0 and npu.context is None


class FakeCudaTensor(torch.Tensor):
    """Stands for a tensor on a CUDA device (a subclass survives clone and copy)."""


def test_a_cuda_target_hands_build_the_inputs_prepared_for_cuda(race, x, monkeypatch):
    """A fake CUDA target on a machine without a GPU: 'moving to cuda' tags a copy, and
    the provider must receive those tagged tensors, not the user's originals."""
    from dlopt.api.optimizer import InferenceOptimizer
    from dlopt.validation import inputs

    real_move = inputs.move_to_device

    def fake_move(obj, device, **kwargs):
        if device is not None and torch.device(device).type == "cuda":

            def tag(tensor, _path):
                return tensor.clone().as_subclass(FakeCudaTensor)

            return inputs.map_input_tensors(obj, tag, path=kwargs.get("path", "args"))
        return real_move(obj, device, **kwargs)

    monkeypatch.setattr(inputs, "move_to_device", fake_move)
    monkeypatch.setattr(ExecutionTarget, "torch_device", lambda self: torch.device(self.device))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(InferenceOptimizer, "_check_model_device", lambda self, model: None)
    monkeypatch.setattr(inputs, "_same_device", lambda tensor, device: False)
    from dlopt.evidence import assembly as evidence
    from dlopt.evidence import provenance as runtime

    cpu_runtime = runtime.inspect_runtime(ExecutionTarget("cpu"), with_providers=False)
    monkeypatch.setattr(evidence, "inspect_runtime", lambda *a, **k: cpu_runtime)

    npu = AsyncNpu(race.clock.advance, latency_s=1e-3)
    optimizer = race.optimizer(race.fake("eager_fp32", 3e-3), npu)
    optimizer.target = ExecutionTarget("cuda")
    optimizer.select_signature(StructuredMLP(), x)

    (case,) = npu.context.cases
    assert isinstance(case.args[0], FakeCudaTensor), "build got inputs not prepared for cuda"
    assert not isinstance(x, FakeCudaTensor)


def test_cuda_peak_memory_adds_the_device_wide_figure(monkeypatch):
    free = iter([8_000 * 2**20, 7_000 * 2**20])
    fake_cuda = types.SimpleNamespace(
        is_available=lambda: True,
        synchronize=lambda device=None: None,
        reset_peak_memory_stats=lambda device=None: None,
        memory_allocated=lambda device=None: 0,
        max_memory_allocated=lambda device=None: 100 * 2**20,
        mem_get_info=lambda device=None: (next(free), 16_000 * 2**20),
    )
    monkeypatch.setattr(torch, "cuda", fake_cuda)
    probe = MemoryProbe("cuda:0").start()
    result = probe.stop()
    assert result.mb == pytest.approx(100.0)
    # An arena PyTorch cannot see (1000 MiB taken outside its allocator) shows here.
    assert result.device_wide_mb == pytest.approx(1000.0)
