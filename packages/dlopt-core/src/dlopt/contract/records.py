"""Plain records about plugins: which loaded, which failed and where.

A leaf module: the loader fills these records and the report schema stores them, and
neither needs the other for it.
"""

from __future__ import annotations

from attrs import frozen


@frozen
class PluginFailure:
    """A plugin that could not be used, and at which stage it failed."""

    plugin: str
    stage: str  # "load" | "api_version" | "register" | "register_metrics"
    error: str
    distribution: str | None = None
    version: str | None = None


@frozen
class PluginRecord:
    """A plugin that loaded and registered, with the plan and metric names it offered."""

    plugin: str
    distribution: str | None
    version: str | None
    api_version: str | None
    providers: tuple[str, ...]
    metrics: tuple[str, ...] = ()
