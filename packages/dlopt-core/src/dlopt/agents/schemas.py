"""The published shape of the agent tools: one JSON Schema per tool, and the result envelope.

Every tool takes one JSON object. The schemas are JSON Schema (draft 2020-12), closed
(``additionalProperties: false``) and bounded (string lengths, array sizes, number ranges),
so an argument the host did not allow is refused before anything runs. The ranges a host
sets (the measurement budget an agent may ask for) are filled in by
:func:`tool_schemas` from :class:`ToolCaps`.

Every result, success or error, has the envelope :data:`RESULT_SCHEMA` describes::

    {"ok": true,  "tool": "dlopt_optimize", "truncated": false, "result": {...}}
    {"ok": false, "tool": "dlopt_optimize", "truncated": false,
     "error": {"code": "unknown_workload", "message": "...", "details": {...}}}
"""

from __future__ import annotations

import copy
from typing import Any

from attrs import frozen

from dlopt.vocabulary import Objective, TextEnum

#: The JSON Schema dialect of every published schema.
DIALECT = "https://json-schema.org/draft/2020-12/schema"

INSPECT_RUNTIME = "dlopt_inspect_runtime"
LIST_WORKLOADS = "dlopt_list_workloads"
OPTIMIZE = "dlopt_optimize"
READ_REPORT = "dlopt_read_report"
#: The closed set of tools, in the order they are published.
TOOL_NAMES: tuple[str, ...] = (INSPECT_RUNTIME, LIST_WORKLOADS, OPTIMIZE, READ_REPORT)

#: A workload, plan or candidate name as the tools take it (the rule of ``dlopt.platform.names``).
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}$"
#: The most plan names one ``include``/``exclude`` list may hold.
MAX_PLAN_NAMES = 64
#: The largest ``expected_calls`` an agent may state.
MAX_EXPECTED_CALLS = 10**12
#: The largest latency budget an agent may state (an hour per call).
MAX_LATENCY_MS = 3.6e6
#: The largest batch size and the most batch sizes one optimize call may race.
MAX_AGENT_BATCH_SIZE = 4096
MAX_BATCH_SIZES = 16


class ErrorCode(TextEnum):
    """The ``code`` of an error result: what went wrong, for an agent to act on."""

    #: The tool name is not one of :data:`TOOL_NAMES`.
    UNKNOWN_TOOL = "unknown_tool"
    #: The arguments are not a JSON object or do not match the tool's schema.
    INVALID_ARGUMENTS = "invalid_arguments"
    #: No workload of that name is registered (``dlopt_list_workloads`` lists them).
    UNKNOWN_WORKLOAD = "unknown_workload"
    #: The report has no candidate of that name.
    UNKNOWN_CANDIDATE = "unknown_candidate"
    #: The workload has not been optimized yet: there is no report to read.
    NO_DECISION = "no_decision"
    #: An optimize call with other settings is running for this workload.
    BUSY = "busy"
    #: The host cancelled the call.
    CANCELLED = "cancelled"
    #: The call ran past the host's time limit for one optimize call.
    TIME_LIMIT = "time_limit"
    #: The host's budget of races for this toolkit is spent.
    BUDGET_EXHAUSTED = "budget_exhausted"
    #: The selection refused its configuration (e.g. a plan name that matches no plan).
    CONFIGURATION_ERROR = "configuration_error"
    #: The selection could not make a decision (the reference cannot serve, ...).
    OPTIMIZATION_FAILED = "optimization_failed"
    #: The result could not be made small enough for the host's size limit.
    RESULT_TOO_LARGE = "result_too_large"
    #: Something failed that no argument could have caused; the message says what.
    INTERNAL_ERROR = "internal_error"


@frozen
class ToolCaps:
    """The ranges the host allows in optimize arguments (filled into the schemas)."""

    max_time_s: float
    min_rounds: int
    max_rounds: int
    min_speedup_floor: float
    min_speedup_ceiling: float


def _name(description: str) -> dict[str, Any]:
    return {"type": "string", "pattern": NAME_PATTERN, "maxLength": 100, "description": description}


def _names(description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "items": _name("a plan name, as dlopt_inspect_runtime lists it"),
        "maxItems": MAX_PLAN_NAMES,
        "uniqueItems": True,
        "description": description,
    }


def _no_arguments(title: str, description: str) -> dict[str, Any]:
    return {
        "$schema": DIALECT,
        "title": title,
        "description": description,
        "type": "object",
        "properties": {},
        "additionalProperties": False,
        "examples": [{}],
    }


def tool_schemas(caps: ToolCaps) -> dict[str, dict[str, Any]]:
    """The input JSON Schema of every tool, by tool name, with the host's ranges filled in.

    Each schema carries its ``title``, ``description`` (what the tool does, for the model)
    and ``examples`` (calls that validate). A fresh copy each time: callers may edit it.
    """
    inspect = _no_arguments(
        "Inspect the runtime",
        "Describe the machine dlopt optimizes on: device, torch and Python versions, CPU, "
        "and every installed provider (plan) with whether it is available here and why not. "
        "Plan names listed here are the names dlopt_optimize takes in include/exclude.",
    )
    workloads = _no_arguments(
        "List workloads",
        "List the workloads the host registered for optimization: name, description, the "
        "input signature of each case with its traffic weight, whether an optimize call is "
        "running, and the latest decision if there is one.",
    )
    optimize = {
        "$schema": DIALECT,
        "title": "Optimize a workload",
        "description": (
            "Race every eligible inference plan on one registered workload and select the "
            "fastest plan whose outputs match eager fp32; the native baseline is kept unless "
            "a challenger is faster by at least min_speedup with confidence. Returns the "
            "decision summary; dlopt_read_report gives each candidate's evidence. Runs one "
            "race at a time; a call for a workload whose race is running returns that race's "
            "result."
        ),
        "type": "object",
        "properties": {
            "workload": _name("the name of a registered workload (see dlopt_list_workloads)"),
            "objective": {
                "type": "string",
                "enum": [o.value for o in Objective],
                "description": (
                    "the objective. steady_state_latency: traffic-weighted mean "
                    "latency; lifecycle_latency: setup + first calls + expected_calls x "
                    "steady latency; min_latency: the fastest plan at batch 1; "
                    "max_throughput: the (plan, batch size) serving the most items per "
                    "second, within the latency budget when one is given"
                ),
            },
            "max_latency_ms": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_LATENCY_MS,
                "description": (
                    "latency budget: the mean milliseconds per call (max_throughput: per "
                    "call at the chosen batch size, checked with an upper confidence bound)"
                ),
            },
            "max_p99_latency_ms": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_LATENCY_MS,
                "description": "latency budget on the p99 milliseconds per call",
            },
            "batch_sizes": {
                "type": "array",
                "items": {"type": "integer", "minimum": 1, "maximum": MAX_AGENT_BATCH_SIZE},
                "minItems": 1,
                "maxItems": MAX_BATCH_SIZES,
                "uniqueItems": True,
                "description": (
                    "max_throughput only: the batch sizes to race (default: the workload's "
                    "own, else 1, 2, 4, 8, 16, 32); the workload must be one request"
                ),
            },
            "min_speedup": {
                "type": "number",
                "minimum": caps.min_speedup_floor,
                "maximum": caps.min_speedup_ceiling,
                "description": (
                    "the speedup over the baseline a challenger must show with confidence "
                    "to be selected (1.05 = 5% faster)"
                ),
            },
            "expected_calls": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_EXPECTED_CALLS,
                "description": "how many requests the deployment serves (lifecycle objective)",
            },
            "include": _names("race only these plans (the reference always races)"),
            "exclude": _names("never race these plans"),
            "measurement": {
                "type": "object",
                "description": "a measurement budget no larger than the host allows",
                "properties": {
                    "max_time_s": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "maximum": caps.max_time_s,
                        "description": "seconds of measurement (build time not included)",
                    },
                    "max_rounds": {
                        "type": "integer",
                        "minimum": caps.min_rounds,
                        "maximum": caps.max_rounds,
                        "description": "the most measurement rounds",
                    },
                },
                "additionalProperties": False,
            },
        },
        "required": ["workload"],
        "additionalProperties": False,
        "examples": [
            {"workload": "resnet50-b8"},
            {
                "workload": "resnet50-b8",
                "min_speedup": caps.min_speedup_floor,
                "measurement": {"max_time_s": caps.max_time_s, "max_rounds": caps.max_rounds},
            },
            {"workload": "resnet50-b8", "exclude": ["native_fp16"]},
            {
                "workload": "resnet50-b1",
                "objective": "max_throughput",
                "max_p99_latency_ms": 20,
                "batch_sizes": [1, 2, 4, 8],
            },
        ],
    }
    report = {
        "$schema": DIALECT,
        "title": "Read a workload's report",
        "description": (
            "Read the report of a workload's latest decision: without candidate, the "
            "summary (selected plan, reason, every candidate's status, latency and speedup); "
            "with candidate, that candidate's full evidence (validation per case, timings, "
            "memory, the error that rejected it)."
        ),
        "type": "object",
        "properties": {
            "workload": _name("the name of a registered workload"),
            "candidate": _name("a candidate (plan) name from the summary"),
        },
        "required": ["workload"],
        "additionalProperties": False,
        "examples": [
            {"workload": "resnet50-b8"},
            {"workload": "resnet50-b8", "candidate": "eager_fp32"},
        ],
    }
    return copy.deepcopy(
        {
            INSPECT_RUNTIME: inspect,
            LIST_WORKLOADS: workloads,
            OPTIMIZE: optimize,
            READ_REPORT: report,
        }
    )


_ENVELOPE_COMMON: dict[str, Any] = {
    "tool": {"type": "string", "maxLength": 100},
    "truncated": {
        "type": "boolean",
        "description": "true when long texts or lists in the result were shortened",
    },
}

#: The envelope of every result (success or error).
RESULT_SCHEMA: dict[str, Any] = {
    "$schema": DIALECT,
    "title": "dlopt tool result",
    "oneOf": [
        {
            "type": "object",
            "properties": {"ok": {"const": True}, **_ENVELOPE_COMMON, "result": {"type": "object"}},
            "required": ["ok", "tool", "truncated", "result"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "ok": {"const": False},
                **_ENVELOPE_COMMON,
                "error": {
                    "type": "object",
                    "properties": {
                        "code": {"type": "string", "enum": [c.value for c in ErrorCode]},
                        "message": {"type": "string"},
                        "details": {"type": "object"},
                    },
                    "required": ["code", "message"],
                    "additionalProperties": False,
                },
            },
            "required": ["ok", "tool", "truncated", "error"],
            "additionalProperties": False,
        },
    ],
}
