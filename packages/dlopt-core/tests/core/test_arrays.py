"""``dlopt.plugin.numpy_view`` and ``NUMPY_DTYPES``: tensors as the numpy arrays that
ONNX Runtime and OpenVINO read."""

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
