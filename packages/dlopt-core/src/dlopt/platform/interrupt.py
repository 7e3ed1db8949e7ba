"""A deadline on a block of third-party code, in the thread that runs it.

:class:`Deadline` watches a clock from a thread of its own. Once the clock passes the
deadline while the watched thread is *armed* (inside :meth:`Deadline.armed`: the code
that may be abandoned, such as a plan's build), it raises :class:`PastDeadline` in that
thread, as Ctrl-C raises ``KeyboardInterrupt``: at the next Python instruction, so a
native call is not interrupted (an isolated worker's heartbeat is the backstop for one
that never returns): it is abandoned as it returns. ``on_passed`` can end what such a
call waits on (the compiler process a build started). The exception is raised only
while armed, never in the caller's own bookkeeping, and again every :data:`REPEAT_S`
while the code stays armed, so code that swallows it (an ``except BaseException`` that
retries) is still ended. A raise still pending when the block leaves is withdrawn:
catch :class:`PastDeadline` outside the ``with Deadline(...)`` block, whose exit makes
sure none is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType

#: How often the watching thread reads the clock.
POLL_S = 0.02
#: How long after one raise the next is made while the code is still armed.
REPEAT_S = 0.25


class PastDeadline(BaseException):
    """Raised in a thread whose armed code ran past its :class:`Deadline`. A
    ``BaseException``, like ``KeyboardInterrupt``: ``except Exception`` in the abandoned
    code does not swallow it."""


#: One lock for every deadline and shield: a raise is made, withdrawn or held off under it.
_LOCK = threading.Lock()
#: Per thread id, how many :func:`shielded` blocks it is in.
_SHIELDS: dict[int, int] = {}


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """No :class:`PastDeadline` lands in this block, though it runs inside armed code:
    for bookkeeping that wraps third-party code and must not be torn (a journal record, a
    heartbeat). A raise pending when it starts is withdrawn; the deadline raises again
    after the block, as the armed code goes on."""
    thread_id = threading.get_ident()
    with _LOCK:
        _SHIELDS[thread_id] = _SHIELDS.get(thread_id, 0) + 1
        _raise_in(thread_id, None)
    try:
        yield
    finally:
        with _LOCK:
            _SHIELDS[thread_id] -= 1
            if not _SHIELDS[thread_id]:
                del _SHIELDS[thread_id]


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Ask the interpreter to raise ``exc`` in thread ``thread_id`` at its next
    instruction (``None`` withdraws a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


class Deadline:
    """Raise :class:`PastDeadline` in the calling thread's armed code once ``now_ns()``
    passes ``deadline_ns``. Use as a context manager around the whole block (it starts
    and stops the watching thread), and :meth:`armed` around the parts that may be
    abandoned. ``now_ns`` is any monotonic clock in nanoseconds (a test's fake clock
    too)."""

    def __init__(
        self,
        now_ns: Callable[[], int],
        deadline_ns: int,
        on_passed: Callable[[], object] | None = None,
    ) -> None:
        self.now_ns = now_ns
        self.deadline_ns = deadline_ns
        #: Called once from the watching thread when the armed code first runs past the
        #: deadline, beside the raise: for what the raise cannot reach (a native call
        #: waiting on a process the code started can be ended by ending that process).
        self.on_passed = on_passed
        #: Whether the deadline passed while the code was armed (it was abandoned).
        self.passed = False
        self._thread_id = threading.get_ident()
        self._armed = False
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="dlopt-deadline", daemon=True)

    def __enter__(self) -> Deadline:
        self._thread_id = threading.get_ident()
        self._watcher.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        # A raise can land in this very method (made just before the block left): disarm
        # until nothing is pending, so none lands after it, in the caller's code.
        while True:
            try:
                with _LOCK:
                    self._armed = False
                    _raise_in(self._thread_id, None)
                    self._stop.set()
                break
            except PastDeadline:
                self.passed = True
        self._watcher.join()

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """The block may be abandoned: past the deadline, :class:`PastDeadline` is raised
        in it, at once if the deadline has already passed, and as it returns if it ran
        past the deadline in a native call the raise could not interrupt."""
        if self.now_ns() > self.deadline_ns:
            self.passed = True
            raise PastDeadline
        with _LOCK:
            self._armed = True
        try:
            yield
        finally:
            # Interrupted before this lock, the block stays armed until __exit__: the
            # raise is on its way out already.
            with _LOCK:
                self._armed = False
                _raise_in(self._thread_id, None)
        if self.now_ns() > self.deadline_ns:
            self.passed = True
            raise PastDeadline

    def _watch(self) -> None:
        last_raise = float("-inf")
        called = False
        while not self._stop.wait(POLL_S):
            if self.now_ns() <= self.deadline_ns:
                continue
            with _LOCK:
                raised = (
                    self._armed
                    and self._thread_id not in _SHIELDS
                    and time.monotonic() - last_raise >= REPEAT_S
                )
                if raised:
                    self.passed = True
                    last_raise = time.monotonic()
                    _raise_in(self._thread_id, PastDeadline)
            if raised and not called and self.on_passed is not None:
                called = True
                with contextlib.suppress(Exception):
                    self.on_passed()
