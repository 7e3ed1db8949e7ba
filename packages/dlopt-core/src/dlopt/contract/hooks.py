"""pluggy hook specifications of the ``dlopt`` project.

Hooks only ever gain keyword arguments; none is renamed or removed (the pytest rule), so
plugins written for an older core keep working.

A plugin module looks like this::

    from dlopt.plugin import hookimpl

    DLOPT_PLUGIN_API_VERSION = "2.1"  # the literal plugin API version it was written for

    @hookimpl
    def dlopt_register_providers(register):
        register(MyNpuProvider())

    @hookimpl
    def dlopt_register_metrics(register):  # optional: metrics a policy file can name
        register("npu_score", NpuScore)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from dlopt.contract.provider import ProviderProtocol
    from dlopt.events import Event

PROJECT_NAME = "dlopt"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def dlopt_register_providers(register: Callable[[ProviderProtocol], None]) -> None:
    """Offer providers: call ``register(provider)`` once per plan variant.

    ``register`` may grow keyword arguments in later API minors; call it positionally.
    """


@hookspec
def dlopt_register_metrics(register: Callable[[str, type], None]) -> None:
    """Offer user metrics by name: call ``register(name, metric_class)`` once per metric.

    ``metric_class`` is an attrs class whose fields are the metric's parameters (plain
    JSON values) and whose instances are called as ``fn(candidate, reference) -> float``.
    A policy file then refers to the metric by ``name`` with its parameters; nothing a
    file names is ever imported. Names are plain names and must not be taken already
    (dlopt ships ``top1_agreement`` and ``psnr``).
    """


@hookspec
def dlopt_on_event(event: Event) -> None:
    """Observe progress: candidate built, rejected, round finished, decision made.

    Observers must be quick and must not raise; an exception is logged and ignored.
    """
