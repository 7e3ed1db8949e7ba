"""User metrics by name: the registry that JSON files refer to (torch-free leaf).

dlopt's own metrics (``dlopt.validation.user_metrics``) and the ones plugins register
through the ``dlopt_register_metrics`` hook land here. Plugins' metrics are added by the
plugin loader while it loads them (:func:`add_plugin_metrics`, called from
``dlopt.load_providers``), never as a side effect of importing a module: code that reads
a policy naming a plugin's metric loads the plugins first. This module (and the
validation that uses it) never imports the loader: the dependency points one way.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from dlopt.errors import ConfigurationError
from dlopt.platform.names import is_plain_name

_builtin: dict[str, type] = {}
_plugin: dict[str, tuple[type, str]] = {}  # name -> (class, plugin)


def register_builtin(name: str, metric_class: type) -> None:
    """dlopt's own metric ``name`` (called by ``dlopt.validation.user_metrics``)."""
    _builtin[name] = metric_class


def known_metrics() -> dict[str, type]:
    """Every registered metric, by name: dlopt's own, then those plugins registered."""
    return {**_builtin, **{name: cls for name, (cls, _) in _plugin.items()}}


def check_metric_registration(
    name: object, metric_class: object, taken: Mapping[str, type] | None = None
) -> None:
    """Refuse a metric registration that cannot work, with a message for the plugin author.

    ``name`` must be a plain name not registered already to another class (``taken``
    defaults to :func:`known_metrics`); ``metric_class`` must be an attrs class whose
    instances are callable (``fn(candidate, reference) -> float``).
    """
    if not is_plain_name(name):
        raise ConfigurationError(
            f"metric name {name!r} is not a plain name: use letters, digits, '_', '.' and "
            "'-', e.g. 'npu_score'"
        )
    if not (isinstance(metric_class, type) and attrs.has(metric_class)):
        raise ConfigurationError(
            f"metric {name!r}: register an attrs class whose fields are its parameters "
            f"(plain JSON values) and whose instances are called as fn(candidate, reference), "
            f"got {metric_class!r}"
        )
    if not any("__call__" in vars(k) for k in metric_class.__mro__ if k is not object):
        raise ConfigurationError(
            f"metric {name!r}: {metric_class.__qualname__} instances are not callable; "
            "define __call__(self, candidate, reference) -> float"
        )
    assert isinstance(name, str)  # is_plain_name checked it
    existing = (known_metrics() if taken is None else taken).get(name)
    if existing is not None and existing is not metric_class:
        if name in _builtin:
            owner = "dlopt"
        elif name in _plugin:
            owner = f"plugin {_plugin[name][1]!r}"
        else:
            owner = "this plugin, with another class"
        raise ConfigurationError(
            f"metric name {name!r} is already registered (by {owner}); choose another name"
        )


def add_plugin_metrics(metrics: Mapping[str, type], plugin: str) -> None:
    """Make metrics a plugin registered known by name (after its registration succeeded)."""
    for name, metric_class in metrics.items():
        check_metric_registration(name, metric_class)
    for name, metric_class in metrics.items():
        _plugin[name] = (metric_class, plugin)
