"""Where plans run: the execution target."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

from attrs import field, frozen

from dlopt.errors import ConfigurationError
from dlopt.platform.config_checks import integer

if TYPE_CHECKING:
    import torch


_DEVICE = re.compile(r"[a-z][a-z0-9_]*(:\d+)?")
#: Device types checked without importing torch (every torch build knows them).
_ALWAYS_KNOWN = {"cpu", "cuda"}


def _device_text(value: object, field_name: str) -> str:
    torch = sys.modules.get("torch")  # a torch.device can only come with torch imported
    if not isinstance(value, str) and not (torch is not None and isinstance(value, torch.device)):
        raise ConfigurationError(
            f"ExecutionTarget.{field_name} must be a device string such as 'cpu' or 'cuda:0' "
            f"(or a torch.device), got {value!r}"
        )
    text = str(value).strip().lower()
    if not _DEVICE.fullmatch(text):
        raise ConfigurationError(
            f"ExecutionTarget.{field_name}: {value!r} is not a device name: write TYPE or "
            "TYPE:INDEX, e.g. 'cpu', 'cuda:1', 'xpu:0', or the name a vendor's torch extension "
            "registers ('npu:0')"
        )
    return text


def torch_knows(device: str) -> bool:
    """Whether this torch (with the extensions imported so far) knows ``device``'s type."""
    if device.partition(":")[0] in _ALWAYS_KNOWN:
        return True
    import torch

    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        return False
    return True


def _normalize_host(value: object) -> str | None:
    return None if value is None else _device_text(value, "host")


@frozen
class ExecutionTarget:
    """Where plans compute, and where the model, the inputs and the plans' calls live.

    ``device``: where plans compute, as a torch device string (``"cpu"``, ``"cuda:0"``,
    ``"xpu:0"``, or the type a vendor's torch extension registers, e.g. ``"npu:0"``).
    ``host``: where the user's model and inputs live and plans are called, when that
    differs from ``device``: an NPU SDK that takes a host model and host tensors races on
    ``ExecutionTarget("npu:0", host="cpu")`` (then ``device`` may be a name torch does not
    know; the plans' own ``synchronize`` and ``device_memory_mb`` cover the device).
    ``threads`` pins the intra-op thread count plans should use on CPU (``None`` keeps
    torch's current setting). Names are checked for form here and against torch by
    :meth:`check_known` before a race.
    """

    device: str = field(default="cpu", converter=lambda v: _device_text(v, "device"))
    threads: int | None = field(
        default=None,
        validator=integer(minimum=1, optional=True, hint=" (None keeps torch's thread count)"),
    )
    host: str | None = field(default=None, converter=_normalize_host)

    def check_known(self) -> None:
        """Refuse a ``device`` torch does not know unless plans are called on a ``host``.

        Not checked at construction, so that a report naming a vendor's device loads on a
        machine without that vendor's extension; the optimizer checks before a race.
        """
        if self.host is None and not torch_knows(self.device):
            kind = self.device_type
            raise ConfigurationError(
                f"torch does not know the device type {kind!r}: import the vendor's torch "
                f"extension (it registers {kind!r}) before making the target, or, for an SDK "
                f"that takes host tensors, race on a host-side target: "
                f"ExecutionTarget({self.device!r}, host='cpu')"
            )

    @property
    def device_type(self) -> str:
        """The kind of device plans compute on, without an index: ``"cpu"``, ``"cuda"``..."""
        return self.device.partition(":")[0]

    @property
    def input_device(self) -> str:
        """Where the model and the inputs live and plans are called: ``host`` or ``device``."""
        return self.host or self.device

    @property
    def is_cuda(self) -> bool:
        """Plans compute on a CUDA device (torch's CUDA work is synchronized for them)."""
        return self.device_type == "cuda"

    def torch_device(self) -> torch.device:
        """The torch device of the model and inputs (:attr:`input_device`)."""
        import torch

        return torch.device(self.input_device)
