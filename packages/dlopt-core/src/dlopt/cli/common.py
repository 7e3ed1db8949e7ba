"""What every command shares: exit codes, the ``--device``/``--host`` target, ``--plain``,
and keeping provider chatter out of tables and JSON."""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import re
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


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    """``--verbose``: every line provider packages said, not one line per package."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show every line provider packages printed, warned or logged while loaded and "
        "probed (default: one line per package)",
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
    """What provider code printed, warned or logged while the CLI loaded or probed it.

    ``warnings``, ``logs`` and ``output`` hold the text; ``origins`` says, for a line of a
    warning or log record, which package said it (a logger's or a file's top package).
    """

    warnings: list[str] = attrs.field(factory=list)
    logs: list[str] = attrs.field(factory=list)
    output: list[str] = attrs.field(factory=list)
    origins: dict[str, str] = attrs.field(factory=dict)

    def lines(self) -> list[str]:
        """Each distinct message once, in the order first seen."""
        seen: dict[str, None] = {}
        for text in [*self.warnings, *self.logs, *self.output]:
            for line in text.strip().splitlines():
                if line.strip():
                    seen.setdefault(line.rstrip(), None)
        return list(seen)

    def by_origin(self) -> dict[str, list[str]]:
        """:meth:`lines` grouped by the package that said them, in the order first seen
        (``"other output"`` for what reached the streams with no sign of its package)."""
        grouped: dict[str, list[str]] = {}
        for line in self.lines():
            grouped.setdefault(self.origins.get(line, OTHER_OUTPUT), []).append(line)
        return grouped


#: Where printed output whose package cannot be told is summarised.
OTHER_OUTPUT = "other output"


def _top_package(dotted: str) -> str:
    return dotted.split(".", 1)[0] or OTHER_OUTPUT


def _package_of_file(filename: str) -> str:
    """The top package a source file belongs to: the folder under site-packages (or
    dist-packages), else the file's own name."""
    parts = filename.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return parts[parts.index(marker) + 1].removesuffix(".py")
    return parts[-1].removesuffix(".py") if parts[-1] else OTHER_OUTPUT


def _note(chatter: Chatter, sink: list[str], text: str, origin: str) -> None:
    sink.append(text)
    for line in text.strip().splitlines():
        if line.strip():
            chatter.origins.setdefault(line.rstrip(), origin)


class _Recorder(logging.Handler):
    def __init__(self, chatter: Chatter) -> None:
        super().__init__(logging.WARNING)
        self.chatter = chatter

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            text = f"{record.name}: {record.getMessage()}"
            _note(self.chatter, self.chatter.logs, text, _top_package(record.name))


@contextlib.contextmanager
def captured_chatter(*, streams: bool = True) -> Iterator[Chatter]:
    """Record Python warnings, log records of WARNING and above, and (``streams``) what is
    printed to ``sys.stdout``/``sys.stderr`` inside the block, instead of letting them land
    in the middle of a table or of JSON output. SDKs warn at import (torchao's
    ``register_constant`` deprecation comes through torch's own log handler), which
    happens when a provider is probed. What C code writes to file descriptors 1 and 2 is
    caught where plugins are loaded and probed (:func:`dlopt.platform.probing.capture_output`)
    and shown with this by :func:`show_chatter`.

    Loggers that have their own handlers (torch's does not propagate) have them swapped
    for a recorder for the duration of the block, and restored after it.
    """
    chatter = Chatter()
    recorder = _Recorder(chatter)
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
                for w in caught:
                    text = f"{w.category.__name__}: {w.message}"
                    _note(chatter, chatter.warnings, text, _package_of_file(w.filename))
    finally:
        for logger, handlers in saved:
            logger.handlers = handlers
        chatter.output.extend(text for text in (out.getvalue(), err.getvalue()) if text)


#: How long one summary line of a package's chatter may quote it.
SUMMARY_QUOTE = 160
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s/:'\"]+/)+([^\s/:'\"]+)")


def _shorten(line: str) -> str:
    """``line`` with absolute paths cut to their file name, at most ``SUMMARY_QUOTE`` long."""
    line = _ABSOLUTE_PATH.sub(r".../\1", line)
    return line if len(line) <= SUMMARY_QUOTE else line[: SUMMARY_QUOTE - 3] + "..."


def _without_origin(line: str, origin: str) -> str:
    """``line`` without the logger name a log record carries when it names ``origin``
    (``"torchao.kernel: Warning..."`` under ``torchao``: ``"Warning..."``)."""
    name, sep, rest = line.partition(": ")
    if sep and (name == origin or name.startswith(origin + ".")) and " " not in name:
        return rest
    return line


def _origin_of_capture(source: str, owners: Mapping[str, str]) -> str:
    """Who wrote a captured output: ``"import torchao.x"`` -> ``torchao``; ``"probe
    PLAN"`` -> the plan's distribution (``owners``), else the plan."""
    verb, _, subject = source.partition(" ")
    if verb == "import":
        return _top_package(subject)
    return owners.get(subject) or subject or OTHER_OUTPUT


def chatter_summary(
    chatter: Chatter, owners: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """Every line SDKs said while loaded or probed, grouped by the package that said it:
    ``chatter`` and what the probes captured at the file-descriptor level
    (:func:`dlopt.platform.probing.captured_sdk_output`, forgotten once read).
    ``owners`` maps a plan name to its distribution, for output captured while probing it."""
    from dlopt.platform.probing import captured_sdk_output, clear_captured_sdk_output

    grouped: dict[str, list[str]] = {}
    seen: set[str] = set()
    for output in captured_sdk_output():
        origin = _origin_of_capture(output.source, owners or {})
        for line in output.lines():
            if line not in seen:
                seen.add(line)
                grouped.setdefault(origin, []).append(line)
    clear_captured_sdk_output()
    for origin, lines in chatter.by_origin().items():
        fresh = [line for line in lines if line not in seen]
        seen.update(fresh)
        if fresh:
            grouped.setdefault(origin, []).extend(fresh)
    return grouped


def show_chatter(
    chatter: Chatter,
    stream: Any = None,
    *,
    verbose: bool = False,
    owners: Mapping[str, str] | None = None,
) -> None:
    """What provider packages said, dimmed, on stderr (never on stdout, where tables and
    JSON go): one line per package, with how many lines it said and the first of them;
    ``verbose`` prints every line, each once (see :func:`chatter_summary`)."""
    from dlopt.cli.console import Output

    grouped = chatter_summary(chatter, owners)
    if not grouped:
        return
    err = Output(stream if stream is not None else sys.stderr)
    total = sum(len(lines) for lines in grouped.values())
    if verbose:
        err.dim(f"provider packages said ({total} line{'s' if total != 1 else ''}):")
        for origin, lines in grouped.items():
            for line in lines:
                err.dim(f"  {origin}: {_without_origin(line, origin)}")
        return
    err.dim(
        f"provider packages said {total} line{'s' if total != 1 else ''} while loaded and "
        "probed (--verbose shows every line):"
    )
    for origin, lines in grouped.items():
        count = f"{len(lines)} line{'s' if len(lines) != 1 else ''}"
        more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
        first = _shorten(_without_origin(lines[0], origin))
        err.dim(f"  {origin}: {count}, e.g. {first}{more}")
