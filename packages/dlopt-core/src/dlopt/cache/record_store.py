"""Cache records on disk: each one a bundle plus the ingredients of its key.

Layout of a cache directory (everything dlopt writes there; other files are left alone)::

    DLOPT_PLAN_CACHE            the marker: this directory holds a dlopt plan cache
    records/<key>/record.json   the key, its ingredients, when and how it was written,
                                the reference's fp32 rounding (dlopt.cache.kept_rounding)
    records/<key>/bundle/       a bundle (report, the selected plan's artifacts, hashes)
    set-aside/<key>.<when>/     records that could not be read, kept for a look
    staging/                    records being written (renamed into records/ when whole)

A record is written whole or not at all: it is staged, fsynced and renamed into place;
the rename refuses to replace a record another process installed first, so two
processes writing one key leave one valid record (the loser writes nothing). A record
that is truncated, corrupted, foreign or of an older format is set aside (renamed into
``set-aside/``) with a warning, never a crash. Reading parses strict JSON only and
verifies every hash (:func:`dlopt.bundle.store.verify_bundle`); nothing is imported,
unpickled or executed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attrs import frozen

from dlopt.bundle.store import Bundle, BundleError, verify_bundle, write_bundle
from dlopt.cache.key import KEY_VERSION, differences
from dlopt.errors import DloptError
from dlopt.evidence.report import OptimizationReport
from dlopt.platform.fileio import atomic_write_bytes, fsync_directory, read_bytes_capped
from dlopt.platform.serialization import dumps, parse_strict_json

MARKER_NAME = "DLOPT_PLAN_CACHE"
RECORDS_DIR = "records"
SET_ASIDE_DIR = "set-aside"
STAGING_DIR = "staging"
RECORD_NAME = "record.json"
BUNDLE_DIR = "bundle"
#: The optional record.json field holding the reference's fp32 rounding
#: (:mod:`dlopt.cache.kept_rounding` reads and writes what is in it).
ROUNDING_FIELD = "reference_rounding"
#: Bumped when record.json changes shape; older records are set aside, not misread.
RECORD_VERSION = 1
CACHE_DIR_ENV = "DLOPT_CACHE_DIR"
_MARKER_TEXT = '{"format": "dlopt-plan-cache", "layout_version": 1}\n'
_MAX_RECORD_BYTES = 16 * 2**20
_KEY_PATTERN = re.compile(r"[0-9a-f]{64}")
_SET_ASIDE_PATTERN = re.compile(r"[0-9a-f]{64}\.\d{8}T\d{6}Z\.[0-9a-f]{8}")
_STAGING_PREFIX = "record-"


class PlanCacheError(DloptError, ValueError):
    """A cache directory that cannot be used, or a key that names no record."""


class PlanCacheWarning(UserWarning):
    """A record was set aside: it could not be read (the message says why)."""


def is_key(text: str) -> bool:
    """Whether ``text`` is a whole cache key (64 lowercase hex digits)."""
    return bool(_KEY_PATTERN.fullmatch(text))


@frozen(eq=False)
class CacheRecord:
    """A verified record: its key, its ingredients and its bundle."""

    key: str
    path: Path
    created_at: str
    ingredients: dict[str, Any]
    bundle: Bundle
    #: The reference's fp32 rounding as the race measured it, as read from record.json
    #: (``None`` where the record keeps none; :mod:`dlopt.cache.kept_rounding` reads it).
    reference_rounding: Any = None

    @property
    def report(self) -> OptimizationReport:
        return self.bundle.report


@frozen
class RecordSummary:
    """One record as ``dlopt cache list`` shows it (read without verifying artifacts)."""

    key: str
    path: Path
    created_at: str | None
    selected_plan: str | None
    size_bytes: int
    problem: str | None = None


@frozen
class WriteResult:
    """Whether a record was installed, and if not, why."""

    written: bool
    path: Path | None
    note: str | None = None


class PlanCache:
    """A plan cache directory (see the module docstring for its layout)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(directory))

    # -- paths ----------------------------------------------------------------------
    @property
    def marker(self) -> Path:
        return self.root / MARKER_NAME

    def record_path(self, key: str) -> Path:
        if not is_key(key):
            raise PlanCacheError(f"{key!r} is not a cache key (64 hex digits)")
        return self.root / RECORDS_DIR / key

    def is_cache(self) -> bool:
        """Whether this directory holds dlopt's marker."""
        return self.marker.is_file()

    # -- reading --------------------------------------------------------------------
    def lookup(self, key: str) -> CacheRecord | None:
        """The verified record under ``key``, or ``None``. A record that cannot be read is
        set aside with a :class:`PlanCacheWarning` and ``None`` is returned."""
        return self.find(key)[0]

    def find(self, key: str) -> tuple[CacheRecord | None, str | None]:
        """:meth:`lookup`, and why a record that was there could not be read (it is then
        set aside with a :class:`PlanCacheWarning`): ``(record, None)``, ``(None, why)``
        or ``(None, None)`` when there is no record."""
        path = self.record_path(key)
        if not os.path.lexists(path):
            return None, None
        try:
            return read_record(path, key), None
        except (BundleError, PlanCacheError) as exc:
            self.set_aside(path, str(exc))
            return None, str(exc)

    def closest(
        self, ingredients: Mapping[str, Any], *, limit: int = 500
    ) -> tuple[str, list[str]] | None:
        """The readable record whose ingredients differ least from ``ingredients`` (newest
        first among equals), and the differing paths; ``None`` when there is none."""
        best: tuple[int, str, str, list[str]] | None = None
        for count, path in enumerate(self._record_dirs()):
            if count >= limit:
                break
            try:
                data = read_record_json(path / RECORD_NAME, path.name)
            except PlanCacheError:
                continue
            diff = differences(data["ingredients"], dict(ingredients))
            created = str(data.get("created_at", ""))
            rank = (len(diff), _negated(created))
            if best is None or rank < (best[0], _negated(best[1])):
                best = (len(diff), created, path.name, diff)
        return None if best is None else (best[2], best[3])

    def summaries(self) -> list[RecordSummary]:
        """Every record, newest first, read without verifying artifact hashes."""
        found = []
        for path in self._record_dirs():
            size = _tree_size(path)
            try:
                data = read_record_json(path / RECORD_NAME, path.name)
            except PlanCacheError as exc:
                found.append(RecordSummary(path.name, path, None, None, size, str(exc)))
                continue
            found.append(
                RecordSummary(
                    path.name, path, str(data.get("created_at")), data.get("selected_plan"), size
                )
            )
        return sorted(found, key=lambda r: r.created_at or "", reverse=True)

    def resolve(self, key_or_prefix: str) -> str:
        """The whole key a unique prefix (at least 6 hex digits) names."""
        text = key_or_prefix.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{6,64}", text):
            raise PlanCacheError(
                f"{key_or_prefix!r} is not a cache key: give at least 6 of its hex digits "
                "(see `dlopt cache list`)"
            )
        matches = [p.name for p in self._record_dirs() if p.name.startswith(text)]
        if not matches:
            raise PlanCacheError(f"no record in {self.root} has a key starting with {text}")
        if len(matches) > 1:
            raise PlanCacheError(
                f"{text} is the start of {len(matches)} keys in {self.root}; give more digits"
            )
        return matches[0]

    def _record_dirs(self) -> Iterator[Path]:
        records = self.root / RECORDS_DIR
        try:
            entries = sorted(records.iterdir())
        except OSError:
            return
        for entry in entries:
            if is_key(entry.name) and entry.is_dir() and not entry.is_symlink():
                yield entry

    # -- writing --------------------------------------------------------------------
    def write(
        self,
        key: str,
        ingredients: Mapping[str, Any],
        report: OptimizationReport,
        artifacts: Mapping[str, str | os.PathLike[str]],
        *,
        replace: bool = False,
        reference_rounding: Mapping[str, Any] | None = None,
    ) -> WriteResult:
        """Store a decision under ``key`` (see the module docstring).

        ``replace``: put this record in place of an existing one (its revalidation
        failed); otherwise an existing record stays and this one is not written.
        ``reference_rounding``: the race's measured fp32 rounding, kept for a hit
        (:func:`dlopt.cache.kept_rounding.rounding_record`).
        """
        final = self.record_path(key)
        self._ensure_layout()
        staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self.root / STAGING_DIR))
        try:
            write_bundle(staging / BUNDLE_DIR, report, artifacts)
            record = {
                "record_version": RECORD_VERSION,
                "key_version": KEY_VERSION,
                "key": key,
                "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "selected_plan": report.selected_plan,
                "ingredients": dict(ingredients),
            }
            if reference_rounding is not None:
                record[ROUNDING_FIELD] = dict(reference_rounding)
            atomic_write_bytes(staging / RECORD_NAME, (dumps(record) + "\n").encode("utf-8"))
            fsync_directory(staging)
            return self._install(staging, final, replace)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def install(self, record_dir: Path, key: str) -> WriteResult:
        """Install a whole record copied from elsewhere (a fleet's result store) under
        ``key``, verified first; a record already there is kept."""
        read_record(record_dir, key)
        final = self.record_path(key)
        self._ensure_layout()
        staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self.root / STAGING_DIR))
        try:
            shutil.copytree(record_dir, staging, dirs_exist_ok=True)
            fsync_directory(staging)
            return self._install(staging, final, replace=False)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _install(self, staging: Path, final: Path, replace: bool) -> WriteResult:
        final.parent.mkdir(parents=True, exist_ok=True)
        old: Path | None = None
        if replace and os.path.lexists(final):
            old = self.root / STAGING_DIR / f"{_STAGING_PREFIX}old-{os.urandom(4).hex()}"
            with contextlib.suppress(FileNotFoundError):
                os.rename(final, old)
        try:
            # rename() onto a non-empty directory fails: a record installed meanwhile wins.
            os.rename(staging, final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            return WriteResult(
                False, final, "another process stored this key first; kept its record"
            )
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        fsync_directory(final.parent)
        return WriteResult(True, final)

    def _ensure_layout(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.marker.exists():
            with contextlib.suppress(FileExistsError):
                fd = os.open(self.marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                with os.fdopen(fd, "w") as handle:
                    handle.write(_MARKER_TEXT)
        for name in (RECORDS_DIR, SET_ASIDE_DIR, STAGING_DIR):
            (self.root / name).mkdir(exist_ok=True)

    def set_aside(self, path: Path, why: str) -> Path | None:
        """Move an unreadable record into ``set-aside/`` and warn; ``None`` when another
        process moved it first."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self._ensure_layout()
        aside = self.root / SET_ASIDE_DIR / f"{path.name}.{stamp}.{os.urandom(4).hex()}"
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return None
        warnings.warn(
            f"the plan cache record {path} could not be read ({why}); it was moved to "
            f"{aside} and the plan will be raced again",
            PlanCacheWarning,
            stacklevel=3,
        )
        return aside

    # -- removing -------------------------------------------------------------------
    def remove(self, *, older_than_s: float | None = None) -> list[Path]:
        """Remove records (all, or those written more than ``older_than_s`` ago), records
        set aside and stale staging directories; only what dlopt's layout names, never
        another file. Without ``older_than_s`` the marker goes too once nothing of dlopt's
        is left. The paths removed."""
        if not self.is_cache():
            raise PlanCacheError(
                f"{self.root} is not a dlopt plan cache (it has no {MARKER_NAME}); "
                "nothing was removed"
            )
        now = time.time()
        removed: list[Path] = []
        for kind, pattern in (
            (RECORDS_DIR, _KEY_PATTERN),
            (SET_ASIDE_DIR, _SET_ASIDE_PATTERN),
            (STAGING_DIR, re.compile(re.escape(_STAGING_PREFIX) + r"[A-Za-z0-9_-]+")),
        ):
            folder = self.root / kind
            if not folder.is_dir() or folder.is_symlink():
                continue
            for entry in sorted(folder.iterdir()):
                if not pattern.fullmatch(entry.name) or entry.is_symlink() or not entry.is_dir():
                    continue
                if older_than_s is not None and now - _written_at(entry) < older_than_s:
                    continue
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
            if older_than_s is None:
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty: a foreign file keeps it
        if older_than_s is None and not any(
            (self.root / kind).exists() for kind in (RECORDS_DIR, SET_ASIDE_DIR, STAGING_DIR)
        ):
            self.marker.unlink(missing_ok=True)
        return removed


def read_record(path: Path, key: str) -> CacheRecord:
    """Read and verify the record at ``path`` (under ``key``): :class:`PlanCacheError` or
    :class:`BundleError` naming what is wrong."""
    if path.is_symlink() or not path.is_dir():
        raise PlanCacheError(f"{path} is not a record directory")
    data = read_record_json(path / RECORD_NAME, key)
    bundle = verify_bundle(path / BUNDLE_DIR)
    if bundle.report.selected_plan != data.get("selected_plan"):
        raise PlanCacheError(f"{path}: record.json and the bundle name different plans")
    return CacheRecord(
        key,
        path,
        str(data.get("created_at")),
        data["ingredients"],
        bundle,
        data.get(ROUNDING_FIELD),
    )


def read_record_json(path: Path, key: str) -> dict[str, Any]:
    """``record.json`` of key ``key`` (strict JSON, its version and key checked):
    :class:`PlanCacheError` naming what is wrong."""
    try:
        text = read_bytes_capped(path, _MAX_RECORD_BYTES).decode("utf-8")
        data = parse_strict_json(text)
    except FileNotFoundError:
        raise PlanCacheError(f"{path} is missing") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise PlanCacheError(f"{path} is not a record: {exc}") from None
    if not isinstance(data, dict):
        raise PlanCacheError(f"{path} is not a record: expected a JSON object")
    if data.get("record_version") != RECORD_VERSION:
        raise PlanCacheError(
            f"{path} has record_version {data.get('record_version')!r}; this dlopt reads "
            f"version {RECORD_VERSION}"
        )
    if data.get("key") != key or not isinstance(data.get("ingredients"), dict):
        raise PlanCacheError(f"{path} does not hold the record of key {key}")
    return data


def _written_at(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _tree_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _negated(text: str) -> tuple[int, ...]:
    """Sorts newer ISO timestamps first."""
    return tuple(-ord(c) for c in text)


def default_cache_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """``$DLOPT_CACHE_DIR`` when set, else ``None``."""
    env = os.environ if environ is None else environ
    value = env.get(CACHE_DIR_ENV, "").strip()
    return value or None
