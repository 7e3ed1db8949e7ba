"""Building blocks for layered availability probes.

Layer 1, metadata: is the distribution installed, in a supported version? (no import)
Layer 2, import: does the SDK import, and what can it do?
Layer 3, device: can the target device actually run it? (cheap functional checks)

Providers combine these; each layer returns a reason a user can act on.

SDKs talk while they are imported and probed: C libraries write to file descriptors 1
and 2 directly (ONNX Runtime's "EP Error ... Falling back", a missing ``libnvinfer``),
Python code prints and warns. Left alone, that lands in ``dlopt providers --json``
before the JSON. :func:`capture_output` catches all of it (``sys.stdout``/``sys.stderr``,
fds 1 and 2, and Python warnings); :func:`try_import` imports under it and remembers a
failed import for the process. Everything caught is kept, once per distinct text, in
:func:`captured_sdk_output`, for a front end to show dimmed after its own output.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from functools import lru_cache
from types import ModuleType
from typing import Any, TextIO

from attrs import define, field, frozen
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

if sys.version_info >= (3, 12):
    from importlib import metadata as importlib_metadata
else:  # 3.10/3.11: the backport has the selectable EntryPoints API with .dist everywhere
    import importlib_metadata


def distribution_version(name: str) -> str | None:
    """Installed version of distribution ``name`` without importing it; ``None`` if absent."""
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return None


def version_satisfies(version: str, spec: str) -> bool:
    """True when ``version`` lies in the PEP 440 range ``spec`` (local labels ignored)."""
    try:
        return Version(version) in SpecifierSet(spec, prereleases=True)
    except (InvalidVersion, InvalidSpecifier):
        return False


def base_version(version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2.13.0"``."""
    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


def check_distribution(
    name: str, spec: str | None, install_hint: str
) -> tuple[str | None, str | None]:
    """Metadata layer: ``(version, problem)``; ``problem`` is ``None`` when usable."""
    version = distribution_version(name)
    if version is None:
        return None, f"{name} is not installed ({install_hint})"
    if spec and not version_satisfies(version, spec):
        return version, f"{name} {version} is installed but {spec} is required"
    return version, None


#: Terminal colour and cursor codes (ONNX Runtime colours its log lines).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape codes (colours), for reasons and reports."""
    return _ANSI.sub("", text)


@frozen
class CapturedOutput:
    """What an SDK wrote while dlopt imported or probed it.

    ``source`` says when (``"import torch_tensorrt"``, ``"probe tensorrt_fp16"``);
    ``stdout``/``stderr`` hold what reached the streams (Python-level and fd-level,
    escape codes removed); ``warnings`` the Python warnings raised, as
    ``"Category: message"``.
    """

    source: str
    stdout: str = ""
    stderr: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.stdout.strip() or self.stderr.strip() or self.warnings)

    def lines(self) -> tuple[str, ...]:
        """Every non-blank line, warnings last, each once, in order."""
        found = [
            line.strip()
            for text in (self.stdout, self.stderr)
            for line in text.splitlines()
            if line.strip()
        ]
        return tuple(dict.fromkeys([*found, *self.warnings]))

    def summary(self, limit: int = 300) -> str:
        """One line for a reason: the lines joined with `` | ``, cut at ``limit``."""
        joined = " | ".join(self.lines())
        return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def _text_stream(fd: int) -> TextIO:
    """A text stream over a copy of ``fd`` that writes through at once (no buffer left
    to flush), with the ``buffer`` and ``fileno`` that code writing bytes expects."""
    raw = os.fdopen(os.dup(fd), "wb", buffering=0)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", write_through=True)


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers: a library's ``printf`` into a file sits there otherwise
    and would reach the real stdout after the capture ends."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


@define
class _Redirect:
    """The process-wide redirection of fds 1/2, ``sys.stdout``/``sys.stderr`` and
    ``warnings.showwarning``. File descriptors belong to the process, so nested and
    concurrent captures share one redirection: the first starts it, the last ends it,
    and each reads what was written while it was open. :meth:`release` ends it early
    (a probe that hangs keeps its capture open forever)."""

    lock: threading.RLock = field(factory=threading.RLock)
    depth: int = 0
    generation: int = 0
    files: dict[int, Any] = field(factory=dict)
    saved_fds: dict[int, int] = field(factory=dict)
    saved_streams: tuple[TextIO, TextIO] | None = None
    own_streams: dict[int, TextIO] = field(factory=dict)
    saved_showwarning: Any = None
    caught_warnings: list[str] = field(factory=list)

    def enter(self) -> tuple[int, dict[int, int], int]:
        with self.lock:
            if self.depth == 0:
                self._start()
            self.depth += 1
            offsets = {fd: os.lseek(f.fileno(), 0, os.SEEK_END) for fd, f in self.files.items()}
            return self.generation, offsets, len(self.caught_warnings)

    def exit(self, token: tuple[int, dict[int, int], int]) -> tuple[str, str, tuple[str, ...]]:
        generation, offsets, first_warning = token
        with self.lock:
            if generation != self.generation or self.depth == 0:
                return "", "", ()  # released early: what it wrote went to the real streams
            self._flush()
            texts = {fd: self._read(fd, offset) for fd, offset in offsets.items()}
            caught = tuple(self.caught_warnings[first_warning:])
            self.depth -= 1
            if self.depth == 0:
                self._stop()
            return texts.get(1, ""), texts.get(2, ""), caught

    def release(self) -> None:
        """End the redirection now, whoever holds it."""
        with self.lock:
            if self.depth:
                self._flush()
                self._stop()
            self.depth = 0

    def _start(self) -> None:
        self.generation += 1
        self.caught_warnings = []
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd in (1, 2):
            try:
                saved = os.dup(fd)
            except OSError:  # no such descriptor (a daemon): nothing to redirect
                continue
            # Open until the redirection ends (in _stop), so no `with` block.
            tmp = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115
            os.dup2(tmp.fileno(), fd)
            self.saved_fds[fd], self.files[fd] = saved, tmp
        self.saved_streams = (sys.stdout, sys.stderr)
        self.own_streams = {fd: _text_stream(f.fileno()) for fd, f in self.files.items()}
        sys.stdout = self.own_streams.get(1, sys.stdout)
        sys.stderr = self.own_streams.get(2, sys.stderr)
        self.saved_showwarning = warnings.showwarning

        def record(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
            self.caught_warnings.append(f"{category.__name__}: {message}")

        warnings.showwarning = record

    def _flush(self) -> None:
        for stream in (*(self.saved_streams or ()), sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        _flush_c_stdio()

    def _read(self, fd: int, offset: int) -> str:
        file = self.files[fd].fileno()
        end = os.lseek(file, 0, os.SEEK_END)
        if end <= offset:
            return ""
        if hasattr(os, "pread"):
            data = os.pread(file, end - offset, offset)
        else:  # Windows: fd 1/2 share this offset, so leave it at the end again
            os.lseek(file, offset, os.SEEK_SET)
            data = os.read(file, end - offset)
            os.lseek(file, 0, os.SEEK_END)
        return strip_ansi(data.decode("utf-8", "replace"))

    def _stop(self) -> None:
        self.generation += 1
        if self.saved_streams is not None:
            sys.stdout, sys.stderr = self.saved_streams
        if self.saved_showwarning is not None:
            warnings.showwarning = self.saved_showwarning
        for fd, saved in self.saved_fds.items():
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
                os.close(saved)
        for stream in self.own_streams.values():
            with contextlib.suppress(Exception):
                stream.close()
        for tmp in self.files.values():
            tmp.close()
        self.saved_fds, self.files, self.own_streams = {}, {}, {}
        self.saved_streams = self.saved_showwarning = None


_REDIRECT = _Redirect()
_LOG: dict[tuple[str, ...], CapturedOutput] = {}
_LOG_LOCK = threading.Lock()


@define
class Capture:
    """The handle :func:`capture_output` yields; ``result`` is set when the block ends."""

    source: str
    result: CapturedOutput | None = None


@contextlib.contextmanager
def capture_output(source: str) -> Iterator[Capture]:
    """Catch what the block writes to stdout/stderr (Python- and fd-level) and the Python
    warnings it raises; nothing of it reaches the terminal.

    After the block, ``capture.result`` holds it (a :class:`CapturedOutput`); output
    that is not empty is also kept for :func:`captured_sdk_output`. Captures nest and may
    overlap across threads (they share one redirection of the process's descriptors).
    """
    capture = Capture(source)
    token = _REDIRECT.enter()
    try:
        yield capture
    finally:
        stdout, stderr, caught = _REDIRECT.exit(token)
        capture.result = CapturedOutput(source, stdout, stderr, caught)
        _remember(capture.result)


def release_capture() -> None:
    """Hand stdout/stderr back now, ending every open capture (for a probe that was
    abandoned after its time limit: its capture would otherwise never end)."""
    _REDIRECT.release()


def _remember(output: CapturedOutput) -> None:
    if output.empty:
        return
    with _LOG_LOCK:
        _LOG.setdefault(output.lines(), output)


def captured_sdk_output() -> tuple[CapturedOutput, ...]:
    """What SDKs wrote while dlopt imported or probed them in this process, each distinct
    text once, oldest first (for a front end to show after its own output)."""
    with _LOG_LOCK:
        return tuple(_LOG.values())


def clear_captured_sdk_output() -> None:
    """Forget :func:`captured_sdk_output` (after showing it)."""
    with _LOG_LOCK:
        _LOG.clear()


#: Failed imports of this process: (module, sys.path, what sys.modules held) -> error.
_FAILED_IMPORTS: dict[tuple[str, tuple[str, ...], int], str] = {}


def _import_key(module: str) -> tuple[str, tuple[str, ...], int]:
    # A changed sys.path or sys.modules entry (an install, a test's fake) retries.
    return module, tuple(sys.path), id(sys.modules.get(module, _import_key))


def try_import(module: str) -> tuple[ModuleType | None, str | None]:
    """Import layer: ``(module, None)`` or ``(None, "<ExcType>: message")``.

    Catches everything: a broken SDK can raise OSError (missing shared library) or even
    RuntimeError at import; the probe reports it instead of crashing. What the SDK
    prints or warns while importing is captured (:func:`capture_output`), folded into
    the error when the import fails, and a failure is remembered for the process: the
    next probe gets the same answer without importing (and printing) again.
    """
    loaded = sys.modules.get(module)
    if loaded is not None:
        return loaded, None
    key = _import_key(module)
    if key in _FAILED_IMPORTS:
        return None, _FAILED_IMPORTS[key]
    with capture_output(f"import {module}") as capture:
        try:
            return importlib.import_module(module), None
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            error = f"{type(exc).__name__}: {strip_ansi(str(exc))}"
    said = capture.result.summary() if capture.result is not None else ""
    if said:
        error += f" (while importing it printed: {said})"
    _FAILED_IMPORTS[key] = error
    return None, error


def forget_failed_imports() -> None:
    """Let :func:`try_import` try again imports that failed (after installing a library)."""
    _FAILED_IMPORTS.clear()


@lru_cache(maxsize=1)
def find_cxx_compiler() -> tuple[str | None, str | None]:
    """``(path, version line)`` of the C++ compiler Inductor would use on CPU, if any.

    Inductor honours the ``CXX`` environment variable, then looks for g++/clang++.
    """
    import os

    candidates = [os.environ.get("CXX"), "g++", "c++", "clang++"]
    for name in candidates:
        if not name:
            continue
        path = shutil.which(name)
        if not path:
            continue
        try:
            out = subprocess.run(
                [path, "--version"], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            continue
        first_line = (out.stdout or out.stderr).strip().splitlines()
        return path, first_line[0] if first_line else "unknown version"
    return None, None


def cuda_bf16_native(index: int | None = None) -> bool:
    """Whether CUDA device ``index`` (default: the current one) computes bf16 natively.

    ``torch.cuda.is_bf16_supported()`` counts emulation by default (True below compute
    capability 8.0, where bf16 runs slower than fp32) and asks the current device, not
    the target's: both are set explicitly here.
    """
    import torch

    if not torch.cuda.is_available():
        return False
    with torch.cuda.device(torch.cuda.current_device() if index is None else index):
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
