"""Small models for tests: structured outputs, kwargs, masks, an MLP, a slow eager model."""

from __future__ import annotations

import itertools
import time
from collections import namedtuple
from typing import Any

import torch

LogitsAndFeatures = namedtuple("LogitsAndFeatures", ["logits", "features"])


class StructuredMLP(torch.nn.Module):
    """An MLP (16 -> 8) taking ``x``, an optional ``scale`` and ``mask`` keyword, and
    returning a tensor, a dict with a nested list (``output="dict"``) or a namedtuple
    (``output="namedtuple"``)."""

    def __init__(self, output: str = "tensor", seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)
        )
        self.output = output
        self.eval()

    def forward(self, x: torch.Tensor, scale: float = 1.0, mask: torch.Tensor | None = None) -> Any:
        y = self.body(x) * scale
        if mask is not None:
            y = y.masked_fill(~mask, 0.0)
        if self.output == "dict":
            return {"logits": y, "pooled": [y.mean(dim=1), y.amax(dim=1)]}
        if self.output == "namedtuple":
            return LogitsAndFeatures(y, y.relu())
        return y


class MLP(torch.nn.Module):
    """Linear layers through ``widths`` (``MLP(64, 256, 32)``: 64 -> 256 -> 32) with an
    ``activation`` (``"gelu"`` or ``"relu"``) between them, in eval mode: the model that
    linear and int8 plans change (each Linear exports as one Gemm)."""

    def __init__(self, *widths: int, activation: str = "gelu") -> None:
        super().__init__()
        if len(widths) < 2:
            raise ValueError(f"an MLP needs at least two widths, got {widths}")
        between = {"gelu": torch.nn.GELU, "relu": torch.nn.ReLU}[activation]
        layers: list[torch.nn.Module] = []
        for a, b in itertools.pairwise(widths):
            if layers:
                layers.append(between())
            layers.append(torch.nn.Linear(a, b))
        self.layers = torch.nn.Sequential(*layers)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class SmallConvNet(torch.nn.Module):
    """Conv (3 -> ``channels``) + BatchNorm + ReLU, pooled, then a linear head
    (``channels`` -> ``outputs``): the smallest model that image plans (channels-last,
    int8 convolutions, Conv-BN folding) change. ``batch_norm=False`` leaves the
    normalization out: one convolution and one Linear, the compute layers a quantizer
    counts."""

    def __init__(self, channels: int = 8, outputs: int = 5, batch_norm: bool = True) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(channels) if batch_norm else torch.nn.Identity()
        self.head = torch.nn.Linear(channels, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


#: The line of :class:`ValueBranchNet` a refusal quotes.
VALUE_BRANCH_LINE = "if x.sum() > 0:"


class ValueBranchNet(torch.nn.Module):
    """A small conv net that branches on its input's values: ``if x.sum() > 0:`` the
    features, else three times them. A trace keeps the branch its example took; inputs of
    positive values (every case) take the first."""

    def __init__(self, channels: int = 8, outputs: int = 5) -> None:
        super().__init__()
        self.body = SmallConvNet(channels, outputs, batch_norm=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.body(x)
        return self.body(x) * 3


class Elementwise(torch.nn.Module):
    """No weights and no op that autocast or a quantizer lowers: a reduced-precision plan
    of it computes exactly what fp32 does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2 + 1


class SlowEagerNet(torch.nn.Module):
    """Convolutions (3 -> ``channels``, then ``channels`` -> ``channels``) with ReLU and a
    linear head (to ``2 * channels``) on 3x8x8 images, whose eager calls on contiguous
    inputs also sleep ``sleep_s``.

    It does not sleep while torch.fx, TorchScript, ``torch.export`` or ``torch.compile``
    trace it, nor on channels-last inputs: every traced, exported, compiled or
    channels-last plan wins its race against eager by a wide margin on any machine, so
    a test that needs a plan to win does not depend on the machine's speed. Built in a
    fresh process by its name alone (``from dlopt.testing.models import SlowEagerNet``),
    seeded, in eval mode. ``output="dict"`` returns ``{"logits": ...}``.
    """

    def __init__(
        self,
        channels: int = 8,
        convs: int = 1,
        sleep_s: float = 0.003,
        output: str = "tensor",
        seed: int = 0,
    ) -> None:
        super().__init__()
        torch.manual_seed(seed)
        widths = [3] + [channels] * convs
        self.convs = torch.nn.ModuleList(
            torch.nn.Conv2d(a, b, 3, padding=1) for a, b in itertools.pairwise(widths)
        )
        self.head = torch.nn.Linear(channels * 8 * 8, 2 * channels)
        self.sleep_s = sleep_s
        self.output = output
        self.eval()

    def _sleeps(self, x: torch.Tensor) -> bool:
        if torch.fx._symbolic_trace.is_fx_symbolic_tracing():  # no branching on a Proxy
            return False
        traced = (
            torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()
        )
        return x.is_contiguous() and not traced

    def forward(self, x: torch.Tensor) -> Any:
        if self._sleeps(x):
            time.sleep(self.sleep_s)
        for conv in self.convs:
            x = torch.relu(conv(x))
        y = self.head(x.flatten(1))
        return {"logits": y} if self.output == "dict" else y
