"""How a saved plan is served again: load its artifact, rebuild it, or rebuild it with
torch's compile caches restored (:class:`dlopt.plugins.contract.Comeback`).

:class:`ComebackProvider` wraps the plan's installed provider so that the pipeline's
prepare stage (probe, build timed, first calls, validation) brings a saved plan back
exactly as it builds a new one: its ``build`` loads, or rebuilds, as the provider
declares.

Torch's compile caches (``torch.compiler.save_cache_artifacts``) are torch's own
serialized format, which torch unpickles when it loads them. dlopt hands them to torch
only after their SHA-256 matches the manifest, and only from a directory that nobody but
this user can write (:func:`private_to_user`): the same trust torch gives its own cache
directory. Anything else is rebuilt from scratch (compiled again).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import attrs

from dlopt.errors import ProviderBuildError
from dlopt.plugins.contract import BuiltPlan, Comeback, ProviderContext

#: The artifact name (in a record's bundle) of torch's serialized compile caches.
COMPILE_CACHE_ARTIFACT = "torch_compile_cache"
COMPILE_CACHE_FILE = "torch_compile_cache.bin"


def save_compile_cache(directory: Path) -> Path | None:
    """Write every compile cache artifact torch made in this process to ``directory``;
    ``None`` when torch has none (nothing was compiled) or cannot save them."""
    import torch

    try:
        saved = torch.compiler.save_cache_artifacts()
    except Exception:  # an older torch, or an artifact torch cannot serialize
        return None
    if not saved or not saved[0]:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / COMPILE_CACHE_FILE
    path.write_bytes(saved[0])
    return path


def restore_compile_cache(path: Path) -> bool:
    """Hand torch its compile caches saved at ``path`` (already hash-checked); whether
    torch took them."""
    import torch

    try:
        return torch.compiler.load_cache_artifacts(path.read_bytes()) is not None
    except Exception:
        return False


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
class ComebackProvider:
    """A saved plan's provider, whose ``build`` brings the saved plan back.

    ``plan_dir``: the plan's saved files (``artifacts/<plan>`` of a bundle). ``metadata``:
    the plan's recorded metadata (what ``load`` reads). ``compile_cache``: torch's saved
    compile caches, when the plan is rebuilt with them and they may be trusted.
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

    @property
    def name(self) -> str:
        return str(self.provider.name)

    @property
    def comes_back(self) -> Comeback:
        return Comeback.of(self.provider)

    def __getattr__(self, name: str) -> Any:
        # role, precision, options_type, install_hint...: the provider's own.
        if name.startswith("__") or name == "provider":
            raise AttributeError(name)
        return getattr(self.provider, name)

    def probe(self, context: ProviderContext) -> Any:
        return self.provider.probe(context)

    def build(self, model: Any, context: ProviderContext) -> BuiltPlan:
        kind = self.comes_back
        if kind is Comeback.LOAD:
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
            raise ProviderBuildError(
                f"plan {self.name!r} comes back by rebuilding it from the model ({kind.value}); "
                "pass the model: load_bundle(path, model=model)"
            )
        if kind is Comeback.REBUILD_WITH_COMPILE_CACHE and self.compile_cache is not None:
            self.compile_cache_restored = restore_compile_cache(self.compile_cache)
        plan = self.provider.build(model, context)
        if isinstance(plan, BuiltPlan) and kind is Comeback.REBUILD_WITH_COMPILE_CACHE:
            plan.metadata = {**plan.metadata, "compile_cache_restored": self.compile_cache_restored}
        return plan
