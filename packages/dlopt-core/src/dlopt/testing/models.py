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
