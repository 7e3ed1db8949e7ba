"""The plugin boundary: every name and value a plugin hands in is checked here.

Plan names and artifact names become directory and file names, so they must be plain
names (never paths); availability, metadata and artifacts end up in strict-JSON
reports, so they are normalised (non-finite numbers -> ``null``, other non-JSON values
-> their string form). A plugin whose values cannot be used is reported, never fatal:
the loader turns a bad probe answer into "unavailable", and the optimizer turns a
:class:`~dlopt.errors.ProviderBuildError` from :func:`check_built_plan` into a rejection
at the build stage.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dlopt.contract.provider import BuiltPlan, ProviderAvailability, ServingTraits
from dlopt.errors import ProviderBuildError
from dlopt.platform.names import NAME_RULE, PLAIN_NAME, check_plan_name, is_inside, is_plain_name
from dlopt.platform.serialization import NotJsonableError, strict_jsonable
from dlopt.vocabulary import Concurrency

__all__ = [
    "PLAIN_NAME",
    "check_built_plan",
    "check_plan_name",
    "is_inside",
    "is_plain_name",
    "normalize_availability",
]

# ---------------------------------------------------------------------------- availability


def _text(value: object) -> str | None:
    """A text field: ``None`` stays, non-finite numbers become ``None``, the rest ``str``."""
    plain = strict_jsonable(value)
    if plain is None or isinstance(plain, str):
        return plain
    if isinstance(plain, (dict, list)):
        return str(value)
    return str(plain)


def _mapping(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    plain = strict_jsonable(value)
    if not isinstance(plain, dict):
        raise TypeError(f"{what} must be a dict, got {type(value).__name__}")
    return plain


def normalize_availability(availability: object) -> Any:
    """A plugin's probe answer as a clean :class:`ProviderAvailability`.

    ``available`` must be a real bool; ``reason``/``install_hint`` become text (or
    ``None``); ``sdk_versions`` maps names to version text (or ``None``, also for a
    non-finite number); ``details`` is walked by
    :func:`~dlopt.platform.serialization.strict_jsonable`. Raises ``TypeError`` or
    :class:`~dlopt.platform.serialization.NotJsonableError` when that is not possible; the
    loader reports such a provider as unavailable.
    """
    if not isinstance(availability, ProviderAvailability):
        raise TypeError(
            f"probe() returned {type(availability).__name__}, expected ProviderAvailability"
        )
    if not isinstance(availability.available, bool):
        raise TypeError(
            f"probe() returned available={availability.available!r}, expected True or False"
        )
    versions = _mapping(availability.sdk_versions, "sdk_versions")
    return ProviderAvailability(
        availability.available,
        _text(availability.reason),
        _text(availability.install_hint),
        sdk_versions={name: _text(version) for name, version in versions.items()},
        details=_mapping(availability.details, "details"),
    )


# ---------------------------------------------------------------------------- built plans


def check_built_plan(plan: object, context: Any, *, plan_name: str, plugin: str) -> Any:
    """Check and normalise a plan right after ``provider.build()``; return it.

    * ``plan`` is a :class:`~dlopt.contract.provider.BuiltPlan` with a callable runner;
    * ``metadata`` becomes strict-JSON-able (see :func:`~dlopt.platform.serialization.strict_jsonable`);
    * ``artifacts``: every name is a plain name and every path (links followed) lies
      inside ``context.plan_dir(plan_name)``; paths become :class:`~pathlib.Path`;
    * ``output_dtype`` is ``None`` or a floating ``torch.dtype``;
    * ``serving`` is a :class:`~dlopt.contract.provider.ServingTraits`, and ``per_thread``
      concurrency comes with a callable ``thread_runner``.

    The plan's ``metadata`` and ``artifacts`` are replaced in place by their checked
    forms. Raises :class:`~dlopt.errors.ProviderBuildError` naming the plugin and plan
    when something cannot be used: the caller rejects the plan at the build stage (and
    closes it).
    """
    where = f"plan {plan_name!r} from plugin {plugin!r}"
    if not isinstance(plan, BuiltPlan):
        raise ProviderBuildError(
            f"{where}: build() returned {type(plan).__name__}, expected BuiltPlan"
        )
    if not callable(plan.runner):
        raise ProviderBuildError(f"{where}: BuiltPlan.runner is not callable")
    if not isinstance(plan.metadata, dict):
        raise ProviderBuildError(
            f"{where}: BuiltPlan.metadata must be a dict, got {type(plan.metadata).__name__}"
        )
    try:
        metadata = strict_jsonable(plan.metadata)
    except NotJsonableError as exc:
        raise ProviderBuildError(f"{where}: its metadata cannot be recorded: {exc}") from exc
    plan.metadata = metadata
    plan.artifacts = _checked_artifacts(plan.artifacts, context, plan_name, where)
    _check_output_dtype(plan.output_dtype, where)
    _check_serving(plan, where)
    return plan


def _check_serving(plan: BuiltPlan, where: str) -> None:
    if not isinstance(plan.serving, ServingTraits):
        raise ProviderBuildError(
            f"{where}: BuiltPlan.serving must be a ServingTraits (from dlopt.plugin), got "
            f"{type(plan.serving).__name__}"
        )
    if plan.serving.concurrency is Concurrency.PER_THREAD and not callable(plan.thread_runner):
        raise ProviderBuildError(
            f"{where}: it declares per_thread concurrency but gives no thread_runner; set "
            "BuiltPlan.thread_runner to a function that makes a runner for one thread, or "
            "declare serialized"
        )


def _checked_artifacts(
    artifacts: object, context: Any, plan_name: str, where: str
) -> dict[str, Path]:
    if not isinstance(artifacts, dict):
        raise ProviderBuildError(
            f"{where}: BuiltPlan.artifacts must be a dict of name -> path, got "
            f"{type(artifacts).__name__}"
        )
    if not artifacts:
        return {}
    plan_dir = context.plan_dir(plan_name)
    checked: dict[str, Path] = {}
    for name, path in artifacts.items():
        if not is_plain_name(name):
            raise ProviderBuildError(
                f"{where}: artifact name {name!r} is not a plain name (artifact names become "
                f"file names in bundles): {NAME_RULE}"
            )
        if not isinstance(path, (str, os.PathLike)):
            raise ProviderBuildError(
                f"{where}: artifact {name!r} must be a path (str or pathlib.Path), got "
                f"{type(path).__name__}"
            )
        if not is_inside(path, plan_dir):
            raise ProviderBuildError(
                f"{where}: artifact {name!r} at {os.fspath(path)!r} is outside the plan's "
                f"directory {str(plan_dir)!r}; write artifacts under context.plan_dir(name)"
            )
        checked[name] = Path(path)
    return checked


def _check_output_dtype(dtype: object, where: str) -> None:
    if dtype is None:
        return
    import torch

    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ProviderBuildError(
            f"{where}: BuiltPlan.output_dtype must be None or a floating torch.dtype "
            f"(e.g. torch.float16), got {dtype!r}"
        )


#: What a plugin's own code may raise and still be reported rather than end the host:
#: ``sys.exit`` in a plugin is a plugin failure; Ctrl-C (KeyboardInterrupt) is not caught.
PLUGIN_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit)


def describe_error(exc: BaseException) -> str:
    """``"Type: message"``, even when the exception's own ``__str__`` raises."""
    try:
        message = str(exc)
    except Exception:
        message = "<the exception's message could not be read>"
    return f"{type(exc).__name__}: {message}"
