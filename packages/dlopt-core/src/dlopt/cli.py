"""The ``dlopt`` command line: ``inspect``, ``providers``, ``select``, ``report``.

Exit codes: 0 success, 1 the work ran but failed (e.g. the reference model cannot run),
2 bad usage or input (argparse's convention).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from dlopt.errors import ConfigurationError, DloptError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table; ``None`` shows as ``-``; long cells are kept whole."""
    cells = [[("-" if value is None else str(value)) for value in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for index, value in enumerate(row):
            widths[index] = max(widths[index], len(value))

    # The last column (reasons, hints) is not padded so long text does not widen the rest.
    def line(values: Sequence[str]) -> str:
        padded = [v.ljust(widths[i]) for i, v in enumerate(values[:-1])]
        return "  ".join([*padded, values[-1]]).rstrip()

    rule = "  ".join("-" * w for w in widths[:-1]) + "  " + "-" * min(widths[-1], 40)
    return "\n".join([line(list(headers)), rule, *(line(row) for row in cells)])


def cli_target(args: argparse.Namespace) -> Any:
    """The ``--device``/``--host`` target of a command, checked against torch."""
    from dlopt.target import ExecutionTarget

    target = ExecutionTarget(args.device, host=getattr(args, "host", None))
    target.check_known()
    return target


def add_target_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--device`` and ``--host``, shared by every command that names a target."""
    parser.add_argument("--device", default="cpu", help=f"device to {verb} (default: cpu)")
    parser.add_argument(
        "--host",
        default=None,
        help="where the model and inputs live when plans compute elsewhere (an SDK that "
        "takes host tensors: --device npu:0 --host cpu)",
    )


def _cmd_inspect(args: argparse.Namespace) -> int:
    from dlopt.runtime import inspect_runtime
    from dlopt.serialization import dumps

    info = inspect_runtime(cli_target(args))
    if args.json:
        print(dumps(info))
        return EXIT_OK
    cpu = info.cpu
    rows = [
        ("device", f"{info.device} ({info.device_name})"),
        ("python", info.python),
        ("platform", info.platform),
        ("torch", info.torch),
        ("cuda / cudnn", f"{info.cuda or '-'} / {info.cudnn or '-'}"),
        (
            "cpu",
            f"{cpu.model}, {cpu.logical_cores} logical cores, {cpu.torch_threads} torch threads",
        ),
        ("cpu isa", ", ".join(cpu.isa_flags) or "none of interest"),
        ("torch cpu kernels", cpu.torch_cpu_capability),
        ("amp", ", ".join(info.amp_dtypes) or "no"),
        ("channels-last", "yes" if info.channels_last else "no"),
        ("triton", info.triton),
        ("torch.compile", f"{'yes' if info.torch_compile else 'no'} ({info.torch_compile_reason})"),
    ]
    if info.cuda_device:
        gpu = info.cuda_device
        rows.append(
            ("gpu", f"{gpu.name}, sm {gpu.compute_capability}, {gpu.total_memory_mb:.0f} MiB")
        )
    print(format_table(("field", "value"), rows))
    available = [p.name for p in info.providers if p.available]
    print(f"\nproviders available: {', '.join(available) or 'none'} (details: dlopt providers)")
    return EXIT_OK


def _cmd_providers(args: argparse.Namespace) -> int:
    from dlopt.providers.contract import ProviderContext
    from dlopt.providers.loader import load_providers
    from dlopt.serialization import to_jsonable

    registry = load_providers()
    if args.options:
        return _print_options(registry, args.options, as_json=args.json)
    statuses = registry.probe_all(ProviderContext(target=cli_target(args)))
    if args.json:
        print(
            json.dumps(
                {
                    "device": args.device,
                    "providers": to_jsonable(statuses),
                    "plugin_failures": to_jsonable(registry.failures),
                },
                indent=2,
                allow_nan=False,
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
    import difflib

    from dlopt.policy import describe_options
    from dlopt.serialization import strict_jsonable

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
        print(json.dumps(strict_jsonable({"plan": plan, "options": rows}), indent=2))
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


def build_parser() -> argparse.ArgumentParser:
    from dlopt import __version__

    parser = argparse.ArgumentParser(
        prog="dlopt",
        description="Pick the fastest validated inference plan for a PyTorch model.",
        epilog="Examples: dlopt select --demo | dlopt providers | dlopt inspect --json",
    )
    parser.add_argument("--version", action="version", version=f"dlopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p_inspect = sub.add_parser("inspect", help="show runtime provenance (versions, device, ISA)")
    add_target_arguments(p_inspect, "describe")
    p_inspect.add_argument("--json", action="store_true", help="print the record as JSON")
    p_inspect.set_defaults(handler=_cmd_inspect)

    p_prov = sub.add_parser(
        "providers", help="list providers, their availability and install hints"
    )
    add_target_arguments(p_prov, "probe")
    p_prov.add_argument("--json", action="store_true", help="print as JSON")
    p_prov.add_argument(
        "--options", metavar="PLAN", help="list the options PLAN takes (name, type, default)"
    )
    p_prov.set_defaults(handler=_cmd_providers)

    try:
        from dlopt.cli_select import add_select_commands
    except ImportError:  # pipeline not installed in this build
        pass
    else:
        add_select_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except DloptError as exc:
        print(f"dlopt: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED
    except KeyboardInterrupt:
        print("dlopt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
