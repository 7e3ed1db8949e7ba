"""Files dlopt writes and reads: atomic replacement, the user's umask, bounded reads.

Every file dlopt writes goes through :func:`atomic_write_bytes`: readers see the old file
or the whole new one, never a part, and a crash leaves no half-written file behind.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

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


def read_bytes_capped(path: str | os.PathLike[str], cap: int) -> bytes:
    """Read at most ``cap`` bytes of ``path``; :class:`FileTooLargeError` if there is more.

    Reads ``cap + 1`` bytes at most, so an endless file (``/dev/zero``) or a huge one costs
    no more than the cap. ``OSError`` (missing file, a directory) propagates.
    """
    with open(path, "rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise FileTooLargeError(
            f"{path} is larger than {cap / 2**20:g} MiB, more than any dlopt file; check the path"
        )
    return data


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
