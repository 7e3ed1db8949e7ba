"""Provider probes answered once per environment, kept in the user cache directory.

A probe often imports its SDK to see what it offers (a second or two for TorchAO), and
its answer changes only when the environment does: a package installed or upgraded, the
CPU, a driver or device. So :meth:`dlopt.contract.provider.Provider.probe` keeps each
answer under a key of the provider, the target, the plan's options and the
:func:`~dlopt.platform.machine.environment_fingerprint`; a probe in a later process on an
unchanged environment reads it back instead of probing (a plan that is then not built
never imports its SDK). Any change of the environment is a new key: the probe runs again.

``DLOPT_PROBE_CACHE=off`` probes every time (tests do). The entries are strict JSON,
read with a size cap from regular files only, every field type-checked; an entry that
fails is set aside (named once) and the provider probed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import Any

from dlopt.platform.fileio import (
    atomic_write_bytes,
    read_user_cache_entry,
    set_aside,
    user_cache_dir,
)
from dlopt.platform.machine import environment_fingerprint
from dlopt.platform.serialization import dumps, parse_strict_json

#: Set to ``off`` (or ``0``) to probe every time.
PROBE_CACHE_ENV = "DLOPT_PROBE_CACHE"
#: The largest entry read back.
MAX_ENTRY_BYTES = 256 * 1024
#: The layout of an entry; another layout is probed again.
ENTRY_FORMAT = 1


def enabled() -> bool:
    """Whether probe answers are kept and read back (``DLOPT_PROBE_CACHE``)."""
    return os.environ.get(PROBE_CACHE_ENV, "on").strip().lower() not in ("off", "0", "no")


def entry_key(provider: object, target: Any, options: Any) -> str:
    """The key of one probe answer: the provider (its class and name), the target, the
    plan's options and the environment."""
    kind = type(provider)
    parts = [
        f"{kind.__module__}.{kind.__qualname__}",
        str(getattr(provider, "name", "")),
        repr(target),
        repr(options),
        environment_fingerprint(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def read(key: str) -> dict[str, Any] | None:
    """The kept answer of ``key`` as its JSON fields, or ``None``. An entry that is not a
    regular file of strict JSON with every field of its type (``available`` a bool,
    ``reason`` text...) is set aside, named once, and the provider probed again: a kept
    answer is never trusted on its form alone."""
    if not enabled():
        return None
    path = user_cache_dir() / "probes" / f"{key}.json"
    raw = read_user_cache_entry(path, MAX_ENTRY_BYTES)
    if raw is None:
        return None
    try:
        data = parse_strict_json(raw.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        set_aside(path, f"not strict JSON: {exc}")
        return None
    problem = _entry_problem(data)
    if problem is not None:
        set_aside(path, problem)
        return None
    answer: dict[str, Any] = data["availability"]
    return answer


def _is_text_map(value: Any, optional_values: bool = False) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and (isinstance(v, str) or (optional_values and v is None))
        for k, v in value.items()
    )


def _entry_problem(data: Any) -> str | None:
    """What is wrong with a kept entry's form (``None``: nothing)."""
    if not isinstance(data, dict) or data.get("format") != ENTRY_FORMAT:
        return f"not a probe entry of format {ENTRY_FORMAT}"
    answer = data.get("availability")
    if not isinstance(answer, dict):
        return "no availability"
    checks = {
        "available": lambda v: isinstance(v, bool),
        "reason": lambda v: v is None or isinstance(v, str),
        "install_hint": lambda v: v is None or isinstance(v, str),
        "sdk_versions": lambda v: _is_text_map(v, optional_values=True),
        "details": lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
    }
    unknown = sorted(set(answer) - set(checks))
    if unknown:
        return f"unknown field(s) {', '.join(unknown)}"
    for name, ok in checks.items():
        if name in answer and not ok(answer[name]):
            return f"{name} is {answer[name]!r:.60}, not of its type"
    if "available" not in answer:
        return "no 'available' field"
    return None


def write(key: str, availability: dict[str, Any]) -> None:
    """Keep an answer (best effort: a cache that cannot be written only costs time)."""
    if not enabled():
        return
    text = dumps({"format": ENTRY_FORMAT, "availability": availability}, indent=None)
    with contextlib.suppress(OSError, ValueError):
        atomic_write_bytes(user_cache_dir() / "probes" / f"{key}.json", text.encode())
