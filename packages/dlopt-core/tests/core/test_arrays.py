"""``dlopt.plugin.numpy_view`` and ``NUMPY_DTYPES``: tensors as the numpy arrays that
ONNX Runtime and OpenVINO read; ``count_nonfinite``: the race's output check, off torch's
thread pool."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlopt.plugin import NUMPY_DTYPES, numpy_view


def test_a_contiguous_host_tensor_is_viewed_without_a_copy() -> None:
    tensor = torch.arange(6.0).reshape(2, 3)
    array = numpy_view(tensor)
    tensor[0, 0] = 42.0
    assert array[0, 0] == 42.0 and array.shape == (2, 3)


def test_a_tensor_needing_gradients_or_strided_is_copied_as_needed() -> None:
    weights = torch.ones(2, 3, requires_grad=True)
    np.testing.assert_array_equal(numpy_view(weights), np.ones((2, 3), dtype=np.float32))
    transposed = torch.arange(6.0).reshape(2, 3).t()
    array = numpy_view(transposed)
    assert array.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(array, transposed.numpy())


def test_an_inference_tensor_is_viewed_like_any_other() -> None:
    with torch.inference_mode():
        tensor = torch.ones(3)
    np.testing.assert_array_equal(numpy_view(tensor), np.ones(3, dtype=np.float32))


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_every_numpy_dtype_views_as_the_same_type(dtype: torch.dtype) -> None:
    array = numpy_view(torch.zeros(2, dtype=dtype))
    assert torch.from_numpy(array).dtype == dtype


def test_dtypes_numpy_cannot_view_are_not_listed() -> None:
    assert torch.bfloat16 not in NUMPY_DTYPES
    with pytest.raises(TypeError):
        torch.zeros(1, dtype=torch.bfloat16).numpy()


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.complex64],
)
def test_count_nonfinite_counts_nan_and_infinities_as_torch_does(dtype):
    from dlopt.platform.arrays import count_nonfinite

    values = torch.randn(64, 33, generator=torch.Generator().manual_seed(0)).to(dtype)
    values[3, 4], values[10, 0], values[63, 32] = float("nan"), float("inf"), float("-inf")
    values[5, 5] = 65504.0 if dtype is torch.float16 else 3.0e38  # finite, the largest
    expected = int((~torch.isfinite(values)).sum())
    assert expected == 3
    assert count_nonfinite(values) == expected
    assert count_nonfinite(values.t()) == expected  # not contiguous
    assert count_nonfinite(values[:, :5]) == 2  # a slice: NaN at (3, 4), inf at (10, 0)
    assert count_nonfinite(torch.ones(4, dtype=dtype, requires_grad=dtype.is_floating_point)) == 0


def test_count_nonfinite_runs_no_torch_kernel_on_a_host_tensor(monkeypatch):
    # torch's isfinite would wake its OpenMP pool, whose spinning threads slow the next
    # plan's timed call: the race's check must not run it on host outputs.
    from dlopt.pipeline.raced_calls import LastOutput

    def refused(*args, **kwargs):
        raise AssertionError("torch.isfinite ran on a host tensor")

    out = torch.randn(8, 16)
    out[0, 0] = float("nan")
    recorder = LastOutput(lambda: out, (), {}, "case")
    monkeypatch.setattr(torch, "isfinite", refused)
    recorder()
    with pytest.raises(RuntimeError, match="raced call 1 on case 'case' returned 1 non-finite"):
        recorder.check([out])
