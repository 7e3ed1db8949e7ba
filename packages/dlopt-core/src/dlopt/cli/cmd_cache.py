"""``dlopt cache``: list, show, explain, prune and clear a plan cache's records.

The cache directory is ``--cache-dir`` or ``$DLOPT_CACHE_DIR``. ``clear`` and ``prune``
remove only what dlopt's layout names (docs/cache.md); a directory without dlopt's
marker is never touched.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from dlopt.cli.common import EXIT_FAILED, EXIT_OK, finish_command
from dlopt.cli.console import Output
from dlopt.errors import ConfigurationError
from dlopt.platform.serialization import dumps

_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def add_cache_argument(parser: argparse.ArgumentParser) -> None:
    """``--cache-dir``, shared by ``dlopt select`` and ``dlopt cache``."""
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="the plan cache directory (default: $DLOPT_CACHE_DIR)",
    )


def cache_dir_of(args: argparse.Namespace, *, required: bool) -> str | None:
    """``--cache-dir``, else ``$DLOPT_CACHE_DIR``; a usage error when required and unset."""
    named = cache_dir_option(args)
    if named is None and required:
        from dlopt.cache.record_store import CACHE_DIR_ENV

        raise ConfigurationError(
            f"no plan cache named: pass --cache-dir DIR or set {CACHE_DIR_ENV}"
        )
    return None if named is None else named[1]


def cache_dir_option(args: argparse.Namespace) -> tuple[str, str] | None:
    """Where the plan cache was named, and the directory: ``("--cache-dir", DIR)``, else
    ``("$DLOPT_CACHE_DIR", DIR)``, else ``None``. ``--cache-dir ""`` is returned as given
    (and refused by the checks), never taken as "use the environment"."""
    from dlopt.cache.record_store import CACHE_DIR_ENV, default_cache_dir

    if args.cache_dir is not None:
        return "--cache-dir", args.cache_dir
    chosen = default_cache_dir()
    return None if chosen is None else (f"${CACHE_DIR_ENV}", chosen)


def check_cache_dir(args: argparse.Namespace, *, writable: bool) -> None:
    """Refuse a plan cache directory that cannot serve, before any work: empty, a regular
    file (or a FIFO, a device), unreadable, or (``writable``: a race stores its record
    there) one that cannot be created or written, such as a path under ``/proc``. The
    message names where it was set (``--cache-dir`` or ``$DLOPT_CACHE_DIR``)."""
    import os
    import stat

    from dlopt.cli.preflight import check_output_dir
    from dlopt.platform.fileio import file_kind

    named = cache_dir_option(args)
    if named is None:
        return
    option, directory = named
    if not directory:
        raise ConfigurationError(f"{option} is empty: give the plan cache directory")
    try:
        mode = os.stat(directory).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:  # a file on the way: named by the output check
        check_output_dir(option, directory, what="plan cache records")
        raise ConfigurationError(
            f"{option} {directory}: a file lies on its path; give a directory for the plan cache"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"{option} {directory}: {exc.strerror or exc}; give a directory for the plan cache"
        ) from None
    if mode is not None and not stat.S_ISDIR(mode):
        kind = "a regular file" if stat.S_ISREG(mode) else file_kind(mode)
        raise ConfigurationError(
            f"{option} {directory} is {kind}, not a directory: give the plan cache's "
            "directory (it is created when missing)"
        )
    if mode is not None and not os.access(directory, os.R_OK | os.X_OK):
        raise ConfigurationError(
            f"{option} {directory}: the directory cannot be read (Permission denied); give a "
            "plan cache directory you can read"
        )
    if writable:
        check_output_dir(option, directory, what="plan cache records")


def add_cache_command(sub: Any) -> None:
    """Register ``dlopt cache`` and its actions on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "cache",
        help="list, show, explain, prune or clear cached decisions",
        description="Look after a plan cache (dlopt select --cache-dir DIR writes one).",
        epilog="Examples: dlopt cache list --cache-dir ~/.cache/dlopt | dlopt cache show 3f2a9c | "
        "dlopt cache explain 3f2a9c 81be07 | dlopt cache prune --older-than 30d | dlopt cache clear",
    )
    actions = p.add_subparsers(dest="cache_action", metavar="ACTION")

    def action(
        name: str, help_text: str, handler: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            name, help=help_text, description=help_text
        )
        add_cache_argument(parser)
        finish_command(parser, handler)
        return parser

    action("list", "every record: key, when written, selected plan, size", _cmd_list)
    show = action("show", "one record: its decision and the ingredients of its key", _cmd_show)
    show.add_argument("key", help="a key or a unique prefix of one (6 hex digits or more)")
    show.add_argument("--json", action="store_true", help="print record.json as it is")
    explain = action("explain", "which ingredients differ between two keys", _cmd_explain)
    explain.add_argument("key_a")
    explain.add_argument("key_b")
    prune = action("prune", "remove records written longer ago than --older-than", _cmd_prune)
    prune.add_argument(
        "--older-than", required=True, metavar="AGE", help="an age: 30d, 12h, 90m, 2w"
    )
    action("clear", "remove every record (files dlopt did not write stay)", _cmd_clear)
    p.set_defaults(handler=lambda _args: p.print_help() or EXIT_FAILED)


def cache_line(cache: Any) -> str:
    """One line on what the plan cache did for a decision (``CacheEvidence``)."""
    timing = f"lookup {cache.lookup_time_s:.2f} s" if cache.lookup_time_s is not None else ""
    if cache.revalidation_time_s is not None:
        timing += f", revalidation {cache.revalidation_time_s:.2f} s"
    if cache.cache_hit:
        return f"cache: hit {cache.key[:12]} ({timing}): {cache.reason}"
    stored = ""
    if cache.record_written:
        stored = "; stored"
    elif cache.write_note:
        stored = f"; not stored: {cache.write_note}"
    return f"cache: miss {cache.key[:12]} ({timing}): {cache.reason}{stored}"


def parse_age(text: str) -> float:
    """Seconds in an age such as ``30d``; a usage error naming the form otherwise."""
    match = _AGE.fullmatch(text.strip())
    if not match:
        raise ConfigurationError(
            f"--older-than takes an age such as 30d, 12h, 90m or 2w, not {text!r}"
        )
    return float(match.group(1)) * _SECONDS[match.group(2)]


def _cache(args: argparse.Namespace) -> Any:
    from dlopt.cache.record_store import PlanCache

    directory = cache_dir_of(args, required=True) or ""
    check_cache_dir(args, writable=False)
    return PlanCache(directory)


def _cmd_list(args: argparse.Namespace) -> int:
    cache = _cache(args)
    out = Output(plain=args.plain or None)
    rows = [
        (
            s.key[:12],
            s.created_at or "?",
            s.selected_plan or "?",
            f"{s.size_bytes / 2**20:.1f} MiB",
            s.problem or "",
        )
        for s in cache.summaries()
    ]
    if not rows:
        if cache.root.exists():
            out.line(f"no records in {cache.root}")
        else:
            out.line(f"no records: {cache.root} does not exist yet (a selection creates it)")
        return EXIT_OK
    from dlopt.cli.console import format_table

    out.line(format_table(("key", "written", "plan", "size", "problem"), rows))
    return EXIT_OK


def _record_json(cache: Any, key: str) -> dict[str, Any]:
    from dlopt.cache.record_store import RECORD_NAME, PlanCacheError, read_record_json

    try:
        return read_record_json(cache.record_path(key) / RECORD_NAME, key)
    except PlanCacheError as exc:
        raise ConfigurationError(str(exc)) from None


def _cmd_show(args: argparse.Namespace) -> int:
    cache = _cache(args)
    key = _resolve(cache, args.key)
    data = _record_json(cache, key)
    out = Output(plain=args.plain or None)
    if args.json:
        out.line(dumps(data))
        return EXIT_OK
    rows = [
        ("key", key),
        ("written", str(data.get("created_at"))),
        ("plan", str(data.get("selected_plan"))),
    ]
    rows += [(path, text) for path, text in _leaves(data["ingredients"])]
    out.pairs(rows, title=f"record {key[:12]} in {cache.root}")
    return EXIT_OK


def _cmd_explain(args: argparse.Namespace) -> int:
    from dlopt.cache.key import differences

    cache = _cache(args)
    key_a, key_b = _resolve(cache, args.key_a), _resolve(cache, args.key_b)
    a = _record_json(cache, key_a)["ingredients"]
    b = _record_json(cache, key_b)["ingredients"]
    out = Output(plain=args.plain or None)
    found = differences(a, b)
    if not found:
        out.line(f"{key_a[:12]} and {key_b[:12]} have the same ingredients")
        return EXIT_OK
    out.line(f"{len(found)} ingredient(s) differ between {key_a[:12]} and {key_b[:12]}:")
    for path in found:
        out.line(f"  {path}: {_short(_at(a, path))} -> {_short(_at(b, path))}")
    return EXIT_OK


def _cmd_prune(args: argparse.Namespace) -> int:
    seconds = parse_age(args.older_than)
    return _report_removed(_cache(args), older_than_s=seconds, plain=args.plain)


def _cmd_clear(args: argparse.Namespace) -> int:
    return _report_removed(_cache(args), older_than_s=None, plain=args.plain)


def _report_removed(cache: Any, *, older_than_s: float | None, plain: bool) -> int:
    from dlopt.cache.record_store import PlanCacheError

    try:
        removed = cache.remove(older_than_s=older_than_s)
    except PlanCacheError as exc:
        raise ConfigurationError(str(exc)) from None
    Output(plain=plain or None).line(
        f"removed {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} from {cache.root}"
    )
    return EXIT_OK


def _resolve(cache: Any, text: str) -> str:
    from dlopt.cache.record_store import PlanCacheError

    try:
        return str(cache.resolve(text))
    except PlanCacheError as exc:
        raise ConfigurationError(str(exc)) from None


def _leaves(value: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict) and value:
        rows: list[tuple[str, str]] = []
        for name in sorted(value):
            rows += _leaves(value[name], f"{path}.{name}" if path else name)
        return rows
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        rows = []
        for index, item in enumerate(value):
            rows += _leaves(item, f"{path}[{index}]")
        return rows
    return [(path, _short(value))]


def _at(data: Any, path: str) -> Any:
    """The value at a path ``differences`` named (``a.b[2].c``); ``<absent>`` if none."""
    here = data
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        try:
            here = here[int(part[1:-1])] if part.startswith("[") else here[part]
        except (KeyError, IndexError, TypeError, ValueError):
            return "<absent>"
    return here


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else dumps(value, indent=None)
    return text if len(text) <= limit else text[: limit - 3] + "..."
