"""The published tool schemas: valid JSON Schema, closed, bounded, and their examples validate."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dlopt.agents import RESULT_SCHEMA, TOOL_NAMES, ToolkitLimits
from dlopt.agents.schemas import OPTIMIZE, ToolCaps, tool_schemas

DOCS = Path(__file__).resolve().parents[4] / "docs" / "agents.md"
CAPS = ToolCaps(
    max_time_s=5.0, min_rounds=3, max_rounds=12, min_speedup_floor=1.0, min_speedup_ceiling=10.0
)


def _objects(schema: Any) -> list[dict[str, Any]]:
    """Every sub-schema that describes a JSON object."""
    found = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for value in schema.values():
            found += _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            found += _objects(value)
    return found


def documented_calls() -> list[dict[str, Any]]:
    """Every ``{"tool": ..., "arguments": ...}`` JSON block of docs/agents.md."""
    blocks = re.findall(r"```json\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    calls = [json.loads(block) for block in blocks]
    return [c for c in calls if isinstance(c, dict) and {"tool", "arguments"} <= set(c)]


def test_there_are_exactly_four_tools_in_publication_order() -> None:
    assert list(tool_schemas(CAPS)) == list(TOOL_NAMES)
    assert len(TOOL_NAMES) == 4


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_each_schema_is_valid_json_schema(name: str) -> None:
    schema = tool_schemas(CAPS)[name]
    jsonschema.validators.validator_for(schema).check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["type"] == "object" and schema["title"] and schema["description"]


def test_the_result_envelope_is_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(RESULT_SCHEMA)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_object_in_a_schema_is_closed(name: str) -> None:
    objects = _objects(tool_schemas(CAPS)[name])
    assert objects
    assert all(o.get("additionalProperties") is False for o in objects)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_each_schema_example_validates(name: str) -> None:
    schema = tool_schemas(CAPS)[name]
    assert schema["examples"]
    for example in schema["examples"]:
        jsonschema.validate(example, schema, cls=jsonschema.Draft202012Validator)


def test_each_documented_example_call_validates(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    schemas = toolkit.tool_schemas()
    calls = documented_calls()
    assert {c["tool"] for c in calls} == set(TOOL_NAMES), "docs/agents.md shows every tool"
    for call in calls:
        jsonschema.validate(
            call["arguments"], schemas[call["tool"]], cls=jsonschema.Draft202012Validator
        )


def test_strings_and_arrays_are_bounded() -> None:
    optimize = tool_schemas(CAPS)[OPTIMIZE]["properties"]
    assert optimize["workload"]["maxLength"] == 100
    for key in ("include", "exclude"):
        assert optimize[key]["maxItems"] <= 64 and optimize[key]["uniqueItems"] is True
        assert optimize[key]["items"]["maxLength"] == 100


def test_the_hosts_caps_are_the_schemas_ranges(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit(ToolkitLimits(max_measure_time_s=2.5, max_rounds=8))
    budget = toolkit.tool_schemas()[OPTIMIZE]["properties"]["measurement"]["properties"]
    assert budget["max_time_s"]["maximum"] == 2.5
    assert budget["max_rounds"] == {**budget["max_rounds"], "minimum": 3, "maximum": 8}
    validator = jsonschema.Draft202012Validator(toolkit.tool_schemas()[OPTIMIZE])
    assert not validator.is_valid({"workload": "w", "measurement": {"max_time_s": 2.6}})
    assert validator.is_valid({"workload": "w", "measurement": {"max_time_s": 2.5}})


def test_without_host_caps_the_optimizer_policy_is_the_cap(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit(max_time_s=4.0, max_rounds=9)
    budget = toolkit.tool_schemas()[OPTIMIZE]["properties"]["measurement"]["properties"]
    assert (budget["max_time_s"]["maximum"], budget["max_rounds"]["maximum"]) == (4.0, 9)


def test_tool_schemas_returns_a_copy(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    toolkit.tool_schemas()[OPTIMIZE]["properties"].clear()
    assert "workload" in toolkit.tool_schemas()[OPTIMIZE]["properties"]
