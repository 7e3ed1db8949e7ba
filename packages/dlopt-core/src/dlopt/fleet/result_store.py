"""The result store: plan cache records plus each fleet run's evidence.

A directory shared by the nodes (NFS, a mounted bucket), or an fsspec URL (``s3://``,
``gs://``, ``memory://`` in tests) when fsspec and its backend are installed. It is laid
out as a plan cache (docs/cache.md), so a serving process points ``plan_cache_dir`` at the
directory (or at a local copy of the URL: :func:`pull`) and finds its decision; beside the
records::

    fleet/<spec>/<job>/<kind>/result.json   FleetResult: where, when, what was selected
    fleet/<spec>/<job>/<kind>/report.json   the full report (faults and culprits included)
    fleet/<spec>/<job>/<kind>/attempt.json  which run last started it, and how many times

Every file is written whole or not at all: a temporary name, then a rename (an object
store's single PUT). Reading parses strict JSON only.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from attrs import frozen

from dlopt.cache.record_store import (
    BUNDLE_DIR,
    RECORD_NAME,
    RECORDS_DIR,
    PlanCache,
    is_key,
)
from dlopt.errors import ConfigurationError
from dlopt.evidence.report import OptimizationReport, RatioInterval, report_from_json
from dlopt.platform.fileio import (
    FileTooLargeError,
    atomic_write_bytes,
    check_can_create_in,
    read_bytes_capped,
)
from dlopt.platform.names import is_plain_name
from dlopt.platform.serialization import dumps, from_jsonable, parse_strict_json

FLEET_DIR = "fleet"
RESULT_NAME = "result.json"
REPORT_NAME = "report.json"
ATTEMPT_NAME = "attempt.json"
#: Bumped when result.json changes shape.
RESULT_VERSION = 1
#: The most bytes a stored file may have (the cap on every report dlopt reads).
MAX_READ_BYTES = 64 * 2**20


@frozen
class Failure:
    """A plan the race rejected: the stage, why, and for a crash or hang its kind."""

    plan: str
    stage: str | None
    message: str
    fault: str | None = None


@frozen
class FleetResult:
    """One (job, machine kind): where and when it raced and what it decided.

    ``status``: ``done`` (a decision), ``failed`` (``error`` says why), ``lost`` (its
    node left the cluster and no other node of its kind joined; ``error`` says which and
    ``node_id`` is where it last started). Times are Unix
    seconds on the node (``started_at``/``ended_at``: the races on one node never overlap).
    ``attempt``: how many times this run started the race (more than 1: Ray retried it
    after its process died; a provider's crash is never a reason).
    """

    spec: str
    job: str
    kind: str
    status: str
    node_id: str | None
    host: str
    pid: int
    started_at: float
    ended_at: float
    time_to_decision_s: float
    key: str | None = None
    selected_plan: str | None = None
    baseline: str | None = None
    speedup: RatioInterval | None = None
    regret_bound: float | None = None
    cache_hit: bool | None = None
    failures: tuple[Failure, ...] = ()
    error: str | None = None
    attempt: int = 1
    result_version: int = RESULT_VERSION


class ResultStore:
    """Where a spec's results land; :meth:`open` picks the directory or fsspec kind."""

    location: str

    @staticmethod
    def open(location: str) -> ResultStore:
        """A directory path, ``file://`` URL or another fsspec URL."""
        if not isinstance(location, str) or not location.strip():
            raise ConfigurationError("store must be a directory or a URL such as s3://bucket/dlopt")
        if location.startswith("file://"):
            return LocalStore(location.removeprefix("file://"))
        if "://" in location:
            return FsspecStore(location)
        return LocalStore(location)

    # -- what both kinds share -------------------------------------------------------
    def result_dir(self, spec: str, job: str, kind: str) -> str:
        for name in (spec, job, kind):
            if not is_plain_name(name):
                raise ConfigurationError(f"{name!r} is not a plain name; it cannot name a path")
        return f"{FLEET_DIR}/{spec}/{job}/{kind}"

    def write_result(self, result: FleetResult, report: OptimizationReport | None) -> None:
        folder = self.result_dir(result.spec, result.job, result.kind)
        if report is not None:
            self.write_text(f"{folder}/{REPORT_NAME}", report.to_json() + "\n")
        elif self.read_text(f"{folder}/{REPORT_NAME}") is not None:
            self.remove(f"{folder}/{REPORT_NAME}")  # a failed rerun leaves no stale report
        self.write_text(f"{folder}/{RESULT_NAME}", dumps(result) + "\n")

    def read_result(self, spec: str, job: str, kind: str) -> FleetResult | None:
        """The stored result, or ``None`` when there is none; an unreadable one is an error."""
        path = f"{self.result_dir(spec, job, kind)}/{RESULT_NAME}"
        text = self.read_text(path)
        if text is None:
            return None
        try:
            return from_jsonable(parse_strict_json(text), FleetResult)
        except Exception as exc:
            raise ConfigurationError(
                f"{self.location}/{path} is not a fleet result: {exc}"
            ) from None

    def begin_attempt(
        self,
        spec: str,
        job: str,
        kind: str,
        run: str,
        *,
        node_id: str | None = None,
        host: str = "",
        started_at: float | None = None,
    ) -> int:
        """Count one more start of (job, kind) by the run ``run``: 1 for its first, 2 when
        Ray retried it, and record where it started (a race lost with its node is reported
        with the node it ran on). One race of a (job, kind) runs at a time (a retry starts
        only after its predecessor died), so reading and rewriting the count is safe."""
        attempt = self.attempts(spec, job, kind, run) + 1
        path = f"{self.result_dir(spec, job, kind)}/{ATTEMPT_NAME}"
        record = {
            "run": run,
            "attempt": attempt,
            "node_id": node_id,
            "host": host,
            "started_at": started_at,
        }
        self.write_text(path, dumps(record) + "\n")
        return attempt

    def attempts(self, spec: str, job: str, kind: str, run: str) -> int:
        """How many times the run ``run`` started (job, kind) so far (0: never)."""
        count = self.last_attempt(spec, job, kind, run).get("attempt")
        return count if isinstance(count, int) and count > 0 else 0

    def last_attempt(self, spec: str, job: str, kind: str, run: str) -> dict[str, Any]:
        """The run ``run``'s last start of (job, kind) as :meth:`begin_attempt` recorded
        it (``{}``: never started, or the record is damaged)."""
        try:
            text = self.read_text(f"{self.result_dir(spec, job, kind)}/{ATTEMPT_NAME}")
            data = parse_strict_json(text) if text is not None else {}
        except ValueError:
            return {}  # damaged: counting starts again
        if not isinstance(data, dict) or data.get("run") != run:
            return {}
        return data

    def read_report(self, spec: str, job: str, kind: str) -> OptimizationReport | None:
        text = self.read_text(f"{self.result_dir(spec, job, kind)}/{REPORT_NAME}")
        return None if text is None else report_from_json(text)

    # -- per kind -------------------------------------------------------------------
    def problems(self, *, writable: bool) -> list[str]:
        """Why results cannot be read from here (``writable``: or written), before any
        race: each a line naming the store and what to do; none when it can be used."""
        return []

    def race_cache_dir(self) -> tuple[str, bool]:
        """The directory a race caches in, and whether it is temporary (then
        :meth:`publish` copies its record into the store)."""
        raise NotImplementedError

    def publish(self, cache_dir: str, key: str) -> None:
        """Copy the record ``key`` from a race's temporary cache into the store."""

    def write_text(self, relative: str, text: str) -> None:
        raise NotImplementedError

    def read_text(self, relative: str) -> str | None:
        raise NotImplementedError

    def remove(self, relative: str) -> None:
        raise NotImplementedError


class LocalStore(ResultStore):
    """A directory (shared by the nodes): races cache straight into it."""

    def __init__(self, directory: str) -> None:
        self.root = Path(os.path.abspath(os.path.expanduser(directory)))
        self.location = str(self.root)

    def problems(self, *, writable: bool) -> list[str]:
        if os.path.lexists(self.root) and not self.root.is_dir():
            return [
                f"store: {self.root} exists and is not a directory: give a directory for the "
                "fleet's results (it is created when missing)"
            ]
        if not writable:
            return []
        try:
            check_can_create_in(self.root, purpose="the fleet's results")
        except ValueError as exc:
            return [f"store: {exc}"]
        return []

    def race_cache_dir(self) -> tuple[str, bool]:
        return str(self.root), False

    def write_text(self, relative: str, text: str) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, text.encode("utf-8"))

    def read_text(self, relative: str) -> str | None:
        """The file's text; ``None`` when there is none. A file that is not a regular
        file (a FIFO, a device), larger than :data:`MAX_READ_BYTES` or not UTF-8 is a
        ConfigurationError naming it: it is never read past the cap, nor waited on."""
        path = self.root / relative
        try:
            return read_bytes_capped(path, MAX_READ_BYTES).decode("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, FileTooLargeError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ConfigurationError(
                f"cannot read {path} from the fleet's store: {reason}; remove it, or rerun "
                "the race that writes it"
            ) from None

    def remove(self, relative: str) -> None:
        (self.root / relative).unlink(missing_ok=True)


class FsspecStore(ResultStore):
    """An fsspec URL: a race caches in a temporary directory on its node, then its record
    is uploaded, the bundle first and ``record.json`` last (a reader takes a record only
    once ``record.json`` is there, and verifies every file's hash)."""

    def __init__(self, url: str) -> None:
        try:
            import fsspec
        except ImportError:
            raise ConfigurationError(
                f"the store {url} is a URL, which needs fsspec and its backend "
                "(pip install fsspec s3fs, or gcsfs for gs://); or give a shared directory"
            ) from None
        try:
            self.fs, self.base = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as exc:
            raise ConfigurationError(f"cannot open the store {url}: {exc}") from None
        self.location = url
        self.base = self.base.rstrip("/")

    def _path(self, relative: str) -> str:
        return f"{self.base}/{relative}"

    def race_cache_dir(self) -> tuple[str, bool]:
        return tempfile.mkdtemp(prefix="dlopt-fleet-cache-"), True

    def publish(self, cache_dir: str, key: str) -> None:
        local = PlanCache(cache_dir).record_path(key)
        remote = self._path(f"{RECORDS_DIR}/{key}")
        for dirpath, _dirs, files in os.walk(local / BUNDLE_DIR):
            for name in files:
                source = Path(dirpath) / name
                self.fs.makedirs(
                    self._path(f"{RECORDS_DIR}/{key}/{source.parent.relative_to(local)}"),
                    exist_ok=True,
                )
                self.fs.put_file(str(source), f"{remote}/{source.relative_to(local)}")
        self.fs.pipe_file(f"{remote}/{RECORD_NAME}", (local / RECORD_NAME).read_bytes())

    def write_text(self, relative: str, text: str) -> None:
        path = self._path(relative)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, text.encode("utf-8"))

    def read_text(self, relative: str) -> str | None:
        try:
            data: Any = self.fs.cat_file(self._path(relative))
        except FileNotFoundError:
            return None
        return bytes(data).decode("utf-8")

    def remove(self, relative: str) -> None:
        if self.fs.exists(self._path(relative)):
            self.fs.rm_file(self._path(relative))

    def record_keys(self) -> list[str]:
        try:
            entries = self.fs.ls(self._path(RECORDS_DIR), detail=False)
        except FileNotFoundError:
            return []
        return sorted(
            name
            for name in (str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)
            if is_key(name)
        )


def store_problems(location: str, *, writable: bool) -> list[str]:
    """Why the store at ``location`` cannot hold (``writable``) or give the fleet's
    results, checked before Ray starts: a path that is a file, under a filesystem that
    takes no files (``/proc``) or not writable; a URL whose fsspec backend is missing."""
    try:
        return ResultStore.open(location).problems(writable=writable)
    except ConfigurationError as exc:
        return [f"store: {exc}"]


def pull(store: ResultStore, directory: str) -> list[str]:
    """Copy every whole record of ``store`` into the plan cache ``directory`` (for a URL
    store; a directory store is used in place). The keys copied; a record already there
    is kept."""
    if not isinstance(store, FsspecStore):
        raise ConfigurationError(
            f"the store {store.location} is a directory: point plan_cache_dir at it directly"
        )
    cache = PlanCache(directory)
    copied = []
    for key in store.record_keys():
        remote = store._path(f"{RECORDS_DIR}/{key}")
        if not store.fs.exists(f"{remote}/{RECORD_NAME}") or cache.record_path(key).exists():
            continue  # still being uploaded, or already here
        staging = Path(tempfile.mkdtemp(prefix="dlopt-pull-"))
        try:
            store.fs.get(remote + "/", str(staging / key) + "/", recursive=True)
            if cache.install(staging / key, key).written:
                copied.append(key)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return copied
