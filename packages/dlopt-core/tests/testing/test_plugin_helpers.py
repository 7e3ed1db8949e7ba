"""``dlopt.testing.plugins.imports_beyond_plugin_api``: which files of a plugin import
from ``dlopt`` beyond ``dlopt.plugin``."""

from __future__ import annotations

import types
from pathlib import Path

from dlopt.testing.plugins import imports_beyond_plugin_api

#: (file, its text, whether it imports beyond dlopt.plugin)
SOURCES = [
    ("__init__.py", "from dlopt.plugin import Provider\n", False),
    ("good.py", "import dloptish\nfrom dlopt.plugin import (\n    Role,\n)\n", False),
    ("deep.py", "from dlopt.validation import validate_outputs\n", True),
    ("sub/whole.py", "def f():\n    import dlopt\n", True),
    ("sub/aliased.py", "from dlopt import plugin\n", True),
]


def test_only_files_importing_beyond_dlopt_plugin_are_named(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name, text, _ in SOURCES:
        (tmp_path / name).write_text(text, encoding="utf-8")
    package = types.ModuleType("plugin_under_test")
    package.__file__ = str(tmp_path / "__init__.py")
    expected = sorted(name for name, _, deep in SOURCES if deep)
    assert imports_beyond_plugin_api(package) == expected
