"""``dlopt providers``: every plan, its availability and install hint; a plan's options."""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from dlopt.cli.common import EXIT_OK, add_target_arguments, cli_target
from dlopt.cli.tables import format_table
from dlopt.errors import ConfigurationError


def add_providers_command(sub: Any) -> None:
    """Register ``dlopt providers`` on the subcommand parsers ``sub``."""
    p = sub.add_parser("providers", help="list providers, their availability and install hints")
    add_target_arguments(p, "probe")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument(
        "--options", metavar="PLAN", help="list the options PLAN takes (name, type, default)"
    )
    p.set_defaults(handler=_cmd_providers)


def _cmd_providers(args: argparse.Namespace) -> int:
    from dlopt.providers.contract import ProviderContext
    from dlopt.providers.loader import load_providers
    from dlopt.serialization import dumps

    registry = load_providers()
    if args.options:
        return _print_options(registry, args.options, as_json=args.json)
    statuses = registry.probe_all(ProviderContext(target=cli_target(args)))
    if args.json:
        print(
            dumps(
                {
                    "device": args.device,
                    "providers": statuses,
                    "plugin_failures": registry.failures,
                }
            )
        )
        return EXIT_OK
    rows = [
        (
            s.name,
            s.distribution,
            s.version,
            s.precision,
            "available" if s.availability.available else "unavailable",
            s.availability.reason or "",
            s.availability.install_hint or "",
        )
        for s in statuses
    ]
    print(
        format_table(
            ("provider", "distribution", "version", "precision", "status", "reason", "install"),
            rows,
        )
    )
    if registry.failures:
        print("\nplugins that failed to load:")
        print(
            format_table(
                ("plugin", "distribution", "version", "stage", "error"),
                [
                    (f.plugin, f.distribution, f.version, f.stage, f.error)
                    for f in registry.failures
                ],
            )
        )
    return EXIT_OK


def _print_options(registry: Any, plan: str, *, as_json: bool) -> int:
    """``dlopt providers --options PLAN``: the options a plan declares."""
    from dlopt.policy import describe_options
    from dlopt.serialization import dumps, strict_jsonable

    names = [info.name for info in registry.providers]
    if plan not in names:
        close = difflib.get_close_matches(plan, names, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ConfigurationError(f"no plan named {plan!r}{hint} (see `dlopt providers`)")
    options = describe_options(getattr(registry.get(plan).provider, "options_type", None))
    if as_json:
        rows = [
            {"name": o.name, "type": o.type, "default": o.default, "help": o.help} for o in options
        ]
        # Defaults are whatever the plugin declared: normalised to strict JSON first.
        print(dumps(strict_jsonable({"plan": plan, "options": rows})))
        return EXIT_OK
    if not options:
        print(f"{plan} takes no options")
        return EXIT_OK
    print(
        format_table(
            ("option", "type", "default", "help"),
            [(o.name, o.type, repr(o.default), o.help) for o in options],
        )
    )
    print(f"\npass them with: dlopt select ... --option {plan}.{options[0].name}=VALUE")
    return EXIT_OK
