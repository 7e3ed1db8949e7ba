"""The one ``.npz`` reader (``dlopt.plugin.read_npz``): what it reads, and every file it
refuses, named with the caller's words and error class."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from dlopt.errors import ConfigurationError
from dlopt.plugin import read_npz


class Refused(Exception):
    pass


def _read(path: Path, **options):
    return read_npz(path, where=f"the file {path.name}", error=Refused, **options)


def _single_npy(path: Path) -> None:
    with path.open("wb") as handle:
        np.save(handle, np.ones(2))


def test_entries_come_back_in_order_as_writable_contiguous_copies(tmp_path: Path) -> None:
    path = tmp_path / "good.npz"
    fortran = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.savez(path, b=fortran, a=np.arange(3, dtype=np.int64))
    entries = _read(path)
    assert [key for key, _ in entries] == ["b", "a"]
    first = entries[0][1]
    assert first.flags.c_contiguous and first.flags.writeable
    np.testing.assert_array_equal(first, fortran)
    torch.from_numpy(first).add_(1)  # a tensor over it may be written to


def test_sizes_are_seen_from_the_headers_before_any_array_is_read(tmp_path: Path) -> None:
    path = tmp_path / "sizes.npz"
    np.savez(path, a=np.zeros((4, 16), np.float32))
    seen = []
    assert len(_read(path, check_sizes=seen.append)) == 1
    assert seen == [[("a", 4 * 16 * 4)]]

    def too_big(sizes):
        raise ConfigurationError("too big")

    with pytest.raises(ConfigurationError, match="too big"):
        _read(path, check_sizes=too_big)


def test_an_empty_archive_reads_as_no_entries(tmp_path: Path) -> None:
    np.savez(tmp_path / "empty.npz")
    assert _read(tmp_path / "empty.npz") == []


@pytest.mark.parametrize(
    ("name", "write", "message"),
    [
        ("missing.npz", None, "the file missing.npz cannot be read: no such file"),
        ("dir.npz", lambda p, _: p.mkdir(), "the file dir.npz is not a regular file"),
        ("fifo.npz", lambda p, _: os.mkfifo(p), "is not a regular file (it is a FIFO"),
        ("text.npz", lambda p, _: p.write_text("not a zip"), "is not a readable .npz archive"),
        ("one.npz", lambda p, _: _single_npy(p), "is a single .npy array"),
        (
            "objects.npz",
            lambda p, _: np.savez(p, bad=np.array([{"a": 1}], dtype=object)),
            "entry 'bad' holds Python objects, which cannot be read without pickle",
        ),
        (
            "words.npz",
            lambda p, _: np.savez(p, words=np.array(["a", "b"])),
            "entry 'words' has dtype <U1, not a number type",
        ),
        (
            "huge.npz",
            lambda p, forge: forge(p, "(1000000000000000,)", b"\0" * 64),
            "entry 'x' claims shape (1000000000000000,)",
        ),
        ("short.npz", lambda p, forge: forge(p, "(4, 16)", b"\0" * 100), "truncated or corrupt"),
    ],
)
def test_what_is_refused_is_named_with_the_callers_words(tmp_path, forge_npz, name, write, message):
    path = tmp_path / name
    if write is not None:
        write(path, forge_npz)
    with pytest.raises(Refused) as refused:
        _read(path)
    assert message in str(refused.value)
    assert str(refused.value).startswith(f"the file {name}")


def test_kinds_narrow_what_counts_as_numeric(tmp_path: Path) -> None:
    path = tmp_path / "complex.npz"
    np.savez(path, z=np.ones(2, dtype=np.complex64))
    assert _read(path)[0][1].dtype == np.complex64
    with pytest.raises(Refused, match="entry 'z' has dtype complex64"):
        _read(path, kinds="biuf")
