"""Torch tensors read as numpy arrays: by runtimes that take numpy (ONNX Runtime,
OpenVINO...), and by checks that must not wake torch's thread pool.

Such a runtime reads a tensor's memory through ``tensor.numpy()``: a view, no copy, for
a host tensor that needs no gradient and is contiguous. :func:`numpy_view` makes any
tensor so (copying only where it must), and :data:`NUMPY_DTYPES` are the dtypes a
runtime can be fed that way. :func:`count_nonfinite` counts NaN and infinite values
without running a torch kernel on a host tensor; :func:`any_nonfinite` answers whether
there is one, as cheaply as can be (it runs on every served call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from numpy.typing import NDArray

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


def numpy_view(tensor: torch.Tensor) -> NDArray[Any]:
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


#: The exponent bits of the 16-bit float formats numpy cannot read: a value with all of
#: them set is infinite or NaN.
_EXPONENT_BITS = {torch.bfloat16: 0x7F80, torch.float16: 0x7C00}
#: The floating and complex dtypes numpy reads as they are.
_NUMPY_FLOATS = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def count_nonfinite(tensor: torch.Tensor) -> int:
    """How many values of a floating or complex ``tensor`` are NaN or infinite.

    A host tensor is read with numpy, on the calling thread: torch's own ``isfinite``
    runs on its OpenMP pool, whose threads then spin-wait for more work and take the
    cores from whatever runs next. In a race on a 2-core CPU that halved the measured
    speed of the OpenVINO plan whose calls the check followed (2.9 ms back to back, 6 ms
    after a torch kernel, on a transformer encoder layer). A device tensor is checked on
    its device."""
    if tensor.device.type != "cpu" or tensor.dtype not in (*_EXPONENT_BITS, *_NUMPY_FLOATS):
        finite = torch.isfinite(tensor)
        return int(finite.numel() - finite.sum())
    if tensor.requires_grad:
        tensor = tensor.detach()
    if tensor.is_conj():
        tensor = tensor.resolve_conj()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    mask = _EXPONENT_BITS.get(tensor.dtype)
    if mask is not None:
        bits = tensor.view(torch.int16).numpy()
        return int(np.count_nonzero((bits & mask) == mask))
    values = tensor.numpy()
    finite = np.isfinite(values)
    return 0 if finite.all() else int(values.size - np.count_nonzero(finite))


#: Floating dtypes ``tensor.numpy()`` reads as they are.
_NUMPY_READS = frozenset((torch.float32, torch.float64, torch.float16))


def any_nonfinite(tensor: torch.Tensor) -> bool:
    """Whether a floating or complex ``tensor`` holds NaN or infinity (``False`` for any
    other dtype). A host float tensor is read through a numpy view on the calling thread
    (a few microseconds for 12k values); anything else goes through
    :func:`count_nonfinite`."""
    dtype = tensor.dtype
    if dtype in _NUMPY_READS and tensor.is_cpu:
        try:
            values = tensor.numpy()  # a view; refused for a tensor needing grad
        except RuntimeError:
            return count_nonfinite(tensor) > 0
        return not bool(np.isfinite(values).all())
    if dtype.is_floating_point or dtype.is_complex:
        return count_nonfinite(tensor) > 0
    return False
