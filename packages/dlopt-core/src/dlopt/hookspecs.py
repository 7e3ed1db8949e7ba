"""Kept for code that imports ``dlopt.hookspecs``; the hook specifications live in
:mod:`dlopt.plugins.hookspecs`. Plugin authors import ``hookimpl`` from :mod:`dlopt.plugin`."""

from dlopt.plugins.hookspecs import (
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
