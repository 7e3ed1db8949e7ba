"""The toolkit's schemas as OpenAI-style function definitions and MCP tool definitions.

Plain dicts only: nothing here imports an agent framework or an SDK. Hand the lists to
the client you already use; route each call back through
:meth:`~dlopt.agents.OptimizationAgentToolkit.invoke` (an OpenAI tool call's
``arguments`` is JSON text, which ``invoke`` takes as it is)::

    tools = openai_tools(toolkit)                     # chat completions "tools"
    result = toolkit.invoke(call.function.name, call.function.arguments)

    definitions = mcp_tools(toolkit)                  # an MCP server's tools/list
    reply = mcp_call_result(toolkit.invoke(name, arguments))  # its tools/call result
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from dlopt.agents.schemas import OPTIMIZE, RESULT_SCHEMA
from dlopt.agents.tool_results import compact

if TYPE_CHECKING:
    from dlopt.agents.toolkit import OptimizationAgentToolkit

#: Schema keywords that describe the schema document rather than the arguments; some
#: function-calling APIs refuse them, and every client ignores them.
_DOCUMENT_KEYS = ("$schema", "title", "examples")


def parameters_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's input schema as function-calling APIs take it (document keywords removed)."""
    plain = copy.deepcopy(dict(schema))
    for key in _DOCUMENT_KEYS:
        plain.pop(key, None)
    return plain


def openai_tools(
    toolkit: OptimizationAgentToolkit, api: Literal["chat", "responses"] = "chat"
) -> list[dict[str, Any]]:
    """The tools as OpenAI-style function definitions.

    ``api="chat"``: ``{"type": "function", "function": {"name", "description",
    "parameters"}}`` (chat completions and the many APIs that copy it);
    ``api="responses"``: the flat form ``{"type": "function", "name", "description",
    "parameters", "strict": false}``. ``strict`` stays off: strict mode needs every
    property required, and these tools have optional ones.
    """
    if api not in ("chat", "responses"):
        raise ValueError(f"api must be 'chat' or 'responses', got {api!r}")
    tools: list[dict[str, Any]] = []
    for name, schema in toolkit.tool_schemas().items():
        function: dict[str, Any] = {
            "name": name,
            "description": schema["description"],
            "parameters": parameters_schema(schema),
        }
        if api == "chat":
            tools.append({"type": "function", "function": function})
        else:
            tools.append({"type": "function", **function, "strict": False})
    return tools


def mcp_tools(toolkit: OptimizationAgentToolkit) -> list[dict[str, Any]]:
    """The tools as MCP tool definitions (the entries of a ``tools/list`` result).

    Each has ``name``, ``title``, ``description``, ``inputSchema``, ``outputSchema`` (the
    result envelope every call returns as ``structuredContent``) and ``annotations``:
    only ``dlopt_optimize`` changes state (it races plans and keeps a decision), none
    reaches outside the host process.
    """
    output = parameters_schema(RESULT_SCHEMA)
    definitions = []
    for name, schema in toolkit.tool_schemas().items():
        read_only = name != OPTIMIZE
        definitions.append(
            {
                "name": name,
                "title": schema["title"],
                "description": schema["description"],
                "inputSchema": parameters_schema(schema),
                "outputSchema": {"type": "object", **output},
                "annotations": {
                    "title": schema["title"],
                    "readOnlyHint": read_only,
                    "destructiveHint": False,
                    "idempotentHint": read_only,
                    "openWorldHint": False,
                },
            }
        )
    return definitions


def mcp_call_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """An MCP ``tools/call`` result for one toolkit result: the JSON text as content (for
    clients that read text), the object as ``structuredContent``, and ``isError``."""
    return {
        "content": [{"type": "text", "text": compact(dict(result))}],
        "structuredContent": dict(result),
        "isError": not result.get("ok", False),
    }
