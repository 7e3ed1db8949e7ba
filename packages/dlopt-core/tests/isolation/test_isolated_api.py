"""What an isolated selection accepts: a model a fresh process can rebuild, tensors it
can pass as files; everything else is a clear error before any worker starts."""

from __future__ import annotations

import faulty_plans
import pytest
import torch
from faulty_plans import isolated_policy, optimizer_with

from dlopt.errors import ConfigurationError
from dlopt.isolation.transfer import (
    call_factory,
    policy_from_json,
    policy_to_json,
    read_workload,
    reference_of,
    weights_sha256,
    write_workload,
)
from dlopt.platform.serialization import dumps, parse_strict_json
from dlopt.settings.workload import WorkloadCase, WorkloadProfile


def test_a_live_module_is_refused_naming_the_alternatives():
    model, workload = faulty_plans.tiny_model()
    with pytest.raises(ConfigurationError, match=r"module:function.*isolation='in_process'"):
        optimizer_with(policy=isolated_policy()).select(model, workload)


def test_a_factory_defined_in_a_function_is_refused():
    def local_factory():
        return faulty_plans.tiny_model()

    with pytest.raises(ConfigurationError, match="not a module-level name"):
        optimizer_with(policy=isolated_policy()).select(local_factory)


def test_a_provider_class_that_cannot_be_imported_by_name_is_refused():
    class Local(faulty_plans.FaultyPlan):
        name = "local"

    with pytest.raises(ConfigurationError, match=r"provider .local.*module level"):
        optimizer_with(Local, policy=isolated_policy("local")).select(faulty_plans.tiny_model)


def test_module_level_names_round_trip():
    assert reference_of(faulty_plans.tiny_model, "f") == "faulty_plans:tiny_model"
    assert reference_of(faulty_plans.FastPlan, "p") == "faulty_plans:FastPlan"


def test_the_policy_crosses_as_strict_json():
    policy = isolated_policy("x", build_timeout_s=7.5, plan_options={"x": {"a": 1}})
    text = dumps(policy_to_json(policy))
    assert policy_from_json(parse_strict_json(text)) == policy


def test_workload_tensors_cross_in_an_npz_without_pickle(tmp_path):
    x = torch.randn(2, 3)
    workload = WorkloadProfile(
        [
            WorkloadCase("a", args=(x, x.to(torch.bfloat16)), weight=3.0),
            WorkloadCase("b", args=(torch.arange(4),), kwargs={"mask": torch.ones(4).bool()}),
        ],
        name="w",
        expected_calls=10,
    )
    layout = write_workload(workload, tmp_path / "inputs.npz")
    back = read_workload(parse_layout(layout), tmp_path / "inputs.npz", "cpu")
    assert [(c.name, c.weight) for c in back.cases] == [("a", 3.0), ("b", 1.0)]
    assert (back.name, back.expected_calls) == ("w", 10)
    a, b = back.cases
    assert torch.equal(a.args[0], x) and a.args[1].dtype is torch.bfloat16
    assert torch.equal(a.args[1], x.to(torch.bfloat16))
    assert torch.equal(b.args[0], torch.arange(4)) and b.kwargs["mask"].dtype is torch.bool


def parse_layout(layout):
    """The layout as the worker receives it: through strict JSON."""
    from dlopt.isolation.transfer import WorkloadSpec
    from dlopt.platform.serialization import from_jsonable

    return from_jsonable(parse_strict_json(dumps(layout)), WorkloadSpec)


def test_a_batched_workload_crosses_with_its_batch_sizes(tmp_path):
    # The worker's max_throughput objective needs the profile's batch sizes back.
    workload = WorkloadProfile.batched(torch.randn(3, 1), batch_dim=1, max_batch_size=4)
    layout = write_workload(workload, tmp_path / "inputs.npz")
    back = read_workload(parse_layout(layout), tmp_path / "inputs.npz", "cpu")
    assert (back.batch_sizes, back.batch_dim, back.fit_to_memory) == ((1, 2, 4), 1, True)
    assert [c.args[0].shape for c in back.cases] == [(3, 1), (3, 2), (3, 4)]
    assert back.weights == pytest.approx(workload.weights)


def test_inputs_that_are_not_tensors_cannot_cross(tmp_path):
    workload = WorkloadProfile([WorkloadCase("a", args=(torch.ones(2), 3))])
    with pytest.raises(ConfigurationError, match=r"argument 1 is a int.*only tensors"):
        write_workload(workload, tmp_path / "inputs.npz")


def broken_factory():
    raise RuntimeError("weights not found")


def test_a_factory_that_raises_is_the_users_error_said_plainly():
    with pytest.raises(ConfigurationError, match="raised RuntimeError: weights not found"):
        optimizer_with(policy=isolated_policy()).select(broken_factory)


def test_a_factory_that_draws_its_weights_at_random_builds_the_same_model_every_call():
    # The host and every worker call it: their models must agree for the host to judge
    # the worker's winner (an ONNX file carries the worker's weights).
    torch.manual_seed(5)
    expected_next = torch.rand(3)
    torch.manual_seed(5)
    first, _ = call_factory(faulty_plans.tiny_model, "faulty_plans:tiny_model")
    second, _ = call_factory(faulty_plans.tiny_model, "faulty_plans:tiny_model")
    assert weights_sha256(first) == weights_sha256(second)
    assert torch.equal(torch.rand(3), expected_next)  # the caller's generator is put back


def test_a_factory_whose_weights_differ_in_the_worker_is_refused_plainly():
    with pytest.raises(ConfigurationError, match="other weights in the isolated worker"):
        optimizer_with(policy=isolated_policy()).select(faulty_plans.per_process_model)
