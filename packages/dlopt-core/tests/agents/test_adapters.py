"""OpenAI-style function definitions and MCP tool definitions, as plain dicts."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from dlopt.agents import TOOL_NAMES, adapters
from dlopt.agents.schemas import OPTIMIZE, READ_REPORT


def test_openai_chat_tools_are_function_definitions(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    tools = adapters.openai_tools(toolkit)
    assert [t["function"]["name"] for t in tools] == list(TOOL_NAMES)
    for tool in tools:
        assert set(tool) == {"type", "function"} and tool["type"] == "function"
        function = tool["function"]
        assert set(function) == {"name", "description", "parameters"}
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", function["name"])
        parameters = function["parameters"]
        assert parameters["type"] == "object" and "$schema" not in parameters
        jsonschema.Draft202012Validator.check_schema(parameters)
    json.dumps(tools, allow_nan=False)


def test_openai_responses_tools_are_flat(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    tools = adapters.openai_tools(toolkit, api="responses")
    assert [t["name"] for t in tools] == list(TOOL_NAMES)
    assert all(t["type"] == "function" and t["strict"] is False for t in tools)
    with pytest.raises(ValueError, match="'chat' or 'responses'"):
        adapters.openai_tools(toolkit, api="assistants")  # type: ignore[arg-type]


def test_an_openai_tool_call_goes_straight_to_invoke(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    # What a chat completion hands back: the name and the arguments as JSON text.
    call = {"name": OPTIMIZE, "arguments": '{"workload": "w", "min_speedup": 1.05}'}
    result = toolkit.invoke(call["name"], call["arguments"])
    assert result["ok"] and result["result"]["selected_plan"] == "fast"


def test_mcp_tools_have_input_and_output_schemas_and_annotations(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    definitions = adapters.mcp_tools(toolkit)
    assert [d["name"] for d in definitions] == list(TOOL_NAMES)
    for definition in definitions:
        assert definition["inputSchema"]["type"] == "object"
        assert definition["outputSchema"]["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(definition["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(definition["outputSchema"])
        annotations = definition["annotations"]
        assert annotations["openWorldHint"] is False
        assert annotations["readOnlyHint"] is (definition["name"] != OPTIMIZE)
    json.dumps(definitions, allow_nan=False)


def test_mcp_call_results_carry_the_envelope_as_structured_content(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    output = jsonschema.Draft202012Validator(adapters.mcp_tools(toolkit)[0]["outputSchema"])
    ok = adapters.mcp_call_result(toolkit.invoke(OPTIMIZE, {"workload": "w"}))
    failed = adapters.mcp_call_result(toolkit.invoke(READ_REPORT, {"workload": "nope"}))
    for reply, is_error in ((ok, False), (failed, True)):
        assert reply["isError"] is is_error
        output.validate(reply["structuredContent"])
        (content,) = reply["content"]
        assert content["type"] == "text"
        assert json.loads(content["text"]) == reply["structuredContent"]


def test_the_adapters_import_no_agent_framework() -> None:
    source = Path(adapters.__file__).read_text(encoding="utf-8")
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert all(
        name == "__future__" or name.startswith(("dlopt", "copy", "collections", "typing"))
        for name in imported
    )
    code = (
        "import sys; import dlopt.agents.adapters; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'openai', 'mcp'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
