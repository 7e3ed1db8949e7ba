"""Deployment bundles: the report, the selected plan's artifacts, and a manifest of hashes.

A bundle directory holds ``report.json``, ``artifacts/<plan>/...`` and ``manifest.json``.
The manifest names the selected plan, its provider (plan name, plugin, distribution,
version and the plan's options) and precision, and the SHA-256 of ``report.json`` and of
every artifact file (directories file by file). :func:`verify_bundle` checks a bundle;
:func:`load_bundle` checks it and then serves its plan again through the plan's own
provider (``provider.load``), without the model and without rebuilding.

Bundles are written whole or not at all: everything goes into a temporary sibling
directory that is renamed into place, replacing an earlier bundle whole. Reading parses
JSON only; nothing in a bundle is imported, unpickled or executed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from dlopt.errors import DloptError
from dlopt.evidence.report import MAX_REPORT_BYTES, OptimizationReport, report_from_json
from dlopt.platform.fileio import (
    FileTooLargeError,
    check_can_create_in,
    default_dir_mode,
    fsync_directory,
    read_bytes_capped,
)
from dlopt.platform.names import NAME_RULE, is_plain_name
from dlopt.platform.serialization import atomic_write_text, dumps, parse_strict_json

#: Version 2 added ``report_sha256`` and per-file hashes of directory artifacts.
MANIFEST_VERSION = 2
MANIFEST_NAME = "manifest.json"
REPORT_NAME = "report.json"
ARTIFACTS_DIR = "artifacts"
#: The artifact name of the selected plan saved as a program that serves without the
#: model or a compile (its provider's ``save_program``: an AOTInductor package): a
#: directory with the provider's files and its metadata (``program.json``).
PROGRAM_ARTIFACT = "compiled_program"
#: Attempts to rename a bundle into place while other writers replace it concurrently.
_INSTALL_ATTEMPTS = 100


class BundleError(DloptError, ValueError):
    """A bundle cannot be written where asked, or a bundle on disk fails verification."""


class BundleLoadError(BundleError):
    """A verified bundle whose plan cannot be served here: its plugin is not installed,
    its provider is unavailable on this machine or cannot load saved plans, or loading
    failed."""


@frozen
class SavedProgram:
    """A selected plan saved as a program: its directory (``None`` when none was saved)
    and a line for the report (how long it took, or why not)."""

    directory: Path | None
    note: str


@frozen(eq=False)
class Bundle:
    """A verified bundle: its directory, its report and its manifest (plain JSON)."""

    path: Path
    report: OptimizationReport
    manifest: dict[str, Any]

    def artifact_path(self, name: str) -> Path:
        """Where artifact ``name`` of the selected plan lies in this bundle."""
        try:
            return self.path / self.manifest["artifacts"][name]["path"]
        except KeyError:
            known = ", ".join(sorted(self.manifest.get("artifacts", {}))) or "none"
            raise KeyError(f"no artifact {name!r} in this bundle (artifacts: {known})") from None


# ----------------------------------------------------------------------------- writing


def check_bundle_destination(directory: str | os.PathLike[str]) -> Path:
    """Raise :class:`BundleError` unless a bundle can be written to ``directory``.

    ``directory`` may be new, empty, or an earlier bundle (it has a ``manifest.json``),
    which is then replaced whole; anything else is refused rather than deleted. Its parent
    must be writable (the bundle is renamed in from a sibling directory).
    """
    root = Path(os.path.abspath(directory))
    if os.path.lexists(root):
        _check_replaceable(root)  # gone meanwhile (another writer's): a new directory
    try:
        check_can_create_in(root.parent, purpose=f"the bundle {root}")
    except ValueError as exc:
        raise BundleError(str(exc)) from None
    return root


def write_bundle(
    directory: str | os.PathLike[str],
    report: OptimizationReport,
    artifacts: Mapping[str, str | os.PathLike[str]],
) -> Path:
    """Write a bundle for ``report``'s selected plan with its ``artifacts`` (name -> path).

    Artifacts that no longer exist are left out. Returns ``directory``. Raises
    :class:`BundleError` when a name would lead outside the bundle or ``directory`` holds
    something that is not a bundle.
    """
    root = Path(os.path.abspath(directory))
    plan = report.selected_plan
    if not is_plain_name(plan):
        raise BundleError(
            f"the selected plan's name {plan!r} cannot name a bundle folder: plan names must "
            f"be plain identifiers ({NAME_RULE}); the plugin that registered it must rename it"
        )
    evidence = report.candidate(plan)
    check_bundle_destination(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".staging", dir=root.parent))
    try:
        os.chmod(staging, default_dir_mode())  # mkdtemp makes it 0700
        entries = copy_artifacts(artifacts, staging, staging / ARTIFACTS_DIR / plan)
        report_path = report.save(staging / REPORT_NAME)
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "report": REPORT_NAME,
            "report_sha256": sha256_file(report_path),
            "selected_plan": plan,
            "baseline": report.baseline,
            "precision": evidence.precision,
            # What loading needs: which provider serves the plan, and with which options.
            "provider": {
                "name": plan,
                "plugin": evidence.plugin,
                "distribution": evidence.distribution,
                "version": evidence.version,
                "options": evidence.options,
            },
            "artifacts": entries,
            "metadata": evidence.metadata,
        }
        atomic_write_text(staging / MANIFEST_NAME, dumps(manifest) + "\n")
        fsync_directory(staging)
        _install(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Path(directory)


def _check_replaceable(root: Path) -> bool:
    """Whether ``root``, which existed a moment ago, may be replaced by a bundle: an
    earlier bundle or an empty directory. ``False``: it is gone (another writer moved it
    away meanwhile: look again). Anything else raises :class:`BundleError`."""
    if root.is_symlink():
        raise BundleError(f"{root} is a symbolic link; write the bundle to a real directory path")
    if not root.is_dir():
        if not os.path.lexists(root):
            return False
        raise BundleError(
            f"cannot write a bundle to {root}: it exists and is not a directory; "
            "choose a new or empty directory"
        )
    if (root / MANIFEST_NAME).is_file():
        return True
    try:
        empty = not any(root.iterdir())
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise BundleError(f"cannot read {root}: {exc.strerror or exc}") from None
    # Another writer may have put its whole bundle there since the manifest was looked for.
    if not empty and not (root / MANIFEST_NAME).is_file():
        raise BundleError(
            f"{root} exists and is not a dlopt bundle (it has no {MANIFEST_NAME}); refusing "
            "to replace it: choose a new or empty directory"
        )
    return True


def _check_component(value: str, what: str) -> None:
    if value in ("", ".", "..") or "/" in value or "\\" in value or "\x00" in value:
        raise BundleError(f"{what} {value!r} is not a plain file name; refusing to write it")


def _check_inside(root: Path, path: Path, what: str) -> None:
    if not path.resolve().is_relative_to(root.resolve()):
        raise BundleError(f"{what} would be written to {path}, outside the bundle {root}")


def _clashes(destination: Path, taken: set[Path]) -> bool:
    return any(
        other == destination or other in destination.parents or destination in other.parents
        for other in taken
    )


def copy_artifacts(
    artifacts: Mapping[str, str | os.PathLike[str]], staging: Path, plan_root: Path
) -> dict[str, dict[str, Any]]:
    """Copy a plan's artifacts under ``plan_root`` (inside ``staging``) as a bundle lays
    them out; returns the manifest entries (path relative to ``staging``, hashes)."""
    entries: dict[str, dict[str, Any]] = {}
    taken: set[Path] = set()
    for name, source_text in artifacts.items():
        source = Path(os.path.abspath(source_text))
        if not source.exists():
            continue
        _check_component(source.name, f"the file name of artifact {name!r}")
        # Files keep their names side by side (a plan's own manifest may refer to its
        # siblings); two artifacts with one file name each get a folder of their own.
        destination = plan_root / source.name
        if _clashes(destination, taken):
            if not is_plain_name(name):
                raise BundleError(
                    f"artifact name {name!r} cannot name a bundle folder: {NAME_RULE}"
                )
            destination = plan_root / name / source.name
            if _clashes(destination, taken):
                raise BundleError(f"artifact {name!r} would overwrite another artifact")
        _check_inside(staging, destination, f"artifact {name!r}")
        taken.add(destination)
        destination.parent.mkdir(parents=True, exist_ok=True)
        entry: dict[str, Any] = {"path": destination.relative_to(staging).as_posix()}
        if source.is_dir():
            entry["files"] = _copy_tree(source, destination, name)
        else:
            entry["sha256"] = _copy_file(source, destination)
        entries[name] = entry
    return entries


def _copy_file(source: Path, destination: Path) -> str:
    """Copy one file (new, with umask permissions), fsync it; its SHA-256."""
    digest = hashlib.sha256()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(destination, flags, 0o666)  # the umask applies, as for open()
    with source.open("rb") as reader, os.fdopen(fd, "wb") as writer:
        for chunk in iter(lambda: reader.read(1 << 20), b""):
            digest.update(chunk)
            writer.write(chunk)
        writer.flush()
        os.fsync(writer.fileno())
    return digest.hexdigest()


def _copy_tree(source: Path, destination: Path, name: str) -> dict[str, str]:
    """Copy a directory file by file; ``{relative posix path: sha256}`` of its files."""
    hashes: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(source):
        here = Path(dirpath)
        relative = here.relative_to(source)
        (destination / relative).mkdir(exist_ok=True)
        dirnames.sort()
        for sub in dirnames:
            if (here / sub).is_symlink():
                raise BundleError(
                    f"artifact {name!r} holds a symbolic link to a directory ({here / sub}); "
                    "bundles copy regular files only"
                )
        for file_name in sorted(filenames):
            path = here / file_name
            if not path.is_file():
                raise BundleError(f"artifact {name!r} holds {path}, which is not a regular file")
            hashes[(relative / file_name).as_posix()] = _copy_file(
                path, destination / relative / file_name
            )
    return hashes


def _install(staging: Path, root: Path) -> None:
    """Rename ``staging`` to ``root``, replacing an earlier bundle there whole."""
    for _ in range(_INSTALL_ATTEMPTS):
        old: Path | None = None
        if os.path.lexists(root):
            if not _check_replaceable(root):
                continue  # another writer moved it away meanwhile: look again
            old = root.parent / f".{root.name}.{secrets.token_hex(8)}.old"
            try:
                os.rename(root, old)
            except FileNotFoundError:  # another writer moved it first: look again
                continue
        try:
            os.rename(staging, root)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                # Another writer installed its whole bundle meanwhile; ours replaces it.
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
                continue
            if old is not None:
                with contextlib.suppress(OSError):
                    os.rename(old, root)  # put the earlier bundle back
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        fsync_directory(root.parent)
        return
    raise BundleError(f"could not write the bundle {root}: other writers kept replacing it")


# ----------------------------------------------------------------------------- reading


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_bundle(directory: str | os.PathLike[str]) -> Bundle:
    """Read and verify a bundle written by :meth:`OptimizationDecision.save_bundle`.

    Every file the manifest names must lie inside the bundle and match its SHA-256, the
    bundle must hold no other files and no symbolic links, and ``report.json`` must name
    the plan the manifest names. Raises :class:`BundleError` naming the first file that
    disagrees. Only strict JSON is parsed; nothing is imported or executed.
    """
    root = Path(directory)
    if not root.is_dir():
        raise BundleError(f"{root} is not a bundle directory")
    real = root.resolve()
    manifest = _read_manifest(root / MANIFEST_NAME)
    report, report_path = _checked_report(root, real, manifest)
    if manifest.get("selected_plan") != report.selected_plan:
        raise BundleError(
            f"{root / MANIFEST_NAME} names plan {manifest.get('selected_plan')!r} but "
            f"{root / manifest['report']} selected {report.selected_plan!r}: the bundle is "
            "inconsistent"
        )
    listed = {MANIFEST_NAME, report_path.relative_to(real).as_posix()}
    for name, entry in _field(manifest, "artifacts", dict, root).items():
        listed |= _verify_artifact(real, root, name, entry)
    _check_nothing_else(real, root, listed)
    return Bundle(path=root, report=report, manifest=manifest)


def verified_report(directory: str | os.PathLike[str]) -> OptimizationReport:
    """The report of the bundle in ``directory``, read only when its bytes match the
    manifest's ``report_sha256`` (:class:`BundleError` otherwise). The artifacts are not
    hashed: this is for reading a bundle's evidence, not for serving its plan
    (:func:`verify_bundle` checks everything)."""
    root = Path(directory)
    if not root.is_dir():
        raise BundleError(f"{root} is not a bundle directory")
    return _checked_report(root, root.resolve(), _read_manifest(root / MANIFEST_NAME))[0]


def _checked_report(
    root: Path, real: Path, manifest: Mapping[str, Any]
) -> tuple[OptimizationReport, Path]:
    """The report the manifest names, parsed once its SHA-256 matches, and its path."""
    report_rel = _field(manifest, "report", str, root)
    report_path = _resolve_inside(real, report_rel, root)
    try:
        data = read_bytes_capped(report_path, MAX_REPORT_BYTES)
    except FileTooLargeError as exc:
        raise BundleError(str(exc)) from None
    except OSError as exc:
        raise BundleError(f"cannot read {root / report_rel}: {exc.strerror or exc}") from None
    if hashlib.sha256(data).hexdigest() != _field(manifest, "report_sha256", str, root):
        raise _changed(root / report_rel)
    try:
        report = report_from_json(data.decode("utf-8"))
    except ValueError as exc:
        raise BundleError(f"{root / report_rel} is not a dlopt report: {exc}") from None
    return report, report_path


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        data = read_bytes_capped(path, MAX_REPORT_BYTES)
        manifest = parse_strict_json(data.decode("utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path.parent} is not a dlopt bundle: it has no {path.name}") from None
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from None
    except RecursionError:
        raise BundleError(f"{path} is not a bundle manifest: JSON nested too deeply") from None
    except ValueError as exc:
        raise BundleError(f"{path} is not a bundle manifest: {exc}") from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{path} is not a bundle manifest: expected a JSON object")
    version = manifest.get("manifest_version")
    if version != MANIFEST_VERSION:
        raise BundleError(
            f"{path} has manifest_version {version!r}; this dlopt reads version "
            f"{MANIFEST_VERSION}: write the bundle again or use the dlopt that wrote it"
        )
    return manifest


def _field(data: Mapping[str, Any], key: str, kind: type, root: Path) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise BundleError(
            f"{root / MANIFEST_NAME}: {key!r} must be a {kind.__name__}, not {value!r}"
        )
    return value


def _resolve_inside(real_root: Path, relative: str, root: Path) -> Path:
    """``real_root / relative``, refused unless it is a plain relative path inside."""
    candidate = Path(relative)
    if candidate.is_absolute() or "\\" in relative or "\x00" in relative or ".." in candidate.parts:
        raise BundleError(f"{root / MANIFEST_NAME} names {relative!r}, a path outside the bundle")
    path = (real_root / candidate).resolve()
    if not path.is_relative_to(real_root) or path == real_root:
        raise BundleError(f"{root / MANIFEST_NAME} names {relative!r}, a path outside the bundle")
    return path


def _changed(path: Path) -> BundleError:
    return BundleError(
        f"{path} does not match the SHA-256 in the bundle's manifest: it was changed after "
        "the bundle was written; do not deploy it, write the bundle again"
    )


def _verify_file(path: Path, expected: object, shown: Path) -> None:
    if not path.is_file():
        raise BundleError(f"{shown} is missing from the bundle (the manifest lists it)")
    if not isinstance(expected, str) or sha256_file(path) != expected:
        raise _changed(shown)


def _verify_artifact(real: Path, root: Path, name: str, entry: Any) -> set[str]:
    """Check one manifest artifact entry; the bundle-relative paths of its files."""
    if not isinstance(entry, dict):
        raise BundleError(f"{root / MANIFEST_NAME}: artifact {name!r} must be an object")
    relative = _field(entry, "path", str, root)
    path = _resolve_inside(real, relative, root)
    if "files" not in entry:
        _verify_file(path, entry.get("sha256"), root / relative)
        return {path.relative_to(real).as_posix()}
    files = _field(entry, "files", dict, root)
    if not path.is_dir():
        raise BundleError(f"{root / relative} is missing from the bundle (the manifest lists it)")
    listed = set()
    for inner, digest in files.items():
        file_path = _resolve_inside(path, inner, root)
        _verify_file(file_path, digest, root / relative / inner)
        listed.add(file_path.relative_to(real).as_posix())
    return listed


def _check_nothing_else(real: Path, root: Path, listed: set[str]) -> None:
    """Refuse files and links the manifest does not list (a plan could load them)."""
    for dirpath, dirnames, filenames in os.walk(real):
        here = Path(dirpath)
        for entry in [*dirnames, *filenames]:
            path = here / entry
            shown = root / path.relative_to(real)
            if path.is_symlink():
                raise BundleError(f"{shown} is a symbolic link; dlopt bundles hold none")
            if entry in filenames and path.relative_to(real).as_posix() not in listed:
                raise BundleError(
                    f"{shown} is not listed in the bundle's manifest: it was added after "
                    "the bundle was written; remove it or write the bundle again"
                )
