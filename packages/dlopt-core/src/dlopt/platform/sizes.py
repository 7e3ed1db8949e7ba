"""Sizes of the inputs dlopt makes: what torch can index and what memory can hold.

Shared by ``dlopt select``'s preflight (``--input``/``--case``) and the fleet's spec
check (``[[jobs.workload]]``), so both refuse the same shapes and weights with the same
rule. Python integers do not overflow, so every count here is exact however large.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

#: The largest dimension or element count torch can index (a C ``int64``).
MAX_ELEMENTS = 2**63 - 1
#: Bytes per element of the dtypes dlopt generates random inputs for.
ITEMSIZE = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "uint8": 1,
    "bool": 1,
}


def shape_fault(shape: Sequence[int]) -> str | None:
    """What is wrong with ``shape`` as an input's size, or ``None``: a dimension of 0 (a
    batch of size 0), a negative one, or more elements than torch can index."""
    if any(d == 0 for d in shape):
        return (
            "has a dimension of 0 (a batch of size 0): no plan can be timed on it; give "
            "every dimension at least 1"
        )
    if any(d < 0 for d in shape):
        return "has a negative dimension; give every dimension at least 1"
    if any(d > MAX_ELEMENTS for d in shape) or math.prod(shape) > MAX_ELEMENTS:
        return "has more elements than torch can index (2**63 - 1); give smaller dimensions"
    return None


def weights_overflow(weights: Iterable[float]) -> bool:
    """Whether traffic weights (each finite) overflow to infinity when summed."""
    return not math.isfinite(sum(float(w) for w in weights))


def input_bytes(shape: Sequence[int], dtype: str) -> int:
    """The bytes one input of ``shape`` and ``dtype`` (a key of :data:`ITEMSIZE`) takes."""
    return math.prod(shape) * ITEMSIZE[dtype]


def available_memory_bytes() -> int | None:
    """Memory this machine can still hand out (``MemAvailable``), or ``None`` if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def size_text(nbytes: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{nbytes} B"
        size /= 1024
    raise AssertionError("unreachable")


def memory_fault(
    inputs: Sequence[tuple[str, Sequence[int], str]], available: int | None = None
) -> str | None:
    """Why ``inputs`` (``(name, shape, dtype)``) cannot all be allocated now, or ``None``:
    together they need more than the memory available (``available``, default
    :func:`available_memory_bytes`; unknown memory is never a reason)."""
    if available is None:
        available = available_memory_bytes()
    if available is None or not inputs:
        return None
    sizes = [(input_bytes(shape, dtype), name, shape, dtype) for name, shape, dtype in inputs]
    total = sum(size for size, *_ in sizes)
    if total <= available:
        return None
    size, name, shape, dtype = max(sizes, key=lambda item: item[0])
    shape_text = "x".join(str(d) for d in shape)
    return (
        f"the inputs need {size_text(total)} but this machine has {size_text(available)} "
        f"available (case {name!r}, {shape_text} {dtype}, alone needs {size_text(size)}); "
        "give smaller shapes"
    )
