"""A closed, bounded tool surface for agents in the host process.

The host registers workloads (a model and its representative inputs) under plain names;
agents call four JSON tools over them through :meth:`OptimizationAgentToolkit.invoke`.
``toolkit`` (``OptimizationAgentToolkit``: the host's registry and the four tools),
``schemas`` (one JSON Schema per tool, and the result envelope), ``tool_results`` (strict,
bounded JSON results and the checks on what an agent sends), ``views`` (what the tools
show of reports, workloads and providers) and ``adapters`` (the schemas as OpenAI-style
function definitions and MCP tool definitions, plain dicts). See docs/agents.md.
"""

from __future__ import annotations

from dlopt.agents.schemas import RESULT_SCHEMA, TOOL_NAMES, ErrorCode
from dlopt.agents.toolkit import OptimizationAgentToolkit, ToolkitLimits

__all__ = ["RESULT_SCHEMA", "TOOL_NAMES", "ErrorCode", "OptimizationAgentToolkit", "ToolkitLimits"]
