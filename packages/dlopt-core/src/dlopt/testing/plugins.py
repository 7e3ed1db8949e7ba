"""Build an in-process plugin module for tests: no distribution, no entry point.

Pass it to ``load_providers(extra_plugins=[(name, module)])`` (or wrap it in a fake
entry point) to exercise the loader exactly as an installed plugin would::

    module = plugin_module("npu", MyNpuProvider(), metrics={"npu_score": NpuScore})
    registry = load_providers(PluginSettings(autoload=False), extra_plugins=[("npu", module)])

:func:`imports_beyond_plugin_api` checks that a plugin's sources import only from
``dlopt.plugin``, the one module a provider author imports from.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping
from pathlib import Path

from dlopt.contract.hooks import hookimpl
from dlopt.contract.provider import PLUGIN_API_VERSION


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


#: A line importing from ``dlopt`` other than ``from dlopt.plugin import ...``.
_DEEP_IMPORT = re.compile(r"^\s*(from dlopt(?!\.plugin import)[. ]|import dlopt\b)", re.MULTILINE)


def imports_beyond_plugin_api(package: types.ModuleType) -> list[str]:
    """The source files of ``package`` (a plugin's top-level package) that import from
    ``dlopt`` anything but ``dlopt.plugin``: ``[]`` for a plugin that keeps to it."""
    root = Path(package.__file__ or "").parent
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if _DEEP_IMPORT.search(path.read_text(encoding="utf-8"))
    )
