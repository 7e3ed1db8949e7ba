"""What an ONNX Runtime session really runs with, compared with what the plan asked for.

When creating a session with the requested providers raises, ONNX Runtime's Python
``InferenceSession`` prints "EP Error ... Falling back to [...] and retrying" and
creates the session again with fallback providers and *no provider options*. The CUDA EP
then runs without ``user_compute_stream`` or ``use_tf32=0``, while the plan's runner has
turned off the EP's synchronization: its timings and its fp32 claim would both be wrong.
Some EPs also ignore options they do not know. So a plan compares
``session.get_provider_options()`` with its request and is refused with the difference.

Where ONNX Runtime records which EP took which nodes (1.31+, session config
``session.record_ep_graph_assignment_info``), a plan whose EP took no node (a TensorRT
plan that ran entirely on the CUDA EP) is refused too: it would measure another EP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Session config entry that makes ONNX Runtime keep the EP assignment of every node.
ASSIGNMENT_KEY = "session.record_ep_graph_assignment_info"


def normalize_option(value: Any) -> str:
    """An option value as ONNX Runtime reports it back (``True``/``true``/``1`` alike)."""
    text = str(value).strip()
    return {"true": "1", "false": "0"}.get(text.lower(), text)


def options_not_in_effect(
    requested: Iterable[tuple[str, Mapping[str, Any]]],
    effective: Mapping[str, Mapping[str, Any]],
    used: Iterable[str],
) -> dict[str, dict[str, tuple[str, str | None]]]:
    """Per EP the session uses: ``{option: (requested, effective or None)}`` for every
    requested option that the session does not have (missing, or another value)."""
    used = set(used)
    lost: dict[str, dict[str, tuple[str, str | None]]] = {}
    for ep, options in requested:
        if ep not in used:
            continue
        reported = {str(k): normalize_option(v) for k, v in effective.get(ep, {}).items()}
        for key, value in options.items():
            wanted = normalize_option(value)
            got = reported.get(str(key))
            if got != wanted:
                lost.setdefault(ep, {})[str(key)] = (wanted, got)
    return lost


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
