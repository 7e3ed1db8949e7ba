"""Tool results as strict, bounded JSON objects, and the checks on what an agent sends.

A result is built from plain values, normalised by :func:`dlopt.platform.serialization.strict_jsonable`
(no NaN or Infinity), and measured as compact JSON text. One that is over the host's
limit is shortened step by step (long texts cut, long lists and maps trimmed, the
envelope's ``truncated`` set) and, if even that cannot fit, replaced by a
``result_too_large`` error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dlopt.agents.schemas import ErrorCode
from dlopt.platform.serialization import dumps, parse_strict_json, strict_jsonable

#: The longest arguments text (JSON) a call may send.
MAX_ARGUMENTS_CHARS = 64 * 1024
#: How deep arguments may nest (the schemas need three levels).
MAX_ARGUMENTS_DEPTH = 16
#: The smallest result limit a host may set: every error envelope fits in it.
MIN_RESULT_CHARS = 2_000
#: Steps of shortening, tried in order: (longest text, most items of a list or map).
_SHRINK_STEPS = ((4_000, 200), (1_000, 50), (300, 20), (120, 8), (60, 4))
#: A map keeps at least this many entries when shortened (every record type has fewer).
_MIN_KEYS = 64


class ToolError(Exception):
    """Raised inside the toolkit to end a call with a structured error result."""

    def __init__(self, code: ErrorCode, message: str, details: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = dict(details or {})


def clip(text: object, limit: int) -> str:
    """``text`` as a string of at most about ``limit`` characters (a cut says how much)."""
    value = text if isinstance(text, str) else str(text)
    if len(value) <= limit:
        return value
    return value[:limit] + f"...[{len(value) - limit} more characters]"


def compact(value: Any) -> str:
    """Strict, compact JSON text (raises ``ValueError`` on anything else)."""
    return dumps(value, indent=None)


def success(tool: str, result: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    """The envelope of a successful call, within ``max_chars`` of JSON text."""
    payload = strict_jsonable(dict(result))
    envelope = {"ok": True, "tool": clip(tool, 64), "truncated": False, "result": payload}
    if len(compact(envelope)) <= max_chars:
        return envelope
    for text_limit, item_limit in _SHRINK_STEPS:
        envelope["result"] = _shrink(payload, text_limit, item_limit)
        envelope["truncated"] = True
        if len(compact(envelope)) <= max_chars:
            return envelope
    return failure(
        tool,
        ErrorCode.RESULT_TOO_LARGE,
        f"the result does not fit the host's limit of {max_chars} characters; ask for less "
        "(e.g. one candidate's evidence with dlopt_read_report)",
        max_chars=max_chars,
    )


def failure(
    tool: str,
    code: ErrorCode,
    message: str,
    details: Mapping[str, Any] | None = None,
    *,
    max_chars: int,
) -> dict[str, Any]:
    """The envelope of a failed call, within ``max_chars`` (details are dropped if need be)."""
    error: dict[str, Any] = {"code": code.value, "message": clip(message, 1_000)}
    if details:
        error["details"] = strict_jsonable(dict(details))
    envelope = {"ok": False, "tool": clip(tool, 64), "truncated": False, "error": error}
    if len(compact(envelope)) <= max_chars:
        return envelope
    envelope["truncated"] = True
    if "details" in error:
        error["details"] = _shrink(error["details"], 60, 4)
        if len(compact(envelope)) <= max_chars:
            return envelope
        del error["details"]
    error["message"] = clip(message, 300)
    return envelope


def _shrink(value: Any, text_limit: int, item_limit: int) -> Any:
    """``value`` (plain JSON) with texts cut at ``text_limit`` and lists/maps at ``item_limit``."""
    if isinstance(value, str):
        return clip(value, text_limit)
    if isinstance(value, list):
        kept = [_shrink(v, text_limit, item_limit) for v in value[:item_limit]]
        if len(value) > item_limit:
            kept.append(f"...[{len(value) - item_limit} more items]")
        return kept
    if isinstance(value, dict):
        # Maps are the result's own records (dozens of named fields): only a map far
        # longer than any record (free-form plugin metadata) loses entries.
        key_limit = max(4 * item_limit, _MIN_KEYS)
        items = list(value.items())
        kept_map = {k: _shrink(v, text_limit, item_limit) for k, v in items[:key_limit]}
        if len(items) > key_limit:
            kept_map["..."] = f"{len(items) - key_limit} more entries"
        return kept_map
    return value


def parse_arguments(arguments: object) -> dict[str, Any]:
    """The call's arguments as a JSON object: ``None`` is ``{}``, a string is parsed as
    strict JSON; anything that is not a plain JSON object is a :class:`ToolError`."""
    if arguments is None:
        return {}
    if isinstance(arguments, (str, bytes, bytearray)):
        if len(arguments) > MAX_ARGUMENTS_CHARS:
            raise ToolError(
                ErrorCode.INVALID_ARGUMENTS,
                f"the arguments are {len(arguments)} characters long; the most is "
                f"{MAX_ARGUMENTS_CHARS}",
            )
        try:
            text = arguments if isinstance(arguments, str) else bytes(arguments).decode("utf-8")
            arguments = parse_strict_json(text)
        except (ValueError, RecursionError) as exc:
            raise ToolError(
                ErrorCode.INVALID_ARGUMENTS,
                f"the arguments are not valid JSON: {clip(exc, 200)}; send a JSON object",
            ) from None
    if not isinstance(arguments, Mapping):
        raise ToolError(
            ErrorCode.INVALID_ARGUMENTS,
            f"the arguments must be a JSON object, got {_json_kind(arguments)}",
        )
    problem = _plain_json_problem(arguments, "arguments", 0)
    if problem is not None:
        raise ToolError(ErrorCode.INVALID_ARGUMENTS, problem)
    return dict(arguments)


def _plain_json_problem(value: Any, where: str, depth: int) -> str | None:
    """Why ``value`` is not plain strict JSON (``None`` when it is)."""
    if depth > MAX_ARGUMENTS_DEPTH:
        return f"{clip(where, 200)} nests deeper than {MAX_ARGUMENTS_DEPTH} levels"
    if value is None or isinstance(value, (bool, str, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{clip(where, 200)} is not a finite number"
    if isinstance(value, list):
        for i, item in enumerate(value):
            problem = _plain_json_problem(item, f"{where}[{i}]", depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{clip(where, 200)} has a key that is not a string ({_json_kind(key)})"
            problem = _plain_json_problem(item, f"{where}.{clip(key, 40)}", depth + 1)
            if problem is not None:
                return problem
        return None
    return f"{clip(where, 200)} is a {_json_kind(value)}, which is not a JSON value"


def _json_kind(value: object) -> str:
    kinds = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return kinds.get(type(value), f"Python {type(value).__name__}")
