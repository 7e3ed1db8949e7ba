"""dlopt plugin module for Torch-TensorRT: one plan per precision.

Imports nothing heavy: torch_tensorrt / tensorrt are imported inside ``probe``/``build``.
"""

from __future__ import annotations

from typing import Any

from dlopt.plugin import hookimpl
from dlopt_tensorrt.provider import all_providers

DLOPT_PLUGIN_API_VERSION = "2.1"


@hookimpl
def dlopt_register_providers(register: Any) -> None:
    for provider in all_providers():
        register(provider)
