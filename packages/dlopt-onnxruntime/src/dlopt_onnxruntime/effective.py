"""What an ONNX Runtime session really runs with, compared with what the plan asked for.

When creating a session with the requested providers raises, ONNX Runtime's Python
``InferenceSession`` prints "EP Error ... Falling back to [...] and retrying" and
creates the session again with fallback providers and *no provider options*. The CUDA EP
then runs without ``user_compute_stream`` or ``use_tf32=0``, while the plan's runner has
turned off the EP's synchronization: its timings and its fp32 claim would both be wrong.
So a plan is refused when ONNX Runtime fell back, and when ``session.get_provider_options()``
reports one of the plan's options with another value. EPs report only some of their
options (the TensorRT EP leaves out its stream and timing-cache path; OpenVINO reports
none): an option not reported is unconfirmed, not refused. The CPU EP takes no provider
options at all, so options given to it are refused as ignored.

Where ONNX Runtime records which EP took which nodes (1.31+, session config
``session.record_ep_graph_assignment_info``), a plan whose EP took no node (a TensorRT
plan that ran entirely on the CUDA EP) is refused too: it would measure another EP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Session config entry that makes ONNX Runtime keep the EP assignment of every node.
ASSIGNMENT_KEY = "session.record_ep_graph_assignment_info"

#: EPs that take no provider options: whatever is passed to them is ignored.
TAKES_NO_OPTIONS = frozenset({"CPUExecutionProvider"})

#: What ONNX Runtime's Python session prints when it retries with fallback providers.
FALLBACK_MARK = "Falling back to"


def fell_back(printed: Iterable[str]) -> bool:
    """Whether ONNX Runtime said it retried the session with fallback providers."""
    return any(FALLBACK_MARK in text for text in printed)


def normalize_option(value: Any) -> str:
    """An option value as ONNX Runtime reports it back (``True``/``true``/``1`` alike)."""
    text = str(value).strip()
    return {"true": "1", "false": "0"}.get(text.lower(), text)


def options_not_in_effect(
    requested: Iterable[tuple[str, Mapping[str, Any]]],
    effective: Mapping[str, Mapping[str, Any]],
    used: Iterable[str],
) -> tuple[dict[str, dict[str, tuple[str, str | None]]], dict[str, list[str]]]:
    """``(lost, unconfirmed)`` for the EPs the session uses.

    ``lost``: ``{ep: {option: (requested, in effect or None)}}``, options reported with
    another value, and every option given to an EP that takes none. ``unconfirmed``:
    ``{ep: [option, ...]}``, options the EP does not report back.
    """
    used = set(used)
    lost: dict[str, dict[str, tuple[str, str | None]]] = {}
    unconfirmed: dict[str, list[str]] = {}
    for ep, options in requested:
        if ep not in used:
            continue
        reported = {str(k): normalize_option(v) for k, v in effective.get(ep, {}).items()}
        for key, value in options.items():
            wanted = normalize_option(value)
            got = reported.get(str(key))
            if got is None and ep not in TAKES_NO_OPTIONS:
                unconfirmed.setdefault(ep, []).append(str(key))
            elif got != wanted:
                lost.setdefault(ep, {})[str(key)] = (wanted, got)
    return lost, unconfirmed


def describe_lost(lost: Mapping[str, Mapping[str, tuple[str, str | None]]]) -> str:
    """``"CUDAExecutionProvider: use_tf32=0 (in effect: 1), ..."``."""
    parts = []
    for ep, options in lost.items():
        items = ", ".join(
            f"{key}={wanted} (in effect: {'unset' if got is None else got})"
            for key, (wanted, got) in options.items()
        )
        parts.append(f"{ep}: {items}")
    return "; ".join(parts)


def node_assignment(session: Any) -> dict[str, int] | None:
    """Nodes per execution provider, when the session recorded them (else ``None``)."""
    getter = getattr(session, "get_provider_graph_assignment_info", None)
    if getter is None:
        return None
    try:
        subgraphs = getter()
    except Exception:  # not recorded (the config entry is off) or not supported
        return None
    counts: dict[str, int] = {}
    for subgraph in subgraphs:
        ep = str(getattr(subgraph, "ep_name", "unknown"))
        counts[ep] = counts.get(ep, 0) + len(list(subgraph.get_nodes()))
    return counts


def assignment_problem(ep: str, assignment: Mapping[str, int] | None) -> str | None:
    """Why a plan for ``ep`` does not measure ``ep`` (it took no node), else ``None``."""
    if not assignment or assignment.get(ep, 0) > 0:
        return None
    total = sum(assignment.values())
    where = ", ".join(f"{name}: {count}" for name, count in sorted(assignment.items()))
    return (
        f"{ep} took none of the model's {total} nodes (they ran on {where}); the plan "
        f"would measure another execution provider, not {ep}"
    )
