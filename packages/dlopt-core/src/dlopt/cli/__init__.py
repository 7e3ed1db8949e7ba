"""The ``dlopt`` command line (console script ``dlopt = "dlopt.cli:main"``).

``app`` (the parser and ``main``) and one module per command: ``cmd_select``,
``cmd_report``, ``cmd_export``, ``cmd_providers``, ``cmd_inspect``, ``cmd_cache``,
``cmd_fleet`` and ``cmd_serve`` (with ``serve_app``, its Ray Serve application); what
they share: ``common`` (exit codes, the target, provider chatter kept out of tables),
``console`` (the table printer), ``preflight`` (everything a command was told, checked
before work), ``objectives`` (``--objective`` and its budgets), ``input_files`` (inputs
from ``.npz`` or safetensors) and ``demo`` (the built-in demo model and workload).
"""

from __future__ import annotations

from dlopt.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
