"""Every JSON dlopt writes goes through ``dlopt.platform.serialization`` (one normaliser, strict)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import torch

import dlopt
from dlopt.platform.serialization import dumps, strict_jsonable

#: Modules that call the json module's writers for another purpose than writing a file.
NOT_WRITERS = {
    "platform/serialization.py": "the one JSON path itself",
    "testing/provider_suite.py": "the contract suite checks a plugin's own values with the stdlib",
    "platform/tree.py": "quotes a dict key inside an output path",
    "cache/key.py": "canonical JSON of a cache key's ingredients is hashed, never written",
}


def test_torch_dtypes_are_written_by_their_names() -> None:
    assert strict_jsonable(torch.float16) == "float16"
    assert strict_jsonable({"dtype": torch.bfloat16}) == {"dtype": "bfloat16"}


def test_sets_become_sorted_lists() -> None:
    assert strict_jsonable({torch.float32, torch.float16}) == ["float16", "float32"]
    assert strict_jsonable(frozenset({3, 1, 2})) == [1, 2, 3]
    # Mixed kinds sort by their JSON text, so the order never depends on hashing.
    assert strict_jsonable({"b", 1, None}) == ["b", 1, None]


def test_dumps_writes_free_form_values_strictly() -> None:
    assert json.loads(dumps({"plan": "x", "options": [{"default": 2}]})) == {
        "plan": "x",
        "options": [{"default": 2}],
    }


def test_no_module_writes_json_around_the_serializer() -> None:
    root = Path(dlopt.__file__).parent
    writers = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name in NOT_WRITERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in {"dumps", "dump"}
                and isinstance(node.value, ast.Name)
                and node.value.id == "json"
            ):
                writers.append(f"{name}:{node.lineno}")
    assert writers == [], "write JSON with dlopt.platform.serialization.dumps / strict_jsonable"
