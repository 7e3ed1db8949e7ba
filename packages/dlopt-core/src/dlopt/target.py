"""Where plans run: the execution target."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from attrs import field, frozen

from dlopt.config_checks import integer
from dlopt.errors import ConfigurationError

if TYPE_CHECKING:
    import torch


def _normalize_device(value: object) -> str:
    torch = sys.modules.get("torch")  # a torch.device can only come with torch imported
    if not isinstance(value, str) and not (torch is not None and isinstance(value, torch.device)):
        raise ConfigurationError(
            f"ExecutionTarget.device must be a device string such as 'cpu' or 'cuda:0' "
            f"(or a torch.device), got {value!r}"
        )
    text = str(value).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in {"cpu", "cuda", "xpu", "mps", "npu", "hpu"} or (index and not index.isdigit()):
        raise ConfigurationError(
            f"unsupported device {value!r}: use 'cpu', 'cuda', or 'cuda:N' "
            "(private accelerators use their torch device name, e.g. 'npu:0')"
        )
    return text


@frozen
class ExecutionTarget:
    """The device a plan must run on, as a torch device string (``"cpu"``, ``"cuda:0"``).

    ``threads`` pins the intra-op thread count plans should use on CPU (``None`` keeps
    torch's current setting).
    """

    device: str = field(default="cpu", converter=_normalize_device)
    threads: int | None = field(
        default=None,
        validator=integer(minimum=1, optional=True, hint=" (None keeps torch's thread count)"),
    )

    @property
    def device_type(self) -> str:
        """The device kind without an index: ``"cpu"``, ``"cuda"``..."""
        return self.device.partition(":")[0]

    @property
    def is_cuda(self) -> bool:
        return self.device_type == "cuda"

    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device)
