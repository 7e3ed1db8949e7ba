"""The built-in demo: a small residual conv net and a two-case serving workload.

``dlopt select --demo`` races it so a fresh install shows the whole job in a minute or two.
It has what real image models have (Conv-BN pairs, residual adds, pooling, a linear head),
so FX folding, channels-last, compilers and ONNX Runtime all have something to win.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlopt.settings.workload import WorkloadCase, WorkloadProfile


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class DemoNet(nn.Module):
    """A ResNet-style classifier for 3x64x64 images, 10 classes."""

    def __init__(self, width: int = 32, blocks: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
        )
        self.blocks = nn.Sequential(*(_ResidualBlock(width) for _ in range(blocks)))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(self.blocks(self.stem(x))).flatten(1)
        return self.head(self.dropout(y))


#: The demo model as a factory reference, for an isolated worker to rebuild it from.
DEMO_FACTORY = "dlopt.cli.demo:build_demo_model"


def build_demo_model(seed: int = 0) -> DemoNet:
    """The demo model in eval mode, with deterministic, non-trivial BatchNorm statistics."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = DemoNet()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                assert module.running_mean is not None and module.running_var is not None
                module.running_mean.normal_(0.0, 0.1, generator=generator)
                module.running_var.uniform_(0.5, 1.5, generator=generator)
    return model.eval()


def demo_workload(seed: int = 1) -> WorkloadProfile:
    """Batch 1 (most traffic) and batch 8 (bursts) of 3x64x64 images."""
    generator = torch.Generator().manual_seed(seed)
    return WorkloadProfile(
        name="demo-image-serving",
        expected_calls=100_000,
        cases=(
            WorkloadCase(
                "batch-1", args=(torch.randn(1, 3, 64, 64, generator=generator),), weight=70
            ),
            WorkloadCase(
                "batch-8", args=(torch.randn(8, 3, 64, 64, generator=generator),), weight=30
            ),
        ),
    )


def demo_convnet() -> tuple[DemoNet, WorkloadProfile]:
    """The demo model with its workload: the ``dlopt.models`` entry ``demo_convnet``."""
    return build_demo_model(), demo_workload()


class DemoMLP(nn.Module):
    """A small MLP (64 -> 256 -> 256 -> 10): a quick model for fleet smoke runs."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def demo_mlp() -> tuple[DemoMLP, WorkloadProfile]:
    """A seeded MLP and batch-1/batch-16 traffic: the ``dlopt.models`` entry ``demo_mlp``."""
    torch.manual_seed(0)
    model = DemoMLP().eval()
    generator = torch.Generator().manual_seed(1)
    return model, WorkloadProfile(
        name="demo-mlp",
        cases=(
            WorkloadCase("batch-1", args=(torch.randn(1, 64, generator=generator),), weight=80),
            WorkloadCase("batch-16", args=(torch.randn(16, 64, generator=generator),), weight=20),
        ),
    )


def serve_one_request(decision: Any, model: nn.Module, workload: WorkloadProfile) -> str:
    """Serve one fresh request the way the README serves it: the input made, and the
    decision called, inside ``torch.inference_mode()``; a line that says how it went."""
    shape = tuple(workload.cases[-1].args[0].shape)
    with torch.inference_mode():
        x = torch.randn(shape, generator=torch.Generator().manual_seed(7))
        served = decision(x)
        expected = model(x)
    difference = float((served.float() - expected).abs().max())
    return (
        f"served a fresh request {list(shape)} inside torch.inference_mode() with "
        f"{decision.selected_plan}: max |difference| from eager fp32 {difference:.2g}"
    )
