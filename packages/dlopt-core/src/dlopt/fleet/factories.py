"""Models a fleet spec may name: the ``dlopt.models`` entry-point group.

A spec is a file, and nothing read from a file is imported or executed by dlopt: so a spec
names a model by the name an installed distribution registered, exactly as providers are
registered through ``dlopt.providers``::

    [project.entry-points."dlopt.models"]
    resnet50_serving = "mypkg.models:resnet50_serving"

The factory takes no arguments and returns a model, or ``(model, WorkloadProfile)``.
Listing and naming models reads the installed distributions' metadata only; the factory
is imported where the race runs, as installed code.
"""

from __future__ import annotations

import difflib
import sys

from attrs import frozen

from dlopt.errors import ConfigurationError

MODELS_GROUP = "dlopt.models"


@frozen
class RegisteredModel:
    """One ``dlopt.models`` entry point: its name, ``module:factory`` and distribution."""

    name: str
    reference: str
    distribution: str | None


def registered_models() -> dict[str, RegisteredModel]:
    """Every installed model factory by name (the first distribution wins a name)."""
    if sys.version_info >= (3, 12):
        from importlib.metadata import entry_points
    else:
        from importlib_metadata import entry_points

    found: dict[str, RegisteredModel] = {}
    for entry in entry_points(group=MODELS_GROUP):
        dist = getattr(entry, "dist", None)
        found.setdefault(
            entry.name,
            RegisteredModel(entry.name, entry.value, getattr(dist, "name", None)),
        )
    return found


def model_factory(name: str, where: str) -> str:
    """The ``module:factory`` registered as ``name``; a clear error naming ``where`` (the
    spec's field) and the closest registered names otherwise."""
    models = registered_models()
    if name in models:
        return models[name].reference
    close = difflib.get_close_matches(name, list(models), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    raise ConfigurationError(
        f"{where}: no installed model is registered as {name!r}. {hint}Registered models: "
        f"{', '.join(sorted(models)) or 'none'}. Register a factory in your distribution's "
        f'pyproject.toml under [project.entry-points."{MODELS_GROUP}"] (name = '
        '"mypkg.models:factory"), or write model = "module:factory" and pass '
        "--allow-spec-imports (docs/fleet.md)"
    )
