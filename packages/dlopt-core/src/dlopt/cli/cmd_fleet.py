"""``dlopt fleet run | status | report SPEC``: qualify models on machine kinds, on Ray.

The spec is read and checked (every bad field named) before Ray is touched; Ray itself is
imported only by ``run`` (docs/fleet.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from dlopt.cli.common import EXIT_FAILED, EXIT_OK, finish_command
from dlopt.cli.console import Output
from dlopt.errors import ConfigurationError
from dlopt.fleet import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_LOST_NODE_WAIT_S


def add_fleet_command(sub: Any) -> None:
    """Register ``dlopt fleet`` and its subcommands on ``sub``."""
    p = sub.add_parser(
        "fleet",
        help="qualify many models on many machine kinds, on a Ray cluster",
        description="Race every (job, machine kind) of a fleet spec on a Ray node of that "
        "kind, one race per node at a time; decisions land as plan cache records in the "
        "spec's store (docs/fleet.md). Needs Ray: pip install 'dlopt-core[fleet]'.",
    )
    fleet = p.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND")
    run = fleet.add_parser("run", help="race every (job, machine kind) of SPEC")
    _spec_argument(run)
    run.add_argument(
        "--address",
        default="local",
        metavar="ADDRESS",
        help="local (start a local Ray instance standing in for the kinds; default), auto "
        "(the cluster this machine joined with `ray start`) or ray://HOST:PORT",
    )
    run.add_argument(
        "--allow-spec-imports",
        action="store_true",
        help="consent to importing the module:factory models and providers SPEC names "
        "(by default a spec names installed models only; see docs/fleet.md)",
    )
    run.add_argument(
        "--max-retries",
        type=int,
        default=3,
        metavar="N",
        help="retries of a race whose Ray worker died (a provider's crash is never retried)",
    )
    run.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="cancel what is left after S s"
    )
    run.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="S",
        help="auto and ray://: how long joining the cluster may take before it is an error "
        "(default %(default)g s)",
    )
    run.add_argument(
        "--lost-node-wait",
        type=float,
        default=DEFAULT_LOST_NODE_WAIT_S,
        metavar="S",
        help="how long the races of a machine kind wait for a node of the kind after its "
        "last node left the cluster, before they are reported lost (default %(default)g s)",
    )
    run.set_defaults(handler=_cmd_run)

    status = fleet.add_parser("status", help="one table across jobs and machine kinds")
    _spec_argument(status)
    finish_command(status, _cmd_status)

    report = fleet.add_parser("report", help="the table plus HTML, CSV and LaTeX output")
    _spec_argument(report)
    report.add_argument("--html", metavar="PATH", help="write one self-contained HTML page")
    report.add_argument("--csv", metavar="PATH", help="write the fleet table as CSV")
    report.add_argument(
        "--export",
        metavar="DIR",
        help="write every race's evidence as `dlopt export` does (candidates.csv, cases.csv, "
        "samples.csv, table.tex with a column per job@kind, provenance, figures)",
    )
    finish_command(report, _cmd_report)
    p.set_defaults(handler=lambda args: _usage(p))


def _spec_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="the fleet spec (TOML)")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _cmd_run(args: argparse.Namespace) -> int:
    from dlopt.fleet.runner import import_ray, run_fleet
    from dlopt.fleet.spec import load_spec

    preflight_run(args)
    spec, jobs = load_spec(args.spec, allow_imports=args.allow_spec_imports)
    if args.address == "local":
        check_local_races(spec)
    import_ray()  # after the spec is checked: a bad spec is reported without Ray
    out = Output(plain=True)
    outcome = run_fleet(
        spec,
        jobs,
        address=args.address,
        allow_imports=args.allow_spec_imports,
        max_retries=args.max_retries,
        timeout_s=args.timeout,
        connect_timeout_s=args.connect_timeout,
        lost_node_wait_s=args.lost_node_wait,
        echo=out.line,
    )
    if outcome.interrupted:
        return 130
    return EXIT_FAILED if outcome.failed or outcome.cancelled else EXIT_OK


def preflight_run(args: argparse.Namespace) -> None:
    """``dlopt fleet run``'s own arguments and the ``DLOPT_*`` settings its races inherit,
    checked before the spec is read (docs/checks.md)."""
    from dlopt.cli.preflight import check_count, check_environment, check_positive

    check_environment()
    check_count("--max-retries", args.max_retries, maximum=1000)
    check_positive("--timeout", args.timeout, example="3600")
    check_positive("--connect-timeout", args.connect_timeout, example="30")
    check_positive("--lost-node-wait", args.lost_node_wait, example="60")
    if args.address not in ("local", "auto") and not args.address.startswith("ray://"):
        raise ConfigurationError(
            f"--address {args.address!r}: give local, auto or ray://HOST:PORT (docs/fleet.md)"
        )


def check_local_races(spec: Any) -> None:
    """With ``--address local`` every race runs here: what ``dlopt select`` refuses about
    the machine it races on (a device this machine lacks, inputs larger than its memory)
    is refused before Ray starts, every problem at once."""
    from dlopt.cli.preflight import check_device
    from dlopt.platform.sizes import memory_fault

    problems = []
    for name, kind in spec.kinds.items():
        if not any(name in job.kinds for job in spec.jobs):
            continue
        try:
            check_device(kind.device, must_exist=True)
        except ConfigurationError as exc:
            problems.append(f"kinds.{name}.device: {str(exc).removeprefix('--device ')}")
    for index, job in enumerate(spec.jobs):
        fault = memory_fault([(case.name, case.shape, case.dtype) for case in job.workload])
        if fault is not None:
            problems.append(f"jobs[{index}].workload: {fault}")
    if problems:
        raise ConfigurationError(
            f"{spec.source}: with --address local every race runs on this machine: "
            + "; ".join(problems)
        )


def _read(args: argparse.Namespace, *, reports: bool) -> tuple[Any, list[Any]]:
    from dlopt.fleet.result_store import ResultStore
    from dlopt.fleet.spec import read_spec
    from dlopt.fleet.summary import entries

    # status and report import nothing: the models need not be resolvable here.
    spec = read_spec(args.spec)
    return spec, entries(spec, ResultStore.open(spec.store), reports=reports)


def _cmd_status(args: argparse.Namespace) -> int:
    from dlopt.fleet.summary import fleet_table

    spec, found = _read(args, reports=False)
    out = Output(plain=args.plain or None)
    out.table(fleet_table(found))
    done = sum(1 for e in found if e.result is not None and e.result.status == "done")
    out.line(f"{done} of {len(found)} races decided; results in {spec.store}")
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from dlopt.fleet.summary import fleet_csv, fleet_html, fleet_table, runs_of, write_text
    from dlopt.reporting.export import export

    spec, found = _read(args, reports=True)
    out = Output(plain=args.plain or None)
    table = fleet_table(found)
    out.table(table)
    if args.csv:
        out.line(f"wrote {write_text(args.csv, fleet_csv(table))}")
    if args.html:
        out.line(f"wrote {write_text(args.html, fleet_html(spec, found))}")
    if args.export:
        runs = runs_of(found)
        if not runs:
            raise ConfigurationError(
                f"no race of {args.spec} has a report yet: run `dlopt fleet run {args.spec}`"
            )
        result = export(runs, args.export)
        for path in result.files:
            out.line(f"wrote {path}")
        if result.figures_missing:
            out.line(f"figures not drawn: {result.figures_missing}")
    return EXIT_OK
