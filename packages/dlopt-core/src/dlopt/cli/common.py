"""What every command shares: exit codes, the ``--device``/``--host`` target, ``--plain``,
and keeping provider chatter out of tables and JSON."""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from dlopt.settings.target import ExecutionTarget

#: The words that switch a boolean ``DLOPT_*`` setting off.
FALSY_SWITCH_WORDS = ("0", "false", "no", "off")
#: 0 success, 1 the work ran but failed, 2 bad usage or input (argparse's convention).
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def cli_target(args: argparse.Namespace, *, must_exist: bool = False) -> ExecutionTarget:
    """The ``--device``/``--host`` target of a command, checked against torch, after the
    ``DLOPT_*`` settings every such command reads (:mod:`dlopt.cli.preflight`).
    ``must_exist``: the device must be present on this machine (a race needs it)."""
    from dlopt.cli.preflight import check_device, check_environment

    check_environment()
    return check_device(args.device, getattr(args, "host", None), must_exist=must_exist)


def add_target_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--device`` and ``--host``, shared by every command that names a target."""
    parser.add_argument("--device", default="cpu", help=f"device to {verb} (default: cpu)")
    parser.add_argument(
        "--host",
        default=None,
        help="where the model and inputs live when plans compute elsewhere (an SDK that "
        "takes host tensors: --device npu:0 --host cpu)",
    )


def add_isolate_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--isolate``: run ``what`` in a supervised worker process (docs/isolation.md)."""
    parser.add_argument(
        "--isolate",
        action="store_true",
        help=f"{what} in a supervised worker process: a plugin that crashes or hangs is "
        "reported and the rest goes on",
    )


def add_isolation_choice(parser: argparse.ArgumentParser, what: str) -> None:
    """``--isolate`` / ``--in-process`` for a command that isolates by default
    (``$DLOPT_ISOLATE`` sets the default; see :func:`isolated`)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--isolate",
        dest="isolate",
        action="store_const",
        const=True,
        default=None,
        help=f"{what} in a supervised worker process: a plugin that crashes or hangs is "
        "reported and the rest goes on (the default; DLOPT_ISOLATE=0 changes it)",
    )
    group.add_argument(
        "--in-process",
        dest="isolate",
        action="store_const",
        const=False,
        help=f"{what} in this process: faster to start, but a plugin that crashes takes the "
        "command down and one that hangs holds it",
    )


def isolated(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the command isolates: ``--isolate``/``--in-process``, else
    ``$DLOPT_ISOLATE`` (checked by the preflight), else yes."""
    if args.isolate is not None:
        return bool(args.isolate)
    env = os.environ if environ is None else environ
    return env.get("DLOPT_ISOLATE", "").strip().lower() not in FALSY_SWITCH_WORDS


def finish_command(
    parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int]
) -> None:
    """How every printing command's parser ends: ``--plain`` (plain text even on a terminal,
    also when ``NO_COLOR`` is set), then the ``handler`` that runs the command."""
    parser.add_argument(
        "--plain",
        action="store_true",
        help="plain text, no colours or fitted tables (default when stdout is not a terminal "
        "or NO_COLOR is set)",
    )
    parser.set_defaults(handler=handler)


@attrs.define
class Chatter:
    """What provider code printed, warned or logged while the CLI loaded or probed it."""

    warnings: list[str] = attrs.field(factory=list)
    logs: list[str] = attrs.field(factory=list)
    output: list[str] = attrs.field(factory=list)

    def lines(self) -> list[str]:
        """Each distinct message once, in the order first seen."""
        seen: dict[str, None] = {}
        for text in [*self.warnings, *self.logs, *self.output]:
            for line in text.strip().splitlines():
                if line.strip():
                    seen.setdefault(line.rstrip(), None)
        return list(seen)


class _Recorder(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.sink.append(f"{record.name}: {record.getMessage()}")


@contextlib.contextmanager
def captured_chatter(*, streams: bool = True) -> Iterator[Chatter]:
    """Record Python warnings, log records of WARNING and above, and (``streams``) what is
    printed to ``sys.stdout``/``sys.stderr`` inside the block, instead of letting them land
    in the middle of a table or of JSON output. SDKs warn at import (torchao's
    ``register_constant`` deprecation comes through torch's own log handler), which
    happens when a provider is probed.

    Loggers that have their own handlers (torch's does not propagate) have them swapped
    for a recorder for the duration of the block, and restored after it.
    """
    chatter = Chatter()
    recorder = _Recorder(chatter.logs)
    loggers = [logging.getLogger()] + [
        logger
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger) and logger.handlers
    ]
    saved = [(logger, list(logger.handlers)) for logger in loggers]
    for logger, _ in saved:
        logger.handlers = [recorder]
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.ExitStack() as stack:
            caught = stack.enter_context(warnings.catch_warnings(record=True))
            if streams:
                stack.enter_context(contextlib.redirect_stdout(out))
                stack.enter_context(contextlib.redirect_stderr(err))
            try:
                yield chatter
            finally:
                chatter.warnings.extend(f"{w.category.__name__}: {w.message}" for w in caught)
    finally:
        for logger, handlers in saved:
            logger.handlers = handlers
        chatter.output.extend(text for text in (out.getvalue(), err.getvalue()) if text)


def show_chatter(chatter: Chatter, stream: Any = None) -> None:
    """What provider packages said, each line once, dimmed, on stderr (never on stdout,
    where tables and JSON go): ``chatter`` and what the probes captured
    (:func:`dlopt.platform.probing.captured_sdk_output`, forgotten once shown)."""
    from dlopt.cli.console import Output
    from dlopt.platform.probing import captured_sdk_output, clear_captured_sdk_output

    probed = [line for output in captured_sdk_output() for line in output.lines()]
    clear_captured_sdk_output()
    lines = list(dict.fromkeys([*probed, *chatter.lines()]))
    if not lines:
        return
    err = Output(stream if stream is not None else sys.stderr)
    err.dim(f"provider packages said ({len(lines)} line{'s' if len(lines) != 1 else ''}):")
    for line in lines:
        err.dim(f"  {line}")
