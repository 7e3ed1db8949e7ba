"""How a saved plan is served again: load its artifact, rebuild it, or rebuild it with
torch's compile caches restored (:class:`dlopt.contract.provider.Reload`).

:class:`ReloadingProvider` wraps the plan's installed provider so that the pipeline's
prepare stage (probe, build timed, first calls, validation) brings a saved plan back
exactly as it builds a new one: its ``build`` loads, or rebuilds, as the provider
declares.

Torch's compile caches (``torch.compiler.save_cache_artifacts``) are torch's own
serialized format, which torch unpickles when it loads them. They hold Inductor's
generated code but not the C++ kernels compiled from it, which a fresh process would
compile again (most of a CPU plan's compile time), so the race engine binaries torch loaded,
and the small library Inductor compiles to check the CPU's vector ISA, are saved beside
them and put back into Inductor's cache directory, where torch finds them instead of
compiling. dlopt hands both to torch only after every file's SHA-256
matches the manifest, and only from a directory that nobody but this user can write
(:func:`private_to_user`): the same trust torch gives its own cache directory. Anything
else is rebuilt from scratch (compiled again).

A provider may also save the selected plan as a program that serves without the model
and without compiling (``save_program``; the Inductor plans and the PT2E static int8
plan write an AOTInductor package): the record keeps it under ``dlopt.bundle.store.PROGRAM_ARTIFACT`` with the
metadata the provider returned, and a hit loads it (``load_program``) under the same
checks as the kernels, falling back to the rebuild above when it cannot.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from dlopt.bundle.store import ARTIFACTS_DIR, PROGRAM_ARTIFACT, SavedProgram
from dlopt.contract.provider import BuiltPlan, ProviderContext, Reload
from dlopt.errors import ProviderBuildError
from dlopt.pipeline.state import CandidateState
from dlopt.platform.fileio import read_bytes_capped
from dlopt.platform.serialization import (
    atomic_write_text,
    dumps,
    parse_strict_json,
    strict_jsonable,
)

if TYPE_CHECKING:
    from dlopt.cache.record_store import CacheRecord

#: The artifact name (in a record's bundle) of torch's serialized compile caches: a
#: directory holding :data:`COMPILE_CACHE_FILE` and the race engine binaries under
#: :data:`KERNELS_DIR` (older records hold the file alone).
COMPILE_CACHE_ARTIFACT = "torch_compile_cache"
COMPILE_CACHE_FILE = "torch_compile_cache.bin"
KERNELS_DIR = "kernels"
#: The program's metadata file, in the program's directory.
PROGRAM_METADATA_FILE = "program.json"
_PROGRAM_METADATA_CAP = 1 << 20
#: Inductor's code caches whose keys name compiled C++ kernels.
_KERNEL_CACHES = ("CppCodeCache", "CppPythonBindingsCodeCache", "CppWrapperCodeCache")
_KERNEL_KEY = re.compile(r"[a-z0-9_]{4,}")
#: A kernel binary's place in Inductor's cache directory: ``<2 chars>/<key>[.<part>].so``.
_KERNEL_PATH = re.compile(r"[a-z0-9_]{2}/[a-z0-9_]+(\.[a-z0-9_]+)*\.so")


def save_compile_cache(directory: Path) -> Path | None:
    """Write every compile cache artifact torch made in this process, and the compiled
    kernels it loaded, to ``directory``; ``None`` when torch has none (nothing was
    compiled) or cannot save them."""
    import torch

    try:
        saved = torch.compiler.save_cache_artifacts()
    except Exception:  # an older torch, or an artifact torch cannot serialize
        return None
    if not saved or not saved[0]:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    (directory / COMPILE_CACHE_FILE).write_bytes(saved[0])
    root = _inductor_cache_root()
    if root is not None:
        for binary in [*_loaded_kernel_binaries(root), *_isa_check_binaries(root)]:
            target = directory / KERNELS_DIR / binary.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(binary, target)
    return directory


def save_program(
    provider: Any, plan: BuiltPlan, parent: Path | None, context: ProviderContext
) -> SavedProgram | None:
    """Ask ``provider`` to save ``plan`` as a program in a new directory under ``parent``
    (``None`` when it cannot save programs). A provider that declines or fails leaves no
    program; the note says why (the record is written either way)."""
    saver = getattr(provider, "save_program", None)
    if not callable(saver) or not callable(getattr(provider, "load_program", None)):
        return None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="program-", dir=parent))
    start = time.perf_counter()
    try:
        metadata = saver(plan, directory, context)
        if metadata is None:
            shutil.rmtree(directory, ignore_errors=True)
            return SavedProgram(None, "not saved: the plan's options turn it off")
        atomic_write_text(directory / PROGRAM_METADATA_FILE, dumps(strict_jsonable(dict(metadata))))
    except Exception as exc:  # a plan that cannot be packaged still has its record
        shutil.rmtree(directory, ignore_errors=True)
        return SavedProgram(None, f"not saved: {type(exc).__name__}: {exc}"[:500])
    return SavedProgram(directory, f"saved in {time.perf_counter() - start:.1f} s")


@attrs.define(eq=False)
class ProgramSaver:
    """Saves one selected plan as a program at most once, when first asked: the plan
    cache's record and a bundle (``decision.save_bundle(..., compiled_program=True)``)
    share the one program. ``saved``: a program saved before (a cache record's)."""

    provider: Any = None
    plan: BuiltPlan | None = None
    #: The plan's build context, made only when a program is saved (it copies the inputs).
    context: Callable[[], ProviderContext] | None = None
    saved: SavedProgram | None = None
    _asked: bool = attrs.field(default=False, init=False)

    def __call__(self, parent: Path | None) -> SavedProgram | None:
        """The program, saved under ``parent`` on the first call; ``None`` when the
        plan's provider saves no programs."""
        if self.saved is None and not self._asked and self.plan is not None:
            assert self.context is not None
            self.saved = save_program(self.provider, self.plan, parent, self.context())
        self._asked = True
        return self.saved


def read_program_metadata(directory: Path) -> dict[str, Any]:
    """The metadata a provider returned when it saved the program in ``directory``."""
    data = parse_strict_json(
        read_bytes_capped(directory / PROGRAM_METADATA_FILE, _PROGRAM_METADATA_CAP).decode()
    )
    if not isinstance(data, dict):
        raise ValueError(f"{directory / PROGRAM_METADATA_FILE} does not hold a JSON object")
    return data


def restore_compile_cache(path: Path) -> bool:
    """Hand torch its compile caches saved at ``path`` (already hash-checked) and put
    the saved kernel binaries where Inductor looks for them; whether torch took the
    caches."""
    import torch

    blob = path / COMPILE_CACHE_FILE if path.is_dir() else path
    if path.is_dir():
        _restore_kernel_binaries(path / KERNELS_DIR)
    try:
        return torch.compiler.load_cache_artifacts(blob.read_bytes()) is not None
    except Exception:
        return False


def _inductor_cache_root() -> Path | None:
    """Inductor's cache directory as it is now (``TORCHINDUCTOR_CACHE_DIR`` or its
    default); ``None`` where this torch does not say."""
    try:
        from torch._inductor.runtime.runtime_utils import cache_dir
    except ImportError:
        return None
    return Path(cache_dir())


def _loaded_kernel_binaries(root: Path) -> list[Path]:
    """The compiled C++ kernels this process loaded from ``root``: the binaries named by
    the keys of Inductor's in-memory code caches (torch's layout, read defensively: a
    torch that lays them out otherwise yields none and the hit compiles again)."""
    try:
        from torch._inductor import codecache
    except ImportError:
        return []
    keys: set[str] = set()
    for name in _KERNEL_CACHES:
        keys.update(k for k in getattr(getattr(codecache, name, None), "cache", {}) or {})
    found = []
    for key in sorted(k for k in keys if isinstance(k, str) and _KERNEL_KEY.fullmatch(k)):
        for binary in (root / key[1:3]).glob(f"{key}*.so"):
            if binary.is_file() and _KERNEL_PATH.fullmatch(binary.relative_to(root).as_posix()):
                found.append(binary)
    return found


def _isa_check_sources() -> set[str]:
    """The C++ programs torch compiles to check the CPU's vector ISA: the base check
    every ISA runs and the extra ones an AVX-512 or AMX CPU runs (bf16, VNNI, AMX tiles),
    read from torch's ``VecISA`` classes (``_avx_code``, ``_avx512_bf16_code``, ...);
    empty where this torch does not say what that code is."""
    try:
        from torch._inductor.cpu_vec_isa import VecISA
    except ImportError:
        return set()
    sources: set[str] = set()
    pending = [VecISA]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        sources.update(
            value
            for name, value in vars(cls).items()
            if name.endswith("_code") and isinstance(value, str)
        )
    return sources


def _isa_check_binaries(root: Path) -> list[Path]:
    """The test libraries Inductor compiled to check which vector ISA this CPU runs: the
    first kernel a process loads asks for them, and a fresh cache directory pays a C++
    compile for each (about 2 s, several on an AVX-512 CPU). Found by their source,
    torch's own ISA check code, beside them."""
    sources = _isa_check_sources()
    sizes = {len(code.encode()) for code in sources}
    found = []
    for source in sorted(root.glob("??/*.cpp")):
        binary = source.with_suffix(".so")
        if not binary.is_file() or not _KERNEL_PATH.fullmatch(binary.relative_to(root).as_posix()):
            continue
        try:
            if source.stat().st_size in sizes and source.read_text() in sources:
                found.append(binary)
        except (OSError, UnicodeDecodeError):
            continue
    return found


def _restore_kernel_binaries(saved: Path) -> None:
    """Copy saved kernel binaries into Inductor's cache directory; a name outside the
    kernel layout is skipped, an existing file is left alone."""
    root = _inductor_cache_root()
    if root is None or not saved.is_dir():
        return
    for binary in sorted(saved.rglob("*.so")):
        relative = binary.relative_to(saved).as_posix()
        if binary.is_symlink() or not binary.is_file() or not _KERNEL_PATH.fullmatch(relative):
            continue
        target = root / relative
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(binary, staging)
        os.replace(staging, target)


def private_to_user(path: Path) -> bool:
    """Whether ``path`` and every directory above it up to the first one owned by root
    belong to this user and are writable by nobody else (POSIX; elsewhere ``False``)."""
    if not hasattr(os, "getuid"):
        return False
    uid = os.getuid()
    here = path.resolve()
    for directory in (here, *here.parents):
        try:
            info = directory.stat()
        except OSError:
            return False
        if info.st_uid == 0 and directory != here:
            # System directories (/, /tmp with its sticky bit) end the walk.
            return not (info.st_mode & stat.S_IWOTH) or bool(info.st_mode & stat.S_ISVTX)
        if info.st_uid != uid or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    return True


@attrs.define(eq=False)
class ReloadingProvider:
    """A saved plan's provider, whose ``build`` brings the saved plan back.

    ``plan_dir``: the plan's saved files (``artifacts/<plan>`` of a bundle). ``metadata``:
    the plan's recorded metadata (what ``load`` reads). ``compile_cache``: torch's saved
    compile caches, when the plan is rebuilt with them and they may be trusted.
    ``program``: the plan saved as a program (``save_program``), when it may be trusted:
    loaded first, the other ways being the fallback.
    """

    provider: Any
    plan_dir: Path
    metadata: dict[str, Any]
    compile_cache: Path | None = None
    #: Copy the saved files into the race's own plan directory before loading: a race
    #: requires a plan's artifacts there, and the provider then never writes to the record.
    copy_to_plan_dir: bool = False
    #: Set by ``build``: whether torch took the restored compile caches.
    compile_cache_restored: bool = False
    program: Path | None = None
    #: Set by ``build``: why the saved program was not served (``None``: it was, or none).
    program_error: str | None = None

    @property
    def name(self) -> str:
        return str(self.provider.name)

    @property
    def reloads_by(self) -> Reload:
        return Reload.of(self.provider)

    def __getattr__(self, name: str) -> Any:
        # role, precision, options_type, install_hint...: the provider's own.
        if name.startswith("__") or name == "provider":
            raise AttributeError(name)
        return getattr(self.provider, name)

    def probe(self, context: ProviderContext) -> Any:
        return self.provider.probe(context)

    def build(self, model: Any, context: ProviderContext) -> BuiltPlan:
        if self.program is not None:
            loaded = self._load_program(context)
            if loaded is not None:
                return loaded
        kind = self.reloads_by
        if kind is Reload.LOAD:
            directory = self.plan_dir
            if self.copy_to_plan_dir:
                directory = context.plan_dir(self.name)
                shutil.copytree(self.plan_dir, directory, dirs_exist_ok=True)
            plan = self.provider.load(directory, dict(self.metadata), context)
            if not isinstance(plan, BuiltPlan):
                raise ProviderBuildError(
                    f"{self.name}: load() returned {type(plan).__name__}, expected a BuiltPlan"
                )
            return plan
        if model is None:
            unserved = (
                f" (its saved program could not be served: {self.program_error})"
                if self.program_error
                else ""
            )
            raise ProviderBuildError(
                f"plan {self.name!r} comes back by rebuilding it from the model ({kind.value})"
                f"{unserved}; pass the model: load_bundle(path, model=model)"
            )
        if kind is Reload.REBUILD_WITH_COMPILE_CACHE and self.compile_cache is not None:
            self.compile_cache_restored = restore_compile_cache(self.compile_cache)
        # What the plan saved when it was raced, for a build that reads it back.
        context = attrs.evolve(context, saved_plan_dir=self.plan_dir)
        plan = self.provider.build(model, context)
        if isinstance(plan, BuiltPlan) and kind is Reload.REBUILD_WITH_COMPILE_CACHE:
            plan.metadata = {**plan.metadata, "compile_cache_restored": self.compile_cache_restored}
        if isinstance(plan, BuiltPlan) and self.program_error is not None:
            plan.metadata = {**plan.metadata, "saved_program_not_served": self.program_error}
        return plan

    @property
    def serves_without_model(self) -> bool:
        """Whether this plan can come back with no model: loaded, or from a program."""
        return self.reloads_by is Reload.LOAD or (
            self.program is not None and callable(getattr(self.provider, "load_program", None))
        )

    def _load_program(self, context: ProviderContext) -> BuiltPlan | None:
        """The plan served from its saved program; ``None`` (the reason kept in
        ``program_error``) when the program cannot be loaded here."""
        assert self.program is not None
        loader = getattr(self.provider, "load_program", None)
        if not callable(loader):
            self.program_error = "its provider cannot load programs"
            return None
        try:
            plan = loader(self.program, read_program_metadata(self.program), context)
        except Exception as exc:
            self.program_error = f"{type(exc).__name__}: {exc}"[:500]
            return None
        if not isinstance(plan, BuiltPlan):
            self.program_error = f"load_program() returned {type(plan).__name__}"
            return None
        return plan


def bring_back(cand: CandidateState, record: CacheRecord | None) -> CandidateState:
    """A fresh, unbuilt candidate for ``cand``'s plan that brings the plan a selection
    chose back: from ``record`` (its program or artifacts, and torch's compile caches,
    where the record's directory may be trusted), else built as a race builds it. The one
    way a winner comes back: on a cache hit, and in the host after an isolated race.
    Prepare it (:func:`dlopt.pipeline.race_stages.prepare_and_race`) to build and check it."""
    fresh = CandidateState(info=cand.info, options=cand.options)
    if record is None:
        return fresh
    fresh.info = attrs.evolve(cand.info, provider=_reloading(record, cand))
    return fresh


def _reloading(record: CacheRecord, cand: CandidateState) -> ReloadingProvider:
    """``cand``'s provider wrapped to bring the record's saved plan back."""
    provider = cand.info.provider
    bundle = record.bundle
    saved = bundle.manifest.get("artifacts", {})
    # Torch's caches and a compiled program are executed when loaded: only from a
    # directory nobody else can write (their hashes were checked when the record was read).
    trusted = private_to_user(record.path)
    compile_cache: Path | None = None
    if (
        Reload.of(provider) is Reload.REBUILD_WITH_COMPILE_CACHE
        and COMPILE_CACHE_ARTIFACT in saved
        and trusted
    ):
        compile_cache = bundle.artifact_path(COMPILE_CACHE_ARTIFACT)
    program = (
        bundle.artifact_path(PROGRAM_ARTIFACT) if PROGRAM_ARTIFACT in saved and trusted else None
    )
    metadata = dict(bundle.report.candidate(cand.name).metadata)
    return ReloadingProvider(
        provider,
        bundle.path / ARTIFACTS_DIR / cand.name,
        metadata,
        compile_cache,
        copy_to_plan_dir=True,
        program=program,
    )
