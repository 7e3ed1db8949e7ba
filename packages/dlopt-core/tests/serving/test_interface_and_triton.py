"""The wire interface a server exchanges, and the Triton configuration made from it (no
server here: ``tests/deploy`` runs a real one)."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace

import attrs
import numpy as np
import pytest
import torch

from dlopt import InferenceOptimizer, OptimizationPolicy, WorkloadCase, WorkloadProfile
from dlopt.errors import ConfigurationError, ServingError
from dlopt.serving.interface import BadRequest, interface_of, with_batch_free
from dlopt.serving.triton import infer_function, python_library_env, triton_model
from dlopt.testing.models import StructuredMLP

Case = SimpleNamespace


def _cases(batches=(1, 4), output="dict"):
    model = StructuredMLP(output=output)
    found = []
    for n in batches:
        x = torch.randn(n, 16)
        mask = torch.rand(n, 8) > 0.5
        found.append(Case(args=(x,), kwargs={"mask": mask}, outputs=model(x, mask=mask)))
    return found


def test_the_interface_names_positional_keyword_and_output_tensors():
    interface = with_batch_free(interface_of(_cases()), 0)
    assert [(s.name, s.dtype, s.shape) for s in interface.inputs] == [
        ("arg0", "float32", (-1, 16)),
        ("mask", "bool", (-1, 8)),
    ]
    assert [(s.name, s.shape) for s in interface.outputs] == [
        ("out0", (-1, 8)),
        ("out1", (-1,)),
        ("out2", (-1,)),
    ]
    assert interface.positional == 1 and interface.usable
    assert interface.describe().startswith("arg0: float32[*, 16], mask: bool[*, 8] -> ")


def test_a_mapping_of_tensors_keeps_its_keys():
    cases = [Case(args=(torch.ones(2, 3),), kwargs={}, outputs={"logits": torch.ones(2, 5)})]
    assert [s.name for s in interface_of(cases).outputs] == ["logits"]


def test_a_model_taking_a_flag_has_no_wire_interface():
    cases = [Case(args=(torch.ones(2, 3), True), kwargs={}, outputs=torch.ones(2))]
    interface = interface_of(cases)
    assert not interface.usable and "args[1] = bool" in interface.note


def _body(**arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_requests_are_checked_against_the_interface():
    interface = with_batch_free(interface_of(_cases()), 0)
    x = np.zeros((3, 16), np.float32)
    mask = np.ones((3, 8), bool)
    args, kwargs = interface.read_request(_body(arg0=x, mask=mask))
    assert args[0].shape == (3, 16) and kwargs["mask"].dtype == torch.bool
    problems = {
        "float64, expected float32": _body(arg0=x.astype(np.float64), mask=mask),
        "size 15 in dimension 1, expected 16": _body(arg0=np.zeros((3, 15), np.float32), mask=mask),
        "missing mask": _body(arg0=x),
        "unexpected extra": _body(arg0=x, mask=mask, extra=x),
        "not a readable .npz": b"not an archive",
        "without pickle": _body(arg0=np.array([{"a": 1}], dtype=object), mask=mask),
    }
    for expected, body in problems.items():
        with pytest.raises(BadRequest, match=expected):
            interface.read_request(body)


def test_responses_carry_the_outputs_by_name():
    cases = _cases()
    interface = with_batch_free(interface_of(cases), 0)
    data = np.load(io.BytesIO(interface.write_response(cases[1].outputs)))
    assert list(data.keys()) == ["out0", "out1", "out2"]
    np.testing.assert_array_equal(data["out0"], cases[1].outputs["logits"].detach().numpy())


# ------------------------------------------------------------------ Triton


def _decision(sizes=(1, 8), families=(), dim=0):
    model = torch.nn.Linear(4, 2)
    cases = [
        Case(args=(torch.ones(n, 4),), kwargs={}, outputs=model(torch.ones(n, 4))) for n in sizes
    ]
    calls = []

    def decide(x):
        calls.append(int(x.shape[0]))
        return model(x)

    serving = SimpleNamespace(
        interface=with_batch_free(interface_of(cases), dim),
        raced_batch_sizes=tuple(sizes),
        served_families=tuple(families),
        batch_dim=dim,
    )
    report = SimpleNamespace(serving=serving, selected_plan="fast")
    return SimpleNamespace(report=report, __call__=decide), decide, calls, model


class _Decision:
    def __init__(self, *args):
        self.report, self._decide, self.calls, self.model = args

    def __call__(self, *args, **kwargs):
        return self._decide(*args, **kwargs)


def _bound(**kwargs):
    fake, decide, calls, model = _decision(**kwargs)
    return _Decision(fake.report, decide, calls, model)


def test_the_triton_model_takes_its_batching_from_the_race():
    decision = _bound()
    model = triton_model(decision, max_delay_ms=1.5)
    assert model.max_batch_size == 8 and model.preferred_batch_sizes == (1, 8)
    assert model.max_queue_delay_us == 1500 and model.pad_to == (1, 8)
    assert [(s.name, s.shape) for s in model.inputs] == [("arg0", (4,))]
    assert [(s.name, s.shape) for s in model.outputs] == [("out0", (2,))]
    dynamic = triton_model(_bound(families=("any",)), max_batch_size=32)
    assert dynamic.max_batch_size == 32 and dynamic.pad_to == ()
    unbatched = triton_model(_bound(dim=1))
    assert unbatched.max_batch_size == 0 and unbatched.inputs[0].shape == (-1, -1)


def test_a_static_plan_is_called_at_a_raced_size_and_the_pad_rows_dropped():
    decision = _bound()
    infer = infer_function(decision, triton_model(decision))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = infer(arg0=x)
    assert decision.calls == [8]
    with torch.no_grad():
        expected = decision.model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out["out0"], expected, rtol=1e-6)


def test_a_decision_without_an_interface_is_refused():
    decision = _bound()
    decision.report.serving.interface = attrs.evolve(
        decision.report.serving.interface, note="the model takes args[1] = bool"
    )
    with pytest.raises(ServingError, match="cannot be bound to Triton: the model takes"):
        triton_model(decision)


def test_the_library_path_names_this_interpreters_libpython(monkeypatch):
    env = python_library_env({"LD_LIBRARY_PATH": "/somewhere"})
    if env:  # an interpreter with a shared libpython
        assert env["LD_LIBRARY_PATH"].endswith(":/somewhere")
        assert python_library_env(env) == {}  # already there


def test_a_decision_serves_batched_with_its_raced_sizes():
    model = StructuredMLP().eval()
    workload = WorkloadProfile(
        cases=(
            WorkloadCase("b1", args=(torch.randn(1, 16),)),
            WorkloadCase("b4", args=(torch.randn(4, 16),)),
        )
    )
    decision = InferenceOptimizer("cpu", OptimizationPolicy(include=("eager_fp32",))).select(
        model, workload
    )
    assert decision.report.serving.raced_batch_sizes == (1, 4)
    with pytest.raises(ConfigurationError, match="max_delay_ms"):
        decision.batched(max_delay_ms=-1)
    batched = decision.batched(max_delay_ms=20)
    inputs = [torch.randn(1, 16) for _ in range(4)]
    results = [None] * 4

    def call(i):
        with torch.inference_mode():
            results[i] = batched(inputs[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    for x, out in zip(inputs, results):
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)
    assert decision.health().calls == 4
    decision.close()  # stops the batcher too
    assert not batched._thread.is_alive()
