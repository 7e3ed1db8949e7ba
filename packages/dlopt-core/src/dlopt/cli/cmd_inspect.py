"""``dlopt inspect``: the runtime a decision would be made on."""

from __future__ import annotations

import argparse
from typing import Any

from dlopt.cli.common import EXIT_OK, add_target_arguments, cli_target
from dlopt.cli.console import format_table


def add_inspect_command(sub: Any) -> None:
    """Register ``dlopt inspect`` on the subcommand parsers ``sub``."""
    p = sub.add_parser("inspect", help="show runtime provenance (versions, device, ISA)")
    add_target_arguments(p, "describe")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.set_defaults(handler=_cmd_inspect)


def _cmd_inspect(args: argparse.Namespace) -> int:
    from dlopt.evidence.provenance import inspect_runtime
    from dlopt.platform.serialization import dumps

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
