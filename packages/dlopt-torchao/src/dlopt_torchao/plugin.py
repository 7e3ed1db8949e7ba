"""dlopt plugin module for TorchAO: registers one plan per quantization scheme.

Imports nothing heavy: torchao is imported inside ``probe``/``build`` only.
"""

from __future__ import annotations

from typing import Any

from dlopt.plugin import hookimpl
from dlopt_torchao.plans import all_providers

DLOPT_PLUGIN_API_VERSION = "2.1"


@hookimpl
def dlopt_register_providers(register: Any) -> None:
    for provider in all_providers():
        register(provider)
