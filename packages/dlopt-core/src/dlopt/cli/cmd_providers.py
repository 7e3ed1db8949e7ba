"""``dlopt providers``: every plan, its availability and install hint; the first-party
provider distributions not installed, with the command that installs each; a plan's
options. What SDKs print while loaded and probed is summarised on stderr, one line each."""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from dlopt.cli.common import (
    EXIT_OK,
    add_isolate_argument,
    add_target_arguments,
    add_verbose_argument,
    captured_chatter,
    cli_target,
    finish_command,
    show_chatter,
)
from dlopt.cli.console import Output
from dlopt.errors import ConfigurationError


def add_providers_command(sub: Any) -> None:
    """Register ``dlopt providers`` on the subcommand parsers ``sub``."""
    p = sub.add_parser("providers", help="list providers, their availability and install hints")
    add_target_arguments(p, "probe")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument(
        "--options", metavar="PLAN", help="list the options PLAN takes (name, type, default)"
    )
    add_isolate_argument(p, "load the plugins and probe")
    add_verbose_argument(p)
    finish_command(p, _cmd_providers)


def _cmd_providers(args: argparse.Namespace) -> int:
    from dlopt.contract.provider import ProviderContext
    from dlopt.pipeline.probe import probe_all
    from dlopt.plugins.discovery import load_providers

    target = cli_target(args)
    out = Output(plain=args.plain or None)
    if args.isolate and not args.options:
        from dlopt.isolation.supervisor import probe_in_worker
        from dlopt.settings.policy import OptimizationPolicy

        isolated, failures = probe_in_worker(target, OptimizationPolicy())
        return _print_statuses(args, isolated, failures, out)
    # SDK imports warn and print (torchao's deprecation): kept out of the table and JSON.
    with captured_chatter() as chatter:
        registry = load_providers()
        statuses = None if args.options else probe_all(registry, ProviderContext(target=target))
    owners = {info.name: info.distribution for info in registry.providers if info.distribution}
    show_chatter(chatter, verbose=args.verbose, owners=owners)
    if args.options:
        return _print_options(registry, args.options, as_json=args.json, out=out)
    assert statuses is not None
    return _print_statuses(args, statuses, registry.failures, out)


def _print_statuses(args: argparse.Namespace, statuses: Any, failures: Any, out: Output) -> int:
    from dlopt.platform.serialization import dumps
    from dlopt.plugins.first_party import missing_first_party
    from dlopt.reporting.tables import plugin_failures_table, providers_table

    device_type = str(args.device).split(":", 1)[0]
    missing = [
        {"distribution": d.name, "adds": d.adds, "install": d.install_command(device_type)}
        for d in missing_first_party()
    ]
    if args.json:
        document = {
            "device": args.device,
            "providers": statuses,
            "plugin_failures": failures,
            "not_installed": missing,
        }
        print(dumps(document))
        return EXIT_OK
    out.table(providers_table(statuses))
    if failures:
        out.line()
        out.table(plugin_failures_table(failures))
    if missing:
        out.line()
        out.table(_not_installed_table(missing))
    return EXIT_OK


def _not_installed_table(missing: list[dict[str, str]]) -> Any:
    """The first-party provider distributions not installed: name, plans, pip command."""
    from dlopt.reporting.tables import NOWRAP, WRAP, Table

    return Table.build(
        (("distribution", NOWRAP, False), ("adds", WRAP, False, 1), ("install", NOWRAP, False)),
        [(m["distribution"], m["adds"], m["install"]) for m in missing],
        title="first-party provider distributions not installed",
    )


def _print_options(registry: Any, plan: str, *, as_json: bool, out: Output) -> int:
    """``dlopt providers --options PLAN``: the options a plan declares."""
    from dlopt.platform.serialization import dumps, strict_jsonable
    from dlopt.reporting.tables import options_table
    from dlopt.settings.policy import describe_options

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
    out.table(options_table(options))
    print(f"\npass them with: dlopt select ... --option {plan}.{options[0].name}=VALUE")
    return EXIT_OK
