"""Discover plugins through the ``dlopt.providers`` entry points, each in its own error boundary.

We walk the entry points ourselves (instead of pluggy's ``load_setuptools_entrypoints``) so
that a plugin that fails to import, raises while registering, or targets another plugin
API version is reported with its name, distribution and version, and the rest keep working.

Environment switches (read by :meth:`PluginSettings.from_env`):

``DLOPT_DISABLE_PLUGIN_AUTOLOAD=1``  load no entry points (built-ins only)
``DLOPT_PLUGINS=a,b``                load only these entry-point names
``DLOPT_DISABLE_PLUGINS=a,b``        never load these
``DLOPT_STRICT_PLUGINS=1``           re-raise the first plugin failure (for plugin authors, CI)
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pluggy
from attrs import define, field, frozen

from dlopt import hookspecs
from dlopt.errors import PluginLoadError
from dlopt.events import Event
from dlopt.probing import importlib_metadata
from dlopt.providers.contract import (
    ExecutionProvider,
    ProviderAvailability,
    ProviderContext,
    ProviderInfo,
    api_version_problem,
)

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "dlopt.providers"
BUILTIN_PLUGIN = "dlopt.builtin"
_TRUTHY = {"1", "true", "yes", "on"}


def _name_list(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@frozen
class PluginSettings:
    """Which entry points to load and how to treat failures."""

    autoload: bool = True
    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()
    strict: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        env = os.environ if environ is None else environ
        return cls(
            autoload=env.get("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "").lower() not in _TRUTHY,
            allow=_name_list(env.get("DLOPT_PLUGINS")),
            deny=_name_list(env.get("DLOPT_DISABLE_PLUGINS")) or frozenset(),
            strict=env.get("DLOPT_STRICT_PLUGINS", "").lower() in _TRUTHY,
        )

    def wants(self, name: str) -> bool:
        if name in self.deny:
            return False
        return self.allow is None or name in self.allow


@frozen
class PluginFailure:
    """A plugin that could not be used, and at which stage it failed."""

    plugin: str
    stage: str  # "load" | "api_version" | "register"
    error: str
    distribution: str | None = None
    version: str | None = None


@frozen
class PluginRecord:
    """A plugin that loaded and registered, with the plan names it offered."""

    plugin: str
    distribution: str | None
    version: str | None
    api_version: str | None
    providers: tuple[str, ...]


@frozen
class ProviderStatus:
    """One provider's probe result, ready for a table or a report."""

    name: str
    plugin: str
    distribution: str | None
    version: str | None
    precision: str
    availability: ProviderAvailability
    probe_time_s: float


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
        """Deliver ``event`` to every ``dlopt_on_event`` observer; observer errors are logged."""
        for impl in self.plugin_manager.hook.dlopt_on_event.get_hookimpls():
            try:
                impl.function(event=event)
            except Exception:
                log.warning("event observer %s failed", impl.plugin_name, exc_info=True)

    def probe_all(self, context: ProviderContext) -> list[ProviderStatus]:
        """Probe every provider on ``context.target``; a probe that raises is 'unavailable'."""
        return [probe_provider(info, context) for info in self.providers]


def probe_provider(info: ProviderInfo, context: ProviderContext) -> ProviderStatus:
    """Run one provider's probe inside an error boundary, timing it."""
    start = time.perf_counter()
    try:
        availability = info.provider.probe(context)
        if not isinstance(availability, ProviderAvailability):
            raise TypeError(
                f"probe() returned {type(availability).__name__}, expected ProviderAvailability"
            )
    except Exception as exc:
        availability = ProviderAvailability.unavailable(
            f"probe raised {type(exc).__name__}: {exc}",
            install_hint=f"report this to the maintainers of {info.distribution or info.plugin}",
        )
    precision = getattr(info.provider, "precision", None)
    return ProviderStatus(
        name=info.name,
        plugin=info.plugin,
        distribution=info.distribution,
        version=info.version,
        precision=getattr(precision, "value", str(precision)),
        availability=availability,
        probe_time_s=time.perf_counter() - start,
    )


def new_plugin_manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    return manager


def _dist_of(entry_point: Any) -> tuple[str | None, str | None]:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


def _short_error(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    location = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}{location}"


def load_providers(
    settings: PluginSettings | None = None,
    *,
    entry_points: Iterable[Any] | None = None,
    extra_plugins: Sequence[tuple[str, object]] = (),
) -> ProviderRegistry:
    """Load core's built-ins and every wanted ``dlopt.providers`` plugin.

    ``entry_points`` replaces discovery (tests); ``extra_plugins`` adds in-process
    ``(name, plugin_object)`` pairs (e.g. a provider module under development).
    """
    from dlopt.providers import builtin

    settings = settings or PluginSettings.from_env()
    manager = new_plugin_manager()
    registry = ProviderRegistry(manager)
    # (name, plugin object, distribution, version, declared API version)
    loaded: list[tuple[str, object, str | None, str | None]] = [
        (BUILTIN_PLUGIN, builtin, "dlopt-core", _core_version())
    ]

    def fail(failure: PluginFailure, exc: BaseException | None = None) -> None:
        registry.failures.append(failure)
        log.warning(
            "dlopt plugin %s failed at %s: %s", failure.plugin, failure.stage, failure.error
        )
        if settings.strict:
            raise PluginLoadError(
                f"plugin {failure.plugin!r} ({failure.distribution or 'unknown distribution'} "
                f"{failure.version or ''}) failed at {failure.stage}: {failure.error}"
            ) from exc

    if settings.autoload:
        eps = (
            entry_points
            if entry_points is not None
            else importlib_metadata.entry_points(group=ENTRY_POINT_GROUP)
        )
        seen: set[str] = set()
        for ep in eps:
            if ep.name in seen or not settings.wants(ep.name):
                continue
            seen.add(ep.name)
            distribution, version = _dist_of(ep)
            try:
                plugin = ep.load()
            except Exception as exc:
                fail(PluginFailure(ep.name, "load", _short_error(exc), distribution, version), exc)
                continue
            loaded.append((ep.name, plugin, distribution, version))
    loaded.extend((name, plugin, None, None) for name, plugin in extra_plugins)

    for name, plugin, distribution, version in loaded:
        declared = getattr(plugin, "DLOPT_PLUGIN_API_VERSION", None)
        problem = api_version_problem(declared)
        if problem:
            fail(
                PluginFailure(
                    name, "api_version", f"incompatible: {problem}", distribution, version
                )
            )
            continue
        try:
            manager.register(plugin, name=name)
        except Exception as exc:
            fail(PluginFailure(name, "load", _short_error(exc), distribution, version), exc)
            continue
        offered = _call_register_hook(registry, manager, name, plugin, distribution, version, fail)
        if offered is not None:
            registry.plugins.append(
                PluginRecord(name, distribution, version, str(declared), tuple(offered))
            )
    return registry


def _call_register_hook(
    registry: ProviderRegistry,
    manager: pluggy.PluginManager,
    name: str,
    plugin: object,
    distribution: str | None,
    version: str | None,
    fail: Any,
) -> list[str] | None:
    """Call one plugin's ``dlopt_register_providers``; keep what it registered only on success."""
    offered: list[ProviderInfo] = []

    def register(provider: ExecutionProvider, **_future_options: Any) -> None:
        problems = [attr for attr in ("name", "probe", "build") if not hasattr(provider, attr)]
        if problems:
            raise TypeError(
                f"register() got {type(provider).__name__}, which lacks {', '.join(problems)}; "
                "providers implement dlopt.ExecutionProvider"
            )
        taken = {info.name for info in registry.providers} | {info.name for info in offered}
        if provider.name in taken:
            raise ValueError(f"a provider named {provider.name!r} is already registered")
        offered.append(ProviderInfo(provider, name, distribution, version))

    impls = [
        impl
        for impl in manager.hook.dlopt_register_providers.get_hookimpls()
        if impl.plugin is plugin
    ]
    try:
        for impl in impls:
            impl.function(register=register)
    except Exception as exc:
        manager.unregister(plugin)
        fail(PluginFailure(name, "register", _short_error(exc), distribution, version), exc)
        return None
    registry.providers.extend(offered)
    return [info.name for info in offered]


def _core_version() -> str | None:
    from dlopt.probing import distribution_version

    return distribution_version("dlopt-core")
