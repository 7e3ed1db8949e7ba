"""Files dlopt writes and reads: atomic replacement, the user's umask, bounded reads.

Every file dlopt writes goes through :func:`atomic_write_bytes`: readers see the old file
or the whole new one, never a part, and a crash leaves no half-written file behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import threading
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where the platform allows.

    ``os.umask`` can only be read by setting it, which briefly changes it for every thread
    of the process; Linux publishes it in ``/proc/self/status``, so that is tried first.
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        # The restrictive value is what another thread would see meanwhile: safe, not lax.
        previous = os.umask(0o077)
        os.umask(previous)
    return previous


def default_file_mode() -> int:
    """The mode ``open()`` would give a new file: ``0o666`` less the umask."""
    return 0o666 & ~current_umask()


def default_dir_mode() -> int:
    """The mode ``mkdir`` would give a new directory: ``0o777`` less the umask."""
    return 0o777 & ~current_umask()


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a rename inside ``directory`` durable (POSIX; a no-op where unsupported)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories; the rename still holds
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` so readers see the old file or the whole new one, never a part.

    Temp file in the same directory, fsync, rename over the target, fsync the directory.
    The file gets the user's umask permissions (a temp file alone would be ``0600``).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, default_file_mode())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)
    return target


class FileTooLargeError(ValueError):
    """A file is larger than the cap its reader allows."""


_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words: ``"a FIFO (named pipe)"``, ``"a directory"``..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


class NotRegularFileError(OSError):
    """A path dlopt reads is a FIFO, a device or a socket: reading it could block forever
    or never end, so it is refused."""


def check_regular_file(path: str | os.PathLike[str]) -> None:
    """Raise ``OSError`` unless ``path`` is a regular file (symlinks followed):
    ``FileNotFoundError``, ``IsADirectoryError`` or :class:`NotRegularFileError`."""
    mode = os.stat(path).st_mode
    _refuse_irregular(path, mode)


def _refuse_irregular(path: str | os.PathLike[str], mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    raise NotRegularFileError(
        errno.EINVAL,
        f"it is {file_kind(mode)}, not a regular file; give the path of a file",
        str(path),
    )


@contextlib.contextmanager
def open_regular_file(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open ``path`` for reading, refusing anything but a regular file.

    Opened non-blocking, so a FIFO with no writer cannot hang the open, and checked on
    the open descriptor, so it cannot be swapped in between: :class:`NotRegularFileError`
    for a FIFO, a device or a socket, ``IsADirectoryError``; ``OSError`` (a missing file)
    propagates.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        _refuse_irregular(path, os.fstat(fd).st_mode)
        yield handle


def read_bytes_capped(path: str | os.PathLike[str], cap: int) -> bytes:
    """Read at most ``cap`` bytes of ``path``; :class:`FileTooLargeError` if there is more.

    Only a regular file is read (:class:`NotRegularFileError` for a FIFO, a device or a
    socket): it is opened non-blocking, so a FIFO with no writer cannot hang the open,
    and checked on the open descriptor, so it cannot be swapped in between. Reads
    ``cap + 1`` bytes at most, so a huge file costs no more than the cap. ``OSError``
    (missing file, a directory) propagates.
    """
    with open_regular_file(path) as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise FileTooLargeError(
            f"{path} is larger than {cap / 2**20:g} MiB, more than any dlopt file; check the path"
        )
    return data


class TemporaryArtifacts:
    """A temporary directory for plan artifacts, owned by whoever holds this object.

    Removed by :meth:`release`, when this object is garbage-collected, or at interpreter
    exit, whichever comes first (``weakref.finalize``), so that a selection leaves
    nothing behind in the system temp directory.
    """

    def __init__(self, prefix: str = "dlopt-") -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.path), True)

    def release(self) -> None:
        """Remove the directory now (idempotent)."""
        self._finalizer()

    @property
    def released(self) -> bool:
        return not self._finalizer.alive


def nearest_existing_ancestor(path: Path) -> Path:
    """``path`` itself or the closest parent that exists (``path`` made absolute first)."""
    current = Path(os.path.abspath(path))
    while not os.path.lexists(current) and current.parent != current:
        current = current.parent
    return current


def check_can_create_in(directory: str | os.PathLike[str], *, purpose: str) -> None:
    """Raise ``ValueError`` unless files can be created under ``directory``.

    Missing directories count as creatable when their closest existing ancestor is a
    writable directory. Writability is probed by creating and removing a temp file:
    permission bits do not tell (root ignores them; read-only mounts and ``/proc``
    refuse anyway).
    """
    wanted = Path(directory)
    ancestor = nearest_existing_ancestor(wanted)
    if not ancestor.is_dir():
        raise ValueError(
            f"cannot write {purpose}: {ancestor} is not a directory, so {wanted} cannot be "
            "created; choose another path"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".dlopt-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(
            f"cannot write {purpose}: {ancestor} is not writable ({reason}); "
            "choose a directory you can write to"
        ) from None


def check_writable_file(path: str | os.PathLike[str], *, purpose: str) -> Path:
    """Raise ``ValueError`` unless :func:`atomic_write_bytes` can write ``path``.

    ``path`` may exist only as a regular file (an atomic write replaces it); its directory
    must exist or be creatable, and be writable.
    """
    target = Path(path)
    if os.path.lexists(target):
        if target.is_dir():
            raise ValueError(
                f"cannot write {purpose} to {target}: it is a directory; give a file path "
                f"such as {target / 'report.json'}"
            )
        if not target.is_file():
            raise ValueError(
                f"cannot write {purpose} to {target}: it exists and is not a regular file"
            )
    check_can_create_in(target.parent, purpose=purpose)
    return target


#: Overrides where dlopt keeps what it computes once per machine (boundary tables, probe
#: answers); default ``$XDG_CACHE_HOME/dlopt`` or ``~/.cache/dlopt``.
USER_CACHE_ENV = "DLOPT_USER_CACHE_DIR"


def user_cache_dir() -> Path:
    """Where dlopt keeps what it computes once per machine and setting (created on first
    write by the caller): ``$DLOPT_USER_CACHE_DIR``, else ``$XDG_CACHE_HOME/dlopt``, else
    ``~/.cache/dlopt``. Never the plan cache: nothing here decides, it only saves time."""
    named = os.environ.get(USER_CACHE_ENV)
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dlopt"


class UserCacheWarning(UserWarning):
    """An entry of the user cache directory could not be trusted and was set aside."""


_set_aside_named: set[str] = set()


def set_aside(path: Path, why: str) -> None:
    """Move a user cache entry that cannot be trusted out of the way (``NAME.set-aside``,
    replacing an older one) and say so once per path: what it held is computed again.
    Nothing in the user cache decides anything, so a bad entry only costs time."""
    aside = path.with_name(path.name + ".set-aside")
    try:
        os.replace(path, aside)
        where = f"moved to {aside}"
    except OSError as exc:
        where = f"could not be moved ({exc.strerror or exc})"
    key = str(path)
    if key in _set_aside_named:
        return
    _set_aside_named.add(key)
    warnings.warn(
        f"dlopt's user cache entry {path} cannot be used ({why}); it was {where} and what "
        "it held is computed again",
        UserCacheWarning,
        stacklevel=3,
    )


def read_user_cache_entry(path: Path, cap: int) -> bytes | None:
    """The bytes of a user cache entry (``None`` when there is none); an entry that is
    not a regular file of at most ``cap`` bytes is set aside (:func:`set_aside`)."""
    try:
        return read_bytes_capped(path, cap)
    except FileNotFoundError:
        return None
    except (NotRegularFileError, IsADirectoryError, FileTooLargeError) as exc:
        set_aside(path, str(exc))
        return None
    except OSError:
        return None
