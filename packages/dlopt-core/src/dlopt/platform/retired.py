"""Retired public names that still work, with a ``DeprecationWarning`` naming the new one.

A module that renamed a public name keeps the old one reachable through its
``__getattr__`` (Python calls it only for names the module does not define)::

    __getattr__ = retired_names(__name__, {"OldName": "NewName"}, globals())

CHANGELOG.md lists every retired name and the release that removes it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def retired_names(
    module: str, renamed: Mapping[str, str], namespace: Mapping[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering each old name in ``renamed`` with the value of
    its new name in ``namespace``, warning once per use site."""

    def __getattr__(name: str) -> Any:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated: use {module}.{new} (see CHANGELOG.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return namespace[new]

    return __getattr__
