"""JSON in and out through one cattrs converter; strict JSON only.

Reports never contain NaN or Infinity: a number that is not finite becomes ``null``
and the type that holds it carries a reason. ``dumps`` refuses anything else.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, TypeVar

import cattrs
from cattrs.preconf.json import make_converter

from dlopt.precision import Precision

T = TypeVar("T")

converter: cattrs.Converter = make_converter(forbid_extra_keys=False)
converter.register_unstructure_hook(Path, str)
converter.register_structure_hook(Path, lambda value, _: Path(value))
converter.register_unstructure_hook(Precision, lambda p: p.value)
converter.register_structure_hook(Precision, lambda value, _: Precision.parse(value))


def _structure_float(value: Any, _: object) -> float:
    # A float field written from an int (``max_setup_time_s=30``, a call count) is read
    # back as that int, so dumping what was loaded gives the same text (exact round trip).
    return value if type(value) is int else float(value)


converter.register_structure_hook(float, _structure_float)


def finite_or_none(value: float | None) -> float | None:
    """``value`` if it is a finite number, else ``None`` (for strict JSON fields)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def to_jsonable(obj: Any) -> Any:
    """Unstructure an attrs value into plain JSON types."""
    return converter.unstructure(obj)


def from_jsonable(data: Any, cls: type[T]) -> T:
    """Structure plain JSON data into ``cls``."""
    return converter.structure(data, cls)


def dumps(obj: Any, *, indent: int | None = 2) -> str:
    """Strict JSON text for an attrs value (raises ValueError on NaN/Infinity)."""
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False, sort_keys=False)


def parse_strict_json(text: str) -> Any:
    """``json.loads`` that refuses NaN and Infinity (Python's parser accepts them)."""

    def reject_constant(name: str) -> Any:
        raise ValueError(f"not strict JSON: found {name}")

    return json.loads(text, parse_constant=reject_constant)


def loads(text: str, cls: type[T]) -> T:
    """Parse strict JSON text (NaN/Infinity rejected) into ``cls``."""
    return from_jsonable(parse_strict_json(text), cls)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) so readers see the old file or the whole new one, never a part.

    Temp file in the same directory, fsync, rename, fsync the directory; the file gets the
    user's umask permissions. See :func:`dlopt.fileio.atomic_write_bytes`.
    """
    from dlopt.fileio import atomic_write_bytes

    return atomic_write_bytes(path, text.encode("utf-8"))
