"""A closed, bounded tool surface for agents in the host process.

The host registers workloads (a model and its representative inputs) under plain names;
agents call four JSON tools over them through :meth:`OptimizationAgentToolkit.invoke`.
:mod:`dlopt.agents.adapters` turns the schemas into OpenAI-style function definitions
and MCP tool definitions (plain dicts). See docs/agents.md.
"""

from __future__ import annotations

from dlopt.agents.schemas import RESULT_SCHEMA, TOOL_NAMES, ErrorCode
from dlopt.agents.toolkit import OptimizationAgentToolkit, ToolkitLimits

__all__ = ["RESULT_SCHEMA", "TOOL_NAMES", "ErrorCode", "OptimizationAgentToolkit", "ToolkitLimits"]
