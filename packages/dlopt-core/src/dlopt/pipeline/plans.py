"""Stage 1, plans: which plans this selection races, reference first, with their options checked."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from dlopt.contract.provider import (
    ProviderInfo,
    ProviderProtocol,
    Role,
)
from dlopt.errors import ConfigurationError
from dlopt.pipeline.state import CandidateState
from dlopt.plugins.boundary import check_plan_name
from dlopt.plugins.registry import EXPLICIT_PLUGIN, ProviderRegistry, with_explicit
from dlopt.settings.policy import OptimizationPolicy, check_plan_names, structure_options


def choose_plans(
    registry: ProviderRegistry, explicit: Sequence[ProviderProtocol], policy: OptimizationPolicy
) -> list[CandidateState]:
    """The plans this selection races, reference first, with their options checked."""
    names = [check_plan_name(p.name, plugin=EXPLICIT_PLUGIN) for p in explicit]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        # A dict keyed by name would keep the last one silently.
        raise ConfigurationError(
            f"providers= holds more than one provider named {', '.join(map(repr, repeated))}; "
            "plan names must be unique: rename one or pass only one"
        )
    # A typo in include/exclude would silently race other plans than the user meant.
    check_plan_names(policy, [*(i.name for i in registry.providers), *names])
    infos = with_explicit(registry.providers, explicit)
    # The reference (eager fp32) always races, whatever include/exclude say, and first.
    roles = {i.name: _declared_role(i) for i in infos}
    chosen = [i for i in infos if roles[i.name] is Role.REFERENCE or policy.wants(i.name)]
    references = [i.name for i in chosen if roles[i.name] is Role.REFERENCE]
    if len(references) != 1:
        raise ConfigurationError(
            "no provider declares the reference role (core's eager_fp32 does): reinstall dlopt-core"
            if not references
            else f"more than one provider declares the reference role: "
            f"{', '.join(references)}; only one plan (eager fp32) can be the reference: "
            "a plugin's plan declares Role.NATIVE or Role.CHALLENGER"
        )
    chosen.sort(key=lambda i: roles[i.name] is not Role.REFERENCE)
    _check_plan_options(policy, chosen)
    return [CandidateState(info, options=plan_options(policy, info)) for info in chosen]


def plan_options(policy: OptimizationPolicy, info: ProviderInfo) -> Any:
    """The plan's options: the user's values for it, over the provider's defaults."""
    options_type = getattr(info.provider, "options_type", None)
    if options_type is None:
        return None
    return structure_options(options_type, policy.plan_options.get(info.name, {}), plan=info.name)


def _check_plan_options(policy: OptimizationPolicy, chosen: list[ProviderInfo]) -> None:
    """Options for a plan that is not raced, or that takes none, are a user's mistake."""
    by_name = {i.name: i for i in chosen}
    for name, values in policy.plan_options.items():
        info = by_name.get(name)
        if info is None:
            close = difflib.get_close_matches(name, list(by_name), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ConfigurationError(
                f"plan_options names {name!r}, which is not a plan of this race{hint} "
                f"(raced: {', '.join(by_name)})"
            )
        if getattr(info.provider, "options_type", None) is None and values:
            raise ConfigurationError(
                f"plan {name!r} takes no options, but plan_options gives it "
                f"{', '.join(map(repr, values))}"
            )


def _declared_role(info: ProviderInfo) -> Role:
    try:
        return Role.of(info.provider)
    except TypeError as exc:
        raise ConfigurationError(f"{exc} (plugin {info.plugin!r})") from None
