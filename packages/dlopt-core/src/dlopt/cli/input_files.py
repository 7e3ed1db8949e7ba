"""``dlopt select --inputs FILE``: representative inputs from a ``.npz`` or safetensors file.

Each entry of the file is one workload case (named by its key, equal weights) whose one
positional argument is the entry's tensor. Nothing in the file is ever executed: ``.npz``
is read with ``allow_pickle=False`` (an object array is refused), safetensors holds raw
tensors only. A model that takes several arguments gets its cases from its factory
(``MODULE:FACTORY`` returning ``(model, WorkloadProfile)``).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from dlopt.errors import ConfigurationError

#: File suffixes read, and what reads them.
SUFFIXES = {".npz": "npz", ".safetensors": "safetensors"}


def load_inputs(path_text: str) -> list[tuple[str, Any]]:
    """``[(case name, tensor), ...]`` in the file's order, or a :class:`ConfigurationError`
    that says what is wrong with the file and what to do."""
    path = Path(path_text)
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ConfigurationError(
            f"--inputs {path}: use a .npz file (numpy.savez) or a .safetensors file, one "
            "workload case per entry"
        )
    if not path.is_file():
        raise ConfigurationError(f"--inputs {path}: no such file")
    entries = _read_npz(path) if kind == "npz" else _read_safetensors(path)
    if not entries:
        raise ConfigurationError(f"--inputs {path} holds no tensors: save one entry per case")
    return entries


def _read_npz(path: Path) -> list[tuple[str, Any]]:
    import numpy as np
    import torch

    try:
        with np.load(path, allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ConfigurationError(
                    f"--inputs {path} is a single .npy array, not an .npz archive: save it "
                    "with numpy.savez(path, case_name=array)"
                )
            entries = []
            for key in archive.files:
                try:
                    array = archive[key]
                except ValueError as exc:  # an object array needs pickle: refused
                    raise ConfigurationError(
                        f"--inputs {path}: entry {key!r} cannot be read without pickle "
                        f"({exc}); save numeric arrays only"
                    ) from None
                if array.dtype.kind not in "biufc":
                    raise ConfigurationError(
                        f"--inputs {path}: entry {key!r} has dtype {array.dtype}, not a "
                        "number type a model takes"
                    )
                entries.append((key, torch.from_numpy(np.array(array, copy=True))))
            return entries
    except ConfigurationError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ConfigurationError(f"--inputs {path} is not a readable .npz file: {exc}") from None


def _read_safetensors(path: Path) -> list[tuple[str, Any]]:
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise ConfigurationError(
            f"--inputs {path}: reading safetensors needs the safetensors package: "
            'pip install "dlopt-core[inputs]" (or save the inputs with numpy.savez as .npz)'
        ) from None
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ConfigurationError(
            f"--inputs {path} is not a readable safetensors file: {exc}"
        ) from None
    return list(tensors.items())


def describe_inputs_file(path_text: str, count: int) -> str:
    """How the report names these inputs: ``"npz file inputs.npz (3 cases)"``."""
    path = Path(path_text)
    kind = SUFFIXES.get(path.suffix.lower(), "file")
    return f"{kind} file {path.name} ({count} case{'s' if count != 1 else ''})"
