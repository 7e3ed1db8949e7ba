"""Plain names: the names (plans, artifacts, metrics) that may become file names.

A leaf module: the provider contract, the plugin boundary and the metric registry all
check names here without importing each other.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dlopt.errors import ConfigurationError

#: A plain name: starts with a letter, digit or underscore, then letters, digits, ``_``,
#: ``.`` and ``-``; at most 100 characters; no ``..``. It can never be a path.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")

#: How to write a plain name, for error messages.
NAME_RULE = (
    "use letters, digits, '_', '.' and '-' only (starting with a letter, digit or '_', "
    "no '..', at most 100 characters), e.g. 'npu_int8'"
)


def is_plain_name(name: object) -> bool:
    """Whether ``name`` is a plain name (see :data:`PLAIN_NAME`), safe as a file name."""
    return isinstance(name, str) and PLAIN_NAME.fullmatch(name) is not None and ".." not in name


def check_plan_name(name: object, *, plugin: str | None = None) -> str:
    """Return ``name`` if it is a plain name, else raise ConfigurationError naming the plugin.

    Called by ``register()`` for every plugin's providers; call it for providers passed
    in code too (``InferenceOptimizer(providers=[...])``).
    """
    if is_plain_name(name):
        return name  # type: ignore[return-value]
    source = f"plugin {plugin!r} offers" if plugin else "got"
    raise ConfigurationError(
        f"{source} a plan named {name!r}, which is not a plain name: plan names become "
        f"directory names, so {NAME_RULE}"
    )


def is_inside(path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> bool:
    """Whether ``path`` resolves (links followed) strictly inside ``directory``."""
    resolved = Path(path).resolve()
    root = Path(directory).resolve()
    return resolved != root and resolved.is_relative_to(root)
