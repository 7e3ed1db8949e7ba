"""Kernel binaries saved with a record's compile caches go back into Inductor's cache
directory only under the names Inductor's layout gives them, never over a file already
there."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlopt.cache.reload import KERNELS_DIR, restore_compile_cache

pytest.importorskip("torch._inductor.runtime.runtime_utils")


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_saved_kernels_land_in_inductors_cache_under_their_own_names(tmp_path, monkeypatch):
    inductor = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
    saved = tmp_path / "record" / KERNELS_DIR
    write(saved / "ab" / "cabcdef.main.so", b"kernel")
    write(saved / "cd" / "ccdxyz.so", b"new")
    write(saved / "x" / "cxyz.so", b"outside the layout")
    write(saved / "ef" / "notes.txt", b"not a binary")
    (saved / "gh").mkdir()
    (saved / "gh" / "cghlink.so").symlink_to(saved / "ab" / "cabcdef.main.so")
    write(inductor / "cd" / "ccdxyz.so", b"already there")

    restore_compile_cache(saved.parent)  # no torch caches saved: only the kernels move

    assert (inductor / "ab" / "cabcdef.main.so").read_bytes() == b"kernel"
    assert (inductor / "cd" / "ccdxyz.so").read_bytes() == b"already there"
    assert not (inductor / "x").exists()
    assert not (inductor / "ef").exists()
    assert not (inductor / "gh").exists()


def test_the_isa_check_library_is_found_by_its_source(tmp_path):
    from torch._inductor.cpu_vec_isa import VecISA

    from dlopt.cache.reload import _isa_check_binaries

    check = write(tmp_path / "th" / "cthcheck.so", b"isa check")
    write(check.with_suffix(".cpp"), VecISA._avx_code.encode())
    kernel = write(tmp_path / "ab" / "cabkernel.so", b"kernel")
    write(kernel.with_suffix(".cpp"), b'extern "C" void kernel() {}')
    write(tmp_path / "cd" / "ccdnobinary.cpp", VecISA._avx_code.encode())  # no binary
    outside = write(tmp_path / "x" / "cxcheck.so", b"outside the layout")
    write(outside.with_suffix(".cpp"), VecISA._avx_code.encode())

    assert _isa_check_binaries(tmp_path) == [check]


def test_the_avx512_and_amx_check_libraries_are_found_too(tmp_path):
    # An AVX-512 CPU also compiles torch's bf16, VNNI and AMX checks: each is saved, so a
    # cache hit on such a CPU compiles none of them again.
    from torch._inductor.cpu_vec_isa import VecAMX, VecAVX512, VecISA

    from dlopt.cache.reload import _isa_check_binaries

    checks = []
    for index, code in enumerate((VecISA._avx_code, VecAVX512._avx512_bf16_code, VecAMX._amx_code)):
        binary = write(tmp_path / f"c{index}" / f"cc{index}check.so", b"isa check")
        write(binary.with_suffix(".cpp"), code.encode())
        checks.append(binary)
    kernel = write(tmp_path / "ab" / "cabkernel.so", b"kernel")
    write(kernel.with_suffix(".cpp"), VecAVX512._avx512_bf16_code.encode() + b"// changed")

    assert _isa_check_binaries(tmp_path) == checks
