"""pluggy hook specifications of the ``dlopt`` project.

Hooks only ever gain keyword arguments; none is renamed or removed (the pytest rule), so
plugins written for an older core keep working.

A plugin module looks like this::

    from dlopt import hookimpl

    DLOPT_PLUGIN_API_VERSION = "1.0"

    @hookimpl
    def dlopt_register_providers(register):
        register(MyNpuProvider())
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from dlopt.events import Event
    from dlopt.providers.contract import ExecutionProvider

PROJECT_NAME = "dlopt"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def dlopt_register_providers(register: Callable[[ExecutionProvider], None]) -> None:
    """Offer providers: call ``register(provider)`` once per plan variant.

    ``register`` may grow keyword arguments in later API minors; call it positionally.
    """


@hookspec
def dlopt_on_event(event: Event) -> None:
    """Observe progress: candidate built, rejected, round finished, decision made.

    Observers must be quick and must not raise; an exception is logged and ignored.
    """
