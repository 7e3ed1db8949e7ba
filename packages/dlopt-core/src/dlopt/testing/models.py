"""Small models for tests: structured outputs, kwargs, masks."""

from __future__ import annotations

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


class SmallConvNet(torch.nn.Module):
    """Conv (3 -> 8) + BatchNorm + ReLU, pooled, then a linear head (8 -> 5): the smallest
    model that image plans (channels-last, int8 convolutions, Conv-BN folding) change."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


class Elementwise(torch.nn.Module):
    """No weights and no op that autocast or a quantizer lowers: a reduced-precision plan
    of it computes exactly what fp32 does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2 + 1
