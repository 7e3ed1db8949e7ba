"""Deprecated: the hook specifications live in :mod:`dlopt.contract.hooks`, and plugin
authors import ``hookimpl`` from :mod:`dlopt.plugin`. Importing this module still works,
with a ``DeprecationWarning`` (CHANGELOG.md says when it goes)."""

import warnings

from dlopt.contract.hooks import (
    PROJECT_NAME,
    dlopt_on_event,
    dlopt_register_metrics,
    dlopt_register_providers,
    hookimpl,
    hookspec,
)

__all__ = [
    "PROJECT_NAME",
    "dlopt_on_event",
    "dlopt_register_metrics",
    "dlopt_register_providers",
    "hookimpl",
    "hookspec",
]

warnings.warn(
    "dlopt.hookspecs is deprecated: import hookimpl from dlopt.plugin (the specifications "
    "are in dlopt.contract.hooks)",
    DeprecationWarning,
    stacklevel=2,
)
