"""The providers the loaded plugins offer, the plugins themselves and every failure met.

Each hook is called one plugin at a time (:func:`own_caller`), so each keeps its own error
boundary: pluggy matches arguments by name, and one plugin's exception never reaches another.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pluggy
from attrs import define, field

from dlopt.contract.provider import ProviderInfo, ProviderProtocol
from dlopt.contract.records import PluginFailure, PluginRecord
from dlopt.events import Event

log = logging.getLogger(__name__)


@define
class ProviderRegistry:
    """Providers offered by the loaded plugins, plus every failure met on the way."""

    plugin_manager: pluggy.PluginManager
    providers: list[ProviderInfo] = field(factory=list)
    plugins: list[PluginRecord] = field(factory=list)
    failures: list[PluginFailure] = field(factory=list)

    def get(self, name: str) -> ProviderInfo:
        for info in self.providers:
            if info.name == name:
                return info
        known = ", ".join(info.name for info in self.providers) or "none"
        raise KeyError(f"no provider named {name!r}; registered: {known}")

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to every ``dlopt_on_event`` observer; observer errors are logged.

        Each plugin is called through pluggy on its own (argument matching by name, so an
        observer may take fewer arguments than the spec), in its own error boundary.
        """
        manager = self.plugin_manager
        for plugin in plugins_with(manager, "dlopt_on_event"):
            try:
                own_caller(manager, "dlopt_on_event", plugin)(event=event)
            except Exception:
                log.warning("event observer %s failed", manager.get_name(plugin), exc_info=True)


def plugins_with(manager: pluggy.PluginManager, hook_name: str) -> list[object]:
    """The plugins implementing ``hook_name``, in registration order, each once."""
    hook = getattr(manager.hook, hook_name)
    return list(dict.fromkeys(impl.plugin for impl in hook.get_hookimpls()))


def own_caller(manager: pluggy.PluginManager, hook_name: str, plugin: object) -> Any:
    """A pluggy caller of ``hook_name`` that reaches ``plugin`` only (its own boundary)."""
    others = [p for p in manager.get_plugins() if p is not plugin]
    return manager.subset_hook_caller(hook_name, remove_plugins=others)


#: The plugin name of providers handed to the optimizer directly (``providers=``).
EXPLICIT_PLUGIN = "explicit"


def with_explicit(
    providers: Sequence[ProviderInfo], explicit: Sequence[ProviderProtocol]
) -> list[ProviderInfo]:
    """``providers`` with each ``explicit`` provider replacing the one of its name (in its
    place) or, when none has it, added at the end."""
    by_name = {p.name: ProviderInfo(p, plugin=EXPLICIT_PLUGIN) for p in explicit}
    merged = [by_name.pop(info.name, info) for info in providers]
    return [*merged, *by_name.values()]
