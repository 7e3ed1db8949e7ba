"""The ``dlopt`` command line: ``inspect``, ``providers``, ``select``, ``report``, ``export``,
``cache``, ``fleet``.

Exit codes: 0 success, 1 the work ran but failed (e.g. the reference model cannot run),
2 bad usage or input (argparse's convention), 130 interrupted (SIGINT), 143 terminated
(SIGTERM: what stopped is cleaned up as on Ctrl-C, an isolated selection's worker too).
Each command lives in its own module (``cmd_<command>.py``) and registers itself on the
parser built here.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence

from dlopt._version import __version__
from dlopt.cli.cmd_cache import add_cache_command
from dlopt.cli.cmd_export import add_export_command
from dlopt.cli.cmd_fleet import add_fleet_command
from dlopt.cli.cmd_inspect import add_inspect_command
from dlopt.cli.cmd_providers import add_providers_command
from dlopt.cli.cmd_report import add_report_command
from dlopt.cli.cmd_select import add_select_command
from dlopt.cli.cmd_serve import add_serve_command
from dlopt.cli.common import EXIT_FAILED, EXIT_USAGE
from dlopt.errors import DloptError


def build_parser() -> argparse.ArgumentParser:
    """The ``dlopt`` parser with every command registered."""
    parser = argparse.ArgumentParser(
        prog="dlopt",
        description="Pick the fastest validated inference plan for a PyTorch model.",
        epilog="Examples: dlopt select --demo --report r.json | dlopt report r.json | "
        "dlopt report r.json --html r.html | dlopt export r.json -o paper/ | dlopt providers",
    )
    parser.add_argument("--version", action="version", version=f"dlopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_inspect_command(sub)
    add_providers_command(sub)
    add_select_command(sub)
    add_report_command(sub)
    add_export_command(sub)
    add_cache_command(sub)
    add_fleet_command(sub)
    add_serve_command(sub)
    return parser


#: The exit status of a command ended by SIGTERM (128 + 15, as a shell reports it).
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so that every ``finally`` runs (an isolated
    selection's worker is ended there, its temp directory removed)."""


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While the body runs, SIGTERM raises :class:`Terminated` (in the main thread, when
    nothing else handles SIGTERM), instead of ending the process where it stands."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def unwind(signum: int, frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dlopt`` with ``argv`` (default: the process's arguments); return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        with _sigterm_unwinds():
            return int(args.handler(args))
    except DloptError as exc:
        print(f"dlopt: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED
    except KeyboardInterrupt:
        print("dlopt: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(
            "dlopt: terminated (SIGTERM); what the command had started was stopped",
            file=sys.stderr,
        )
        return EXIT_TERMINATED
