"""Read a ``.npz`` archive of numeric arrays without ever unpickling or trusting it.

One reader for every ``.npz`` dlopt takes from a user (``dlopt select --inputs``, the
calibration files of quantizing plans), re-exported by ``dlopt.plugin``. Only a regular
file is read (:func:`~dlopt.platform.fileio.open_regular_file`: opened non-blocking,
checked on the open descriptor). Each member's header is checked against the bytes it
really holds before numpy allocates anything, and ``allow_pickle=False`` refuses object
arrays.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
from collections.abc import Callable
from typing import IO, Any

from dlopt.platform.fileio import NotRegularFileError, open_regular_file


class _Refused(Exception):
    """What is wrong with the file, raised inside the reader as its caller's error."""


def read_npz(
    path: str | os.PathLike[str],
    *,
    where: str,
    error: Callable[[str], Exception],
    kinds: str = "biufc",
    check_sizes: Callable[[list[tuple[str, int]]], None] | None = None,
) -> list[tuple[str, Any]]:
    """``[(entry name, numpy array), ...]`` of a ``.npz`` archive, in its order.

    Each array is a writable, C-contiguous copy whose dtype kind is one of ``kinds``
    (numpy's letters: ``"biuf"`` refuses complex numbers). Everything wrong with the file
    raises ``error(message)`` (``ConfigurationError``, ``ProviderBuildError``...), the
    message starting with ``where`` (for example ``"--inputs data.npz"``) and saying what
    to do: a missing path, anything but a regular file, not an archive, a single ``.npy``
    array, a member whose header claims other bytes than it holds, an entry that needs
    pickle or is not numeric. ``check_sizes`` sees ``[(entry, bytes), ...]`` from the
    headers before any array is read (to refuse what would not fit in memory); it raises
    what it likes. An archive without entries gives ``[]``.
    """
    try:
        with open_regular_file(path) as handle:
            return _read(handle, where, kinds, check_sizes)
    except _Refused as exc:
        raise error(f"{where}{exc}") from None
    except FileNotFoundError:
        raise error(f"{where} cannot be read: no such file") from None
    except (IsADirectoryError, NotRegularFileError) as exc:
        raise error(
            f"{where} is not a regular file ({exc.strerror or exc}); give a .npz file"
        ) from None
    except OSError as exc:
        raise error(f"{where} cannot be read: {exc.strerror or exc}") from None


def read_npz_bytes(
    data: bytes,
    *,
    where: str,
    error: Callable[[str], Exception],
    kinds: str = "biufc",
    check_sizes: Callable[[list[tuple[str, int]]], None] | None = None,
) -> list[tuple[str, Any]]:
    """:func:`read_npz` of an archive held in memory (a request body): the same checks,
    the same errors."""
    try:
        return _read(io.BytesIO(data), where, kinds, check_sizes)
    except _Refused as exc:
        raise error(f"{where}{exc}") from None


def npz_bytes(arrays: list[tuple[str, Any]]) -> bytes:
    """An uncompressed ``.npz`` archive of ``arrays`` (``[(entry name, array), ...]``)."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **dict(arrays))
    return buffer.getvalue()


def _read(
    handle: IO[bytes],
    where: str,
    kinds: str,
    check_sizes: Callable[[list[tuple[str, int]]], None] | None,
) -> list[tuple[str, Any]]:
    sizes = _checked(_member_sizes, handle, where)
    if check_sizes is not None:
        check_sizes(sizes)
    result: list[tuple[str, Any]] = _checked(_entries, handle, where, kinds)
    return result


def _checked(read: Callable[..., Any], handle: IO[bytes], where: str, *args: Any) -> Any:
    """``read(handle, *args)`` from the file's start; a file numpy or zipfile cannot
    parse is refused as not an archive."""
    handle.seek(0)
    try:
        return read(handle, *args)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise _Refused(f" is not a readable .npz archive: {exc}") from None


def _entries(handle: IO[bytes], kinds: str) -> list[tuple[str, Any]]:
    import numpy as np

    loaded = np.load(handle, allow_pickle=False)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise _Refused(
            " is a single .npy array, not an .npz archive: save it with "
            "numpy.savez(path, name=array)"
        )
    entries = []
    with loaded as archive:
        for key in archive.files:
            try:
                array = archive[key]
            except ValueError as exc:  # an object array needs pickle: refused
                raise _Refused(
                    f": entry {key!r} cannot be read without pickle ({exc}); save numeric "
                    "arrays only"
                ) from None
            if array.dtype.kind not in kinds:
                raise _Refused(
                    f": entry {key!r} has dtype {array.dtype}, not a number type a model "
                    "takes; save numeric arrays"
                )
            # An array read from a zip member is a read-only view of its bytes.
            entries.append((key, np.array(array, copy=True, order="C")))
    return entries


def _member_sizes(handle: IO[bytes]) -> list[tuple[str, int]]:
    """``(entry, bytes)`` for each ``.npy`` member, read from its header alone.

    A header is checked against the bytes its member really holds before any array is
    allocated: a header that claims 10**15 elements, or a truncated member, is refused
    here with what it claims and what is there (numpy would try to allocate, or blame
    pickle). Not a zip archive: ``[]`` (numpy's own reading says what it is).
    """
    import numpy as np

    if not zipfile.is_zipfile(handle):
        return []
    handle.seek(0)
    sizes = []
    with zipfile.ZipFile(handle) as archive:
        for info in archive.infolist():
            key = info.filename.removesuffix(".npy")
            with archive.open(info) as member:
                try:
                    version = np.lib.format.read_magic(member)
                    read_header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read_header(member)
                except (ValueError, EOFError) as exc:
                    raise _Refused(
                        f": entry {key!r} is not a readable .npy array ({exc}); save it "
                        "again with numpy.savez"
                    ) from None
                if dtype.hasobject:
                    raise _Refused(
                        f": entry {key!r} holds Python objects, which cannot be read "
                        "without pickle; save numeric arrays only"
                    )
                claimed = math.prod(shape) * dtype.itemsize
                held = info.file_size - member.tell()
            if claimed != held:
                raise _Refused(
                    f": entry {key!r} claims shape {tuple(shape)} {dtype} ({claimed} bytes) "
                    f"but holds {held} bytes: the file is truncated or corrupt; save it "
                    "again with numpy.savez"
                )
            sizes.append((key, claimed))
    return sizes
