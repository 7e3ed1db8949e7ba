"""Finding and ending the processes a process started, so that none outlives it.

An isolated worker's plugins may start processes of their own (an SDK's compile server,
a helper started with ``setsid``); those must end with the selection, not run on with
PPID 1. Linux is where this can be done well: a worker becomes a *subreaper*
(:func:`become_subreaper`), so that its orphaned descendants are handed to it rather
than to init, and ``/proc`` says who descends from whom (:func:`descendants`) and whose
environment carries a mark (:func:`marked_processes`: a worker's descendants still, after
the worker itself died). Elsewhere these find nothing; what a process group kill reaches
is then all that ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
import uuid
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from attrs import frozen

#: ``prctl(PR_SET_CHILD_SUBREAPER, 1)`` (Linux 3.4 and later).
_PR_SET_CHILD_SUBREAPER = 36
#: How often :func:`end_processes` looks whether its processes are gone.
_POLL_S = 0.02


@frozen
class ProcessInfo:
    """One process as ``/proc/PID/stat`` shows it: ids, state letter, command name and
    when it started (clock ticks since boot, as :func:`boot_ticks` reads them)."""

    pid: int
    ppid: int
    pgid: int
    state: str
    name: str
    start_ticks: int

    def describe(self) -> str:
        """``1234 (sleep)``."""
        return f"{self.pid} ({self.name})"


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (the children of a child that
    exited, a daemon that forked twice) in place of init, so that they can still be
    found and ended; ``False`` where the OS does not allow it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def process_info(pid: int) -> ProcessInfo | None:
    """What ``/proc`` says of ``pid``; ``None`` when it is gone (or there is no ``/proc``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields follow the last ")".
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    try:
        return ProcessInfo(
            pid,
            int(fields[1]),
            int(fields[2]),
            fields[0],
            head.partition("(")[2],
            int(fields[19]),  # field 22, starttime (the state is field 3)
        )
    except (IndexError, ValueError):
        return None


def all_processes() -> list[ProcessInfo]:
    """Every process ``/proc`` lists (none without ``/proc``)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    found = (process_info(int(name)) for name in names if name.isdigit())
    return [info for info in found if info is not None]


def descendants(pid: int) -> list[ProcessInfo]:
    """Every live process below ``pid``: its children, theirs, and so on."""
    children: dict[int, list[ProcessInfo]] = {}
    for info in all_processes():
        children.setdefault(info.ppid, []).append(info)
    found: list[ProcessInfo] = []
    seen = {pid}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.pid not in seen:
                seen.add(child.pid)
                found.append(child)
                todo.append(child.pid)
    return [info for info in found if not _ended(info.state)]


def boot_ticks() -> int:
    """Now, in the clock ticks since boot that ``/proc/PID/stat`` gives a process's start
    in (0 where there is no such clock)."""
    try:
        return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))
    except (AttributeError, OSError, ValueError):
        return 0


def started_since(ticks: int) -> list[ProcessInfo]:
    """This process's live descendants that started at ``ticks`` (:func:`boot_ticks`) or
    later: what a block of code started, and not the helpers that were running before it
    (none where ``ticks`` is 0: no clock to tell them apart)."""
    if ticks <= 0:
        return []
    return [info for info in descendants(os.getpid()) if info.start_ticks >= ticks]


def marked_processes(name: str, value: str) -> list[ProcessInfo]:
    """Every live process (but this one) whose environment, as it was started, holds
    ``name=value``: what a process that set the mark started, wherever those processes
    were moved since (a crashed parent's orphans belong to init)."""
    needle = f"{name}={value}".encode()
    found = []
    for info in all_processes():
        if info.pid == os.getpid() or _ended(info.state):
            continue
        try:
            environ = Path(f"/proc/{info.pid}/environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0"):
            found.append(info)
    return found


def end_processes(processes: Iterable[ProcessInfo], grace_s: float = 1.0) -> list[ProcessInfo]:
    """End ``processes``: SIGTERM to each (and to the process group each leads, which
    reaches members nothing listed), SIGKILL to what is left after ``grace_s``. This
    process's own group is never signalled. The processes that could not be ended."""
    pending = {info.pid: info for info in processes if info.pid != os.getpid()}
    own_group = os.getpgrp()
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, max(grace_s, 0.5))):
        for info in pending.values():
            with contextlib.suppress(OSError):
                if info.pgid == info.pid and info.pgid != own_group:
                    os.killpg(info.pgid, sig)
            with contextlib.suppress(OSError):
                os.kill(info.pid, sig)
        deadline = time.monotonic() + wait_s
        while True:
            pending = {pid: info for pid, info in pending.items() if not _gone(pid)}
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(_POLL_S)
        if not pending:
            return []
    return list(pending.values())


def has_ended(pid: int) -> bool:
    """Whether ``pid`` has ended: gone, or a zombie whose entry is all that is left."""
    info = process_info(pid)
    if info is not None:
        return _ended(info.state)
    if Path("/proc/self").is_dir():
        return True  # /proc lists every live process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def _gone(pid: int) -> bool:
    """:func:`has_ended`, reaping ``pid`` first when it is this process's child."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    return has_ended(pid)


def _ended(state: str) -> bool:
    """A zombie (``Z``) or dead (``X``) process has ended; only its entry is left."""
    return state in ("Z", "X")


@contextlib.contextmanager
def scoped_environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for ``None``, unset) these environment variables for the ``with`` block,
    and put every one of them back as it was on exit, however the block ends. What the
    block itself sets in one of them is undone too; other variables are left alone."""
    before = {name: os.environ.get(name) for name in values}
    try:
        _set_environment(values)
        yield
    finally:
        _set_environment(before)


def _set_environment(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


#: The environment variable marking what a plan started in this process (see
#: :class:`StartedProcesses`).
PLAN_MARK_ENV = "DLOPT_PLAN_PROCESSES"


class StartedProcesses:
    """The processes a plan starts while it is built or loaded here (an SDK's helper, a
    daemon that forked twice, one in a session of its own), to be ended with the plan.

    While :meth:`marking`, every process started from this one inherits an environment
    mark (:data:`PLAN_MARK_ENV`), which stays in its ``/proc/PID/environ`` wherever it is
    moved since; :meth:`end` ends each live process carrying it. The mark is the
    process's environment: what another thread starts meanwhile is marked too, and two
    selections building at once in one process share the later mark. Ended at the latest when this object is
    garbage-collected or the interpreter exits, with a :class:`LeftoverProcessWarning`
    naming what could not be ended.
    """

    def __init__(self) -> None:
        self.mark = uuid.uuid4().hex
        self._finalizer = weakref.finalize(self, _end_marked, self.mark)

    def marking(self) -> contextlib.AbstractContextManager[None]:
        """Mark the processes started from this process inside the ``with`` block."""
        return scoped_environment({PLAN_MARK_ENV: self.mark})

    def end(self) -> list[ProcessInfo]:
        """End every live process carrying this mark (idempotent); those that could not
        be ended, also named in a warning."""
        survivors: list[ProcessInfo] = self._finalizer() or []
        return survivors


class LeftoverProcessWarning(UserWarning):
    """Processes a plan started could not be ended with it (another user's, or they
    ignored SIGKILL in an uninterruptible wait)."""


def _end_marked(mark: str) -> list[ProcessInfo]:
    survivors = end_processes(marked_processes(PLAN_MARK_ENV, mark))
    if survivors:
        warnings.warn(
            "processes the selected plan started could not be ended: "
            + ", ".join(info.describe() for info in survivors),
            LeftoverProcessWarning,
            stacklevel=2,
        )
    return survivors
