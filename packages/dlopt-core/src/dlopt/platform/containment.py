"""Keeping what a plan leaves around this process to the plan's own life.

Bringing a plan into a process (the host of an isolated selection rebuilding or
reloading the winner, a plan cache hit) runs its provider's code here: an SDK may start
helper processes (an ONNX Runtime or OpenVINO build server, a daemon), and its imports and
compiles write to the temp directory (``import onnxruntime`` leaves ``$TMPDIR/.ses``;
Inductor compiles into ``$TMPDIR/torchinductor_$USER``, 150 MB on the demo). A
:class:`Containment` gives that code a temp directory of its own and marks the processes
it starts; :meth:`Containment.release` (the decision's ``close()``) ends those processes
and removes the directory, so that nothing the selection made outlives its decision.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dlopt.platform.fileio import TemporaryArtifacts
from dlopt.platform.processes import ProcessInfo, StartedProcesses, scoped_environment

#: The variables that name where a process writes temporary files: ``TMPDIR`` (POSIX,
#: Python's ``tempfile``, native SDKs) and ``TMP``/``TEMP`` (what some libraries read).
TEMP_ENV = ("TMPDIR", "TMP", "TEMP")
#: Inductor's cache directory; torch fixes it in the environment on its first compile.
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


class Containment:
    """A plan's temp directory and process mark while it is brought into this process
    (:meth:`inside`), both released together (:meth:`release`: idempotent; also when
    this object is garbage-collected or the interpreter exits)."""

    def __init__(self) -> None:
        self.processes = StartedProcesses()
        self._temp: TemporaryArtifacts | None = None

    @property
    def temp_dir(self) -> Path | None:
        """The plan's own temp directory (``None`` until :meth:`inside` first ran)."""
        return None if self._temp is None or self._temp.released else self._temp.path

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """Run the body with the temp directory pointed at this containment's own (the
        environment, ``tempfile`` and Inductor's cache unless you set
        ``TORCHINDUCTOR_CACHE_DIR`` yourself) and every process started from here
        marked; everything is restored on exit. The environment is the process's: what
        another thread does meanwhile is contained too."""
        if self._temp is None:
            self._temp = TemporaryArtifacts(prefix="dlopt-plan-tmp-")
        with self.processes.marking(), private_temp_dir(self._temp.path):
            yield

    def release(self) -> list[ProcessInfo]:
        """End the processes started inside and remove the temp directory; the processes
        that could not be ended (also named in a warning)."""
        survivors = self.processes.end()
        if self._temp is not None:
            self._temp.release()
        return survivors


@contextlib.contextmanager
def private_temp_dir(directory: Path) -> Iterator[None]:
    """Point this process's temp directory at ``directory`` for the body: ``TMPDIR``,
    ``TMP``, ``TEMP``, :data:`tempfile.tempdir` and Inductor's cache (which torch pins in
    the environment once it compiled, and memoises: both are put back on exit)."""
    before_tempdir = tempfile.tempdir
    # Unset, Inductor's cache follows the temp directory; set (by you, or pinned by an
    # earlier compile in this process), it stays where this process compiles anyway. It
    # is put back on exit either way: torch pins it on its first compile in the body.
    values: dict[str, str | None] = dict.fromkeys(TEMP_ENV, str(directory))
    values[INDUCTOR_CACHE_ENV] = os.environ.get(INDUCTOR_CACHE_ENV)
    with scoped_environment(values):
        tempfile.tempdir = str(directory)
        _forget_inductor_paths()
        try:
            yield
        finally:
            tempfile.tempdir = before_tempdir
            _forget_inductor_paths()


def _forget_inductor_paths() -> None:
    """Clear the paths Inductor memoised from its cache directory (only where torch's
    Inductor is already imported: importing it costs seconds)."""
    if "torch._inductor.utils" not in sys.modules:
        return
    with contextlib.suppress(Exception):  # a torch that lays this out otherwise
        from torch._inductor.utils import clear_caches

        clear_caches()
