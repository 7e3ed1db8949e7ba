"""``dlopt select --inputs FILE``: representative inputs from a ``.npz`` or safetensors file.

Each entry of the file is one workload case (named by its key, equal weights) whose one
positional argument is the entry's tensor. Nothing in the file is ever executed: ``.npz``
is read with ``allow_pickle=False`` (an object array is refused), safetensors holds raw
tensors only. A model that takes several arguments gets its cases from its factory
(``MODULE:FACTORY`` returning ``(model, WorkloadProfile)``).
"""

from __future__ import annotations

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
    check_input_file(path)
    entries = _read_npz(path) if kind == "npz" else _read_safetensors(path)
    if not entries:
        raise ConfigurationError(f"--inputs {path} holds no tensors: save one entry per case")
    return entries


def check_input_file(path: Path) -> None:
    """Refuse a missing path, a directory, a FIFO, a device or a socket as ``--inputs``."""
    from dlopt.platform.fileio import check_regular_file

    try:
        check_regular_file(path)
    except FileNotFoundError:
        raise ConfigurationError(f"--inputs {path}: no such file") from None
    except OSError as exc:
        raise ConfigurationError(
            f"--inputs {path}: {exc.strerror or exc}; give a .npz or .safetensors file"
        ) from None


def _read_npz(path: Path) -> list[tuple[str, Any]]:
    import torch

    from dlopt.platform.npz import read_npz

    arrays = read_npz(
        path,
        where=f"--inputs {path}",
        error=ConfigurationError,
        check_sizes=lambda sizes: _check_fits_in_memory(path, sizes),
    )
    return [(key, torch.from_numpy(array)) for key, array in arrays]


def _check_fits_in_memory(path: Path, sizes: list[tuple[str, int]]) -> None:
    from dlopt.platform.sizes import available_memory_bytes, size_text

    available = available_memory_bytes()
    total = sum(size for _, size in sizes)
    if available is not None and total > available:
        key, size = max(sizes, key=lambda item: item[1])
        raise ConfigurationError(
            f"--inputs {path}: its arrays need {size_text(total)} but this machine has "
            f"{size_text(available)} available (entry {key!r} alone needs {size_text(size)}); "
            "save smaller inputs"
        )


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
