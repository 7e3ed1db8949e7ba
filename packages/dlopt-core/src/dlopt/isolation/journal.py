"""The worker's journal (strict JSON lines) and its heartbeat (a small shared file).

The journal is what survives a worker's death: every record is one JSON object on one
line, written whole and flushed; records that close a stage are also ``fsync``-ed. A
``running`` record names the plan, stage and case before each provider call of a new
stage, so the host knows whom to blame.

Calls inside a stage (first calls, validation, each measured call) are too many and too
short for a file write each; they go to the heartbeat instead: a memory-mapped file the
worker updates per call (plan, stage, when the call began, when it must be over) and the
host reads to run the per-call watchdog. Its writes are guarded by a sequence number
(odd while writing) so the host never reads half an update.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attrs import frozen

from dlopt.platform.serialization import dumps, parse_strict_json

#: seq (u64), started_at (f64, time.time), deadline (f64, time.time; 0 = none), then
#: 64 bytes of plan name and 16 of stage name (UTF-8, NUL-padded).
_HEADER = struct.Struct("<Qdd64s16s")
HEARTBEAT_BYTES = _HEADER.size


class JournalWriter:
    """Appends strict-JSON records to the journal; ``durable=True`` also fsyncs."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the worker

    def append(self, record: dict[str, Any], *, durable: bool = False) -> None:
        line = dumps(record, indent=None)
        if "\n" in line:  # dumps is compact; a raw newline would split a record
            raise ValueError("a journal record must serialise to one line")
        self._handle.write(line + "\n")
        self._handle.flush()
        if durable:
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


def read_journal(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every whole record of the journal at ``path`` (none if it does not exist).

    A last line cut short (the worker died mid-write) is dropped; a damaged line
    anywhere else means the file is not a journal this worker wrote: ``ValueError``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        try:
            record = parse_strict_json(line)
        except ValueError:
            if number == len(lines):  # no newline after it: cut short by a death
                break
            raise ValueError(f"journal {path}: line {number} is not a JSON record") from None
        if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
            raise ValueError(f"journal {path}: line {number} is not a journal record")
        records.append(record)
    return records


@frozen
class Beat:
    """One reading of the heartbeat: ``plan`` is in ``stage`` since ``started_at`` and
    must be done by ``deadline`` (``None``: no call in flight)."""

    plan: str
    stage: str
    started_at: float
    deadline: float | None


class Heartbeat:
    """The shared per-call record. The worker opens it with ``create=False`` after the
    host created it; both sides map the same bytes."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        if create:
            self.path.write_bytes(b"\0" * HEARTBEAT_BYTES)
        self._fd = os.open(self.path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, HEARTBEAT_BYTES)
        self._seq = 0

    def begin(self, plan: str, stage: str, limit_s: float | None) -> None:
        """A call of ``plan`` in ``stage`` starts now and may last ``limit_s`` seconds."""
        now = time.time()
        self._write(plan, stage, now, now + limit_s if limit_s is not None else 0.0)

    def end(self) -> None:
        """No provider call is in flight."""
        self._write("", "", 0.0, 0.0)

    def _write(self, plan: str, stage: str, started: float, deadline: float) -> None:
        self._seq += 1  # odd: writing
        self._map[0:8] = struct.pack("<Q", self._seq)
        packed = _HEADER.pack(self._seq, started, deadline, plan.encode()[:64], stage.encode()[:16])
        self._map[8:] = packed[8:]
        self._seq += 1  # even: whole
        self._map[0:8] = struct.pack("<Q", self._seq)

    def read(self) -> Beat | None:
        """The call in flight, or ``None`` (none, or the worker is mid-update)."""
        for _ in range(100):
            seq, started, deadline, plan, stage = _HEADER.unpack(self._map[:HEARTBEAT_BYTES])
            again = struct.unpack("<Q", self._map[0:8])[0]
            if seq % 2 == 0 and seq == again:
                if started == 0.0:
                    return None
                return Beat(
                    plan.rstrip(b"\0").decode(errors="replace"),
                    stage.rstrip(b"\0").decode(errors="replace"),
                    started,
                    deadline or None,
                )
        return None

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


def records_of(records: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    """The records of one ``kind``, in order."""
    return (r for r in records if r.get("kind") == kind)


def last_running(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last "now running" marker (plan, stage, case) of a journal, if any."""
    found = None
    for record in records_of(records, "running"):
        found = record
    return found


__all__ = [
    "HEARTBEAT_BYTES",
    "Beat",
    "Heartbeat",
    "JournalWriter",
    "last_running",
    "read_journal",
    "records_of",
]
