"""dlopt plans that export a PyTorch model to ONNX and run it with ONNX Runtime.

Importing this package is cheap: onnxruntime, onnx and onnxscript load on first use.
"""

from __future__ import annotations

from dlopt_onnxruntime.options import OrtInt8Options, OrtInt8StaticOptions, OrtOptions
from dlopt_onnxruntime.probe import (
    EpCheck,
    OrtInstallation,
    check_execution_provider,
    clear_probe_cache,
    detect_installation,
)
from dlopt_onnxruntime.provider import OnnxRuntimeProvider

__all__ = [
    "EpCheck",
    "OnnxRuntimeProvider",
    "OrtInstallation",
    "OrtInt8Options",
    "OrtInt8StaticOptions",
    "OrtOptions",
    "check_execution_provider",
    "clear_probe_cache",
    "detect_installation",
    "usable_execution_providers",
]


def usable_execution_providers() -> dict[str, EpCheck]:
    """Every execution provider the installed build lists, each checked with a tiny session.

    Raises ``ImportError`` when onnxruntime is not importable.
    """
    import onnxruntime as ort

    return {ep: check_execution_provider(ort, ep) for ep in ort.get_available_providers()}
