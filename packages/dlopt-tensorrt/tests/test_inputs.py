"""Workload -> Torch-TensorRT Input translation (no SDK needed)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dlopt.plugin import WorkloadCase, WorkloadError, WorkloadProfile
from dlopt_tensorrt.inputs import derive_inputs, example_tensor, to_trt_input


def _case(name: str, *args: Any, weight: float = 1.0, **kwargs: Any) -> WorkloadCase:
    return WorkloadCase(name, args=args, kwargs=kwargs, weight=weight)


def test_single_signature_is_static() -> None:
    spec = derive_inputs(WorkloadProfile.single(torch.randn(2, 3, 8, 8)), ["x"])
    (x,) = spec.args
    assert (x.name, x.min_shape, x.opt_shape, x.max_shape) == (
        "x",
        (2, 3, 8, 8),
        (2, 3, 8, 8),
        (2, 3, 8, 8),
    )
    assert not spec.is_dynamic


def test_varying_dims_get_a_range_and_opt_is_the_heaviest_case() -> None:
    workload = WorkloadProfile(
        (
            _case("b1", torch.randn(1, 3, 32, 32), weight=1),
            _case("b4", torch.randn(4, 3, 32, 48), weight=5),
            _case("b16", torch.randn(16, 3, 32, 32), weight=2),
        )
    )
    spec = derive_inputs(workload, ["images"])
    (x,) = spec.args
    assert x.min_shape == (1, 3, 32, 32)
    assert x.opt_shape == (4, 3, 32, 48)
    assert x.max_shape == (16, 3, 32, 48)
    assert spec.opt_case == "b4"
    assert spec.is_dynamic
    assert spec.describe()[0]["dynamic"] is True


def test_every_argument_gets_its_own_spec_named_after_forward() -> None:
    workload = WorkloadProfile(
        (
            _case(
                "a", torch.randn(2, 5), torch.ones(2, 5, dtype=torch.long), mask=torch.ones(2, 5)
            ),
            _case(
                "b", torch.randn(3, 7), torch.ones(3, 7, dtype=torch.long), mask=torch.ones(3, 7)
            ),
        )
    )
    spec = derive_inputs(workload, ["x"])  # fewer names than arguments: the rest get argN
    assert [s.name for s in spec.args] == ["x", "arg1"]
    assert spec.args[1].dtype == torch.long
    assert spec.kwargs["mask"].min_shape == (2, 5) and spec.kwargs["mask"].max_shape == (3, 7)


@pytest.mark.parametrize(
    ("cases", "match"),
    [
        ((_case("a", torch.randn(2, 3)), _case("b", torch.randn(2, 3, 1))), "number of dimensions"),
        (
            (_case("a", torch.randn(2, 3)), _case("b", torch.randn(2, 3).half())),
            "disagree on dtype",
        ),
        (
            (_case("a", torch.randn(2, 3)), _case("b", torch.randn(2, 3), torch.randn(1))),
            "positional",
        ),
        ((_case("a", torch.randn(2, 3), 4),), "is a int; TensorRT plans take tensor arguments"),
        ((_case("a", torch.randn(2)), _case("b", torch.randn(2), k=torch.randn(1))), "keyword"),
    ],
)
def test_signatures_one_engine_cannot_serve_are_refused(
    cases: tuple[WorkloadCase, ...], match: str
) -> None:
    with pytest.raises(WorkloadError, match=match):
        derive_inputs(WorkloadProfile(cases))


class _Recorder:
    def Input(self, **kwargs: Any) -> dict[str, Any]:  # mirrors torch_tensorrt.Input
        return kwargs


def test_to_trt_input_static_and_dynamic() -> None:
    x = torch.randn(2, 4)
    static = derive_inputs(WorkloadProfile.single(x), ["x"]).args[0]
    made = to_trt_input(static, _Recorder())
    assert made.pop("torch_tensor") is x  # traced with the case's own tensor
    assert made == {"shape": (2, 4), "dtype": torch.float32, "name": "x"}

    dynamic = derive_inputs(
        WorkloadProfile((_case("a", torch.randn(1, 4), weight=3), _case("b", torch.randn(8, 4)))),
        ["x"],
    ).args[0]
    made = to_trt_input(dynamic, _Recorder())
    assert (
        made["min_shape"] == (1, 4) and made["opt_shape"] == (1, 4) and made["max_shape"] == (8, 4)
    )
    # Traced at the maximum: torch.export would freeze a batch traced at size 1.
    assert made["torch_tensor"].shape == (8, 4)


def test_example_tensor_keeps_integer_dtypes() -> None:
    spec = derive_inputs(WorkloadProfile.single(torch.ones(2, 3, dtype=torch.int32)), ["ids"]).args[
        0
    ]
    assert example_tensor(spec).dtype == torch.int32


def test_opt_shape_policies_choose_the_case_tensorrt_tunes_for() -> None:
    cases = (
        _case("b4", torch.randn(4, 8), weight=5),
        _case("b1", torch.randn(1, 8), weight=1),
        _case("b16", torch.randn(16, 8), weight=1),
    )
    assert derive_inputs(cases).opt_case == "b4"
    assert derive_inputs(cases, opt_shape="largest").args[0].opt_shape == (16, 8)
    assert derive_inputs(cases, opt_shape="smallest").opt_case == "b1"


def test_no_cases_is_refused() -> None:
    with pytest.raises(WorkloadError, match="has no cases"):
        derive_inputs(())


def test_a_batched_workload_gets_one_engine_range_over_its_batch_sizes() -> None:
    # The throughput objective races one build per plan at every batch size: the engine
    # declares the range it serves, and the report shows it.
    workload = WorkloadProfile.batched(torch.randn(1, 3, 8, 8), batch_sizes=(1, 4, 16))
    spec = derive_inputs(workload, ["x"], "largest")
    (x,) = spec.args
    assert (x.min_shape, x.max_shape, x.opt_shape) == ((1, 3, 8, 8), (16, 3, 8, 8), (16, 3, 8, 8))
    assert spec.shape_support() == (
        "one TensorRT engine with a shape range: x [1, 3, 8, 8] to [16, 3, 8, 8] "
        "(tuned for [16, 3, 8, 8]), opt case 'batch_16'"
    )
    fixed = derive_inputs(WorkloadProfile.single(torch.randn(2, 3)), ["x"])
    assert fixed.shape_support() == "one TensorRT engine at fixed input shapes"
