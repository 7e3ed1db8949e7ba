"""Torch tensors handed to runtimes that read numpy arrays (ONNX Runtime, OpenVINO...).

Such a runtime reads a tensor's memory through ``tensor.numpy()``: a view, no copy, for
a host tensor that needs no gradient and is contiguous. :func:`numpy_view` makes any
tensor so (copying only where it must), and :data:`NUMPY_DTYPES` are the dtypes a
runtime can be fed that way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    import numpy as np

#: The dtypes array runtimes take as numpy views of torch tensors: the floating, signed
#: integer, ``uint8`` and ``bool`` types numpy shares with torch (``bfloat16`` and the
#: float8 types have no numpy type).
NUMPY_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)


def numpy_view(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """A numpy array over ``tensor``'s memory that a runtime can read: the tensor itself
    where it is a contiguous host tensor needing no gradient, else a detached, host or
    contiguous copy (only the copies it needs). Inference tensors (made under
    ``torch.inference_mode()``) work alike."""
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return tensor.numpy()
