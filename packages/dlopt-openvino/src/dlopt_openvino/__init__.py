"""dlopt plans that convert a PyTorch model to OpenVINO and run it on CPU, GPU or NPU.

Importing this package is cheap: openvino and nncf load on first use (probe, build, load).
"""

from __future__ import annotations

from dlopt_openvino.options import OpenVinoInt8Options, OpenVinoOptions
from dlopt_openvino.probe import DeviceCheck, check_device, clear_probe_cache
from dlopt_openvino.provider import OpenVinoProvider

__all__ = [
    "DeviceCheck",
    "OpenVinoInt8Options",
    "OpenVinoOptions",
    "OpenVinoProvider",
    "check_device",
    "clear_probe_cache",
]
