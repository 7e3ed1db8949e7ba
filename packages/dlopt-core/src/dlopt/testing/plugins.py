"""Build an in-process plugin module for tests: no distribution, no entry point.

Pass it to ``load_providers(extra_plugins=[(name, module)])`` (or wrap it in a fake
entry point) to exercise the loader exactly as an installed plugin would::

    module = plugin_module("npu", MyNpuProvider(), metrics={"npu_score": NpuScore})
    registry = load_providers(PluginSettings(autoload=False), extra_plugins=[("npu", module)])
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping

from dlopt.plugins.contract import PLUGIN_API_VERSION
from dlopt.plugins.hookspecs import hookimpl


def plugin_module(
    name: str,
    *providers: object,
    metrics: Mapping[str, type] | None = None,
    raises: BaseException | None = None,
    api: str | None = PLUGIN_API_VERSION,
) -> types.ModuleType:
    """A plugin module that registers ``providers`` (and ``metrics`` by name, if given).

    ``raises`` is raised by the provider hook after registering (a plugin that breaks
    half-way); ``api=None`` leaves ``DLOPT_PLUGIN_API_VERSION`` undeclared.
    """
    module = types.ModuleType(name)
    if api is not None:
        module.DLOPT_PLUGIN_API_VERSION = api  # type: ignore[attr-defined]

    @hookimpl
    def dlopt_register_providers(register: Callable[..., None]) -> None:
        for provider in providers:
            register(provider)
        if raises is not None:
            raise raises

    module.dlopt_register_providers = dlopt_register_providers  # type: ignore[attr-defined]
    if metrics is not None:

        @hookimpl
        def dlopt_register_metrics(register: Callable[..., None]) -> None:
            for metric_name, metric_class in metrics.items():
                register(metric_name, metric_class)

        module.dlopt_register_metrics = dlopt_register_metrics  # type: ignore[attr-defined]
    return module
