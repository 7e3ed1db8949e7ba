"""Discover plugins through the ``dlopt.providers`` entry points, each in its own error boundary.

We walk the entry points ourselves (instead of pluggy's ``load_setuptools_entrypoints``) so
that a plugin that fails to import, raises while registering, or targets another plugin
API version is reported with its name, distribution and version, and the rest keep working.

Environment switches (read by :meth:`PluginSettings.from_env`):

``DLOPT_DISABLE_PLUGIN_AUTOLOAD=1``  load no entry points (built-ins only)
``DLOPT_PLUGINS=a,b``                load only these entry-point names
``DLOPT_DISABLE_PLUGINS=a,b``        never load these
``DLOPT_STRICT_PLUGINS=1``           re-raise the first plugin failure (for plugin authors, CI)
``DLOPT_PROBE_TIMEOUT_S=20``         how long one probe may take (see :func:`dlopt.pipeline.probe.probe_provider`)

A plugin that raises ``SystemExit`` (``sys.exit`` at import, in a hook or a probe) is
reported like any other failure; ``KeyboardInterrupt`` still stops the host.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pluggy
from attrs import frozen

from dlopt.contract import hooks
from dlopt.contract.provider import (
    PLUGIN_API_VERSION,
    ProviderInfo,
    ProviderProtocol,
    Role,
    api_version_problem,
)
from dlopt.contract.records import PluginFailure, PluginRecord
from dlopt.errors import PluginLoadError
from dlopt.platform.probing import capture_output, importlib_metadata
from dlopt.plugins.boundary import (
    PLUGIN_ERRORS,
    check_plan_name,
    describe_error,
)
from dlopt.plugins.registry import ProviderRegistry, own_caller, plugins_with
from dlopt.validation.metric_registry import (
    add_plugin_metrics,
    check_metric_registration,
    known_metrics,
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


def new_plugin_manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(hooks.PROJECT_NAME)
    manager.add_hookspecs(hooks)
    return manager


def _dist_of(entry_point: Any) -> tuple[str | None, str | None]:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


def _short_error(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    location = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
    return f"{describe_error(exc)}{location}"


def load_providers(
    settings: PluginSettings | None = None,
    *,
    entry_points: Iterable[Any] | None = None,
    extra_plugins: Sequence[tuple[str, object]] = (),
    on_plugin: Callable[[str | None], None] | None = None,
) -> ProviderRegistry:
    """Load core's built-ins and every wanted ``dlopt.providers`` plugin.

    Each plugin registers its providers (into the returned registry) and its user metrics
    (known by name from then on, ``dlopt.validation.metric_registry``); this call is the
    only thing that registers them.

    ``entry_points`` replaces discovery (tests); ``extra_plugins`` adds in-process
    ``(name, plugin_object)`` pairs (e.g. a provider module under development).
    ``on_plugin`` is told the name of each plugin before its import and its register
    hook run, and ``None`` once no plugin code runs (an isolated worker journals it, so a
    native crash there is that plugin's).
    """
    say = on_plugin if on_plugin is not None else (lambda _name: None)
    from dlopt.plugins import builtin

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
        eps = list(eps)
        claims = _claims_by_name(eps)
        seen: set[str] = set()
        for ep in eps:
            if ep.name in seen or not settings.wants(ep.name):
                continue
            seen.add(ep.name)
            distribution, version = _dist_of(ep)
            if len(claims[ep.name]) > 1:
                # Which one would load depends on install order: refuse to guess.
                fail(
                    PluginFailure(
                        ep.name,
                        "load",
                        f"the entry point name {ep.name!r} in group {ENTRY_POINT_GROUP!r} is "
                        f"claimed by {' and '.join(claims[ep.name])}; uninstall all but one",
                        distribution,
                        version,
                    )
                )
                continue
            # A plugin's import may print (it should not import its SDK, but may).
            say(ep.name)
            with capture_output(f"load plugin {ep.name}"):
                try:
                    plugin = ep.load()
                except PLUGIN_ERRORS as exc:
                    error: BaseException | None = exc
                else:
                    error = None
            if error is not None:
                fail(
                    PluginFailure(ep.name, "load", _short_error(error), distribution, version),
                    error,
                )
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
            _check_hooks(manager, plugin)
        except PLUGIN_ERRORS as exc:
            if manager.is_registered(plugin):
                manager.unregister(plugin)
            fail(PluginFailure(name, "load", _short_error(exc), distribution, version), exc)
            continue
        say(name)
        offered = _call_register_hook(registry, manager, name, plugin, distribution, version, fail)
        if offered is not None:
            metrics = _call_metrics_hook(
                manager, name, plugin, functools.partial(_failed, fail, name, distribution, version)
            )
            registry.plugins.append(
                PluginRecord(
                    name, distribution, version, str(declared), tuple(offered), tuple(metrics)
                )
            )
    say(None)
    return registry


def _failed(
    fail: Callable[[PluginFailure, BaseException], None],
    plugin: str,
    distribution: str | None,
    version: str | None,
    stage: str,
    exc: BaseException,
) -> None:
    fail(PluginFailure(plugin, stage, _short_error(exc), distribution, version), exc)


def _check_hooks(manager: pluggy.PluginManager, plugin: object) -> None:
    """Refuse hook implementations that match no dlopt hook (a misspelled name would
    otherwise load silently and do nothing), and hook-named functions without
    ``@hookimpl`` (pluggy ignores them)."""
    known = {n for n in dir(hooks) if n.startswith(f"{hooks.PROJECT_NAME}_")}
    for attr in dir(plugin):
        if not attr.startswith(f"{hooks.PROJECT_NAME}_") or not callable(
            getattr(plugin, attr, None)
        ):
            continue
        if attr not in known:
            close = difflib.get_close_matches(attr, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"{attr!r} is not a dlopt hook{hint} (hooks: {', '.join(sorted(known))})"
            )
        if manager.parse_hookimpl_opts(plugin, attr) is None:
            raise TypeError(
                f"{attr!r} is not marked as a hook implementation: decorate it with "
                "@hookimpl (from dlopt.plugin import hookimpl)"
            )
    manager.check_pending()


def _claims_by_name(eps: Sequence[Any]) -> dict[str, list[str]]:
    """Entry-point name -> the distinct distributions (``name version``) that claim it."""
    claims: dict[str, list[str]] = {}
    for ep in eps:
        distribution, version = _dist_of(ep)
        origin = distribution or getattr(ep, "value", None) or "an unknown distribution"
        who = f"{origin} {version or ''}".strip()
        if who not in claims.setdefault(ep.name, []):
            claims[ep.name].append(who)
    return claims


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

    def register(provider: ProviderProtocol, /, **keywords: Any) -> None:
        if keywords:
            raise TypeError(
                f"register() got unknown keyword(s) {', '.join(map(repr, keywords))}; plugin "
                f"API {PLUGIN_API_VERSION} takes only the provider: register(provider)"
            )
        problems = [attr for attr in ("name", "probe", "build") if not hasattr(provider, attr)]
        if problems:
            raise TypeError(
                f"register() got {type(provider).__name__}, which lacks {', '.join(problems)}; "
                "providers implement dlopt.ProviderProtocol"
            )
        check_plan_name(provider.name, plugin=name)
        Role.of(provider)  # a role that is not one of the three is refused here
        taken = {info.name for info in registry.providers} | {info.name for info in offered}
        if provider.name in taken:
            raise ValueError(f"a provider named {provider.name!r} is already registered")
        offered.append(ProviderInfo(provider, name, distribution, version))

    try:
        if plugin in plugins_with(manager, "dlopt_register_providers"):
            own_caller(manager, "dlopt_register_providers", plugin)(register=register)
    except PLUGIN_ERRORS as exc:
        manager.unregister(plugin)
        fail(PluginFailure(name, "register", _short_error(exc), distribution, version), exc)
        return None
    registry.providers.extend(offered)
    return [info.name for info in offered]


def _call_metrics_hook(
    manager: pluggy.PluginManager,
    name: str,
    plugin: object,
    failed: Callable[[str, BaseException], None],
) -> list[str]:
    """Call one plugin's ``dlopt_register_metrics``; its metrics become known only on success.

    A failure here is reported at stage ``register_metrics``; the plugin's providers stay.
    """
    if plugin not in plugins_with(manager, "dlopt_register_metrics"):
        return []
    offered: dict[str, type] = {}

    def register(metric_name: str, metric_class: type, /, **keywords: Any) -> None:
        if keywords:
            raise TypeError(
                f"register() got unknown keyword(s) {', '.join(map(repr, keywords))}; "
                "register metrics as register(name, metric_class)"
            )
        check_metric_registration(metric_name, metric_class, {**known_metrics(), **offered})
        offered[metric_name] = metric_class

    try:
        own_caller(manager, "dlopt_register_metrics", plugin)(register=register)
        add_plugin_metrics(offered, name)
    except PLUGIN_ERRORS as exc:
        failed("register_metrics", exc)
        return []
    return list(offered)


def _core_version() -> str | None:
    from dlopt.platform.probing import distribution_version

    return distribution_version("dlopt-core")
