"""Whether this CPU has the int8 dot-product instructions int8 x int8 kernels need."""

from __future__ import annotations

from dlopt.plugin import cpu_flags

#: CPU flags of the int8 dot-product instructions oneDNN's and Inductor's int8 kernels use.
INT8_DOT_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")
INT8_CPU_HINT = (
    "run on a CPU with AVX-512 VNNI, AVX-VNNI or AMX (Intel Cascade Lake, Alder Lake, "
    "Sapphire Rapids or newer; AMD Zen 4 or newer); the fp32 plans and "
    "torchao_int8_weight_only_inductor run here"
)


def int8_dot_flags() -> tuple[str, ...]:
    """This CPU's int8 dot-product flags (see :data:`INT8_DOT_FLAGS`)."""
    flags = cpu_flags() or frozenset()
    return tuple(f for f in INT8_DOT_FLAGS if f in flags)
