"""The suite's nine workloads: random weights, eval mode, a fixed seed, nothing downloaded.

Each builder returns ``(model, cases)`` where ``cases`` is a tuple of
``(name, args, kwargs, weight)``: the tools under test wrap them in their own workload
types. Every process that builds a workload gets the same weights and inputs (the seed
is set before the model and the inputs are drawn). torchvision and transformers are
imported inside their builders, so a missing package fails only its workloads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .._common import Mlp

Case = tuple[str, tuple[Any, ...], dict[str, Any], float]
Workload = tuple[nn.Module, tuple[Case, ...]]
SEED = 0


def _images(batch: int, size: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=generator)


def conv_net() -> Workload:
    """dlopt's demo conv net (64x64 images) at batch 8."""
    from dlopt.cli.demo import build_demo_model

    gen = torch.Generator().manual_seed(SEED + 1)
    return build_demo_model(seed=SEED), (("batch-8", (_images(8, 64, gen),), {}, 1.0),)


def conv_net_weighted() -> Workload:
    """The demo conv net on its traffic mix: batch 1 (70), 8 (25) and 32 (5)."""
    from dlopt.cli.demo import build_demo_model

    gen = torch.Generator().manual_seed(SEED + 1)
    cases = tuple(
        (f"batch-{b}", (_images(b, 64, gen),), {}, w) for b, w in ((1, 70.0), (8, 25.0), (32, 5.0))
    )
    return build_demo_model(seed=SEED), cases


def mlp() -> Workload:
    """The MLP 512-2048-512 at batch 32."""
    torch.manual_seed(SEED)
    model = Mlp().eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    return model, (("batch-32", (torch.randn(32, 512, generator=gen),), {}, 1.0),)


def encoder() -> Workload:
    """``nn.TransformerEncoderLayer`` (d=256, 4 heads, MLP 1024) at batch 8 x 128 tokens."""
    torch.manual_seed(SEED)
    model = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    return model, (("batch-8", (torch.randn(8, 128, 256, generator=gen),), {}, 1.0),)


class LstmTagger(nn.Module):
    """A 2-layer LSTM over feature frames (128 in, 256 hidden) and a linear head tagging
    every step with one of 32 labels: a recurrent mix, which the prior table has no row
    for."""

    def __init__(self, features: int = 128, hidden: int = 256, labels: int = 32) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, labels)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        steps, _ = self.lstm(frames)
        return self.head(steps)


def lstm_tagger() -> Workload:
    """:class:`LstmTagger` at batch 4 x 32 steps."""
    torch.manual_seed(SEED)
    model = LstmTagger().eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    return model, (("batch-4", (torch.randn(4, 32, 128, generator=gen),), {}, 1.0),)


#: Random batches the torchvision models' BatchNorm statistics are estimated on.
CALIBRATION_BATCHES = 4


def _torchvision(name: str, batch: int) -> Workload:
    import torchvision

    torch.manual_seed(SEED)
    model = getattr(torchvision.models, name)(weights=None)
    _estimate_batch_norm_statistics(model, torch.Generator().manual_seed(SEED + 2))
    gen = torch.Generator().manual_seed(SEED + 1)
    return model.eval(), ((f"batch-{batch}", (_images(batch, 224, gen),), {}, 1.0),)


def _estimate_batch_norm_statistics(model: nn.Module, generator: torch.Generator) -> None:
    """Give every BatchNorm the running statistics of its real input, as training would.

    Freshly initialised, a BatchNorm in eval mode normalises with mean 0 and variance 1,
    whatever its input: through mobilenet_v2's depth the activations shrink to ~1e-9
    (efficientnet_b0's to ~1e-14), a signal no trained model serves, on which int8
    activation scales underflow to zero. Estimated on random images (cumulative average,
    ``momentum=None``), every layer's activations keep unit scale, as in a trained net.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(CALIBRATION_BATCHES):
            model(_images(8, 224, generator))
    for norm, momentum in zip(norms, momenta, strict=True):
        norm.momentum = momentum
    model.eval()


def bert() -> Workload:
    """A small random ``BertModel`` at batch 4 x 128 tokens, the last quarter of two rows
    padded (masked)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(SEED)
    config = BertConfig(
        vocab_size=8192,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=256,
    )
    model = BertModel(config).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(0, config.vocab_size, (4, 128), generator=gen)
    attention_mask = torch.ones(4, 128, dtype=torch.long)
    attention_mask[2:, 96:] = 0
    kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
    return model, (("batch-4", (), kwargs, 1.0),)


#: key -> (title, builder), in the order the suite runs them (cheapest first).
WORKLOADS: dict[str, tuple[str, Callable[[], Workload]]] = {
    "mlp": ("MLP 512-2048-512, batch 32", mlp),
    "convnet": ("demo conv net, batch 8", conv_net),
    "convnet_weighted": ("demo conv net, batches 1/8/32 at 70/25/5", conv_net_weighted),
    "lstm_tagger": ("2-layer LSTM tagger (128 -> 256), 4 x 32 steps", lstm_tagger),
    "encoder": ("TransformerEncoderLayer d256, 8 x 128 tokens", encoder),
    "bert": ("BertModel (4 layers, d256), 4 x 128 tokens", bert),
    "mobilenet_v2": ("mobilenet_v2, batch 8", lambda: _torchvision("mobilenet_v2", 8)),
    "efficientnet_b0": ("efficientnet_b0, batch 4", lambda: _torchvision("efficientnet_b0", 4)),
    "resnet50": ("resnet50, batch 1", lambda: _torchvision("resnet50", 1)),
}


def build(key: str) -> Workload:
    """The workload ``key`` (one of :data:`WORKLOADS`), model in eval mode."""
    if key not in WORKLOADS:
        raise KeyError(f"unknown workload {key!r}; choose from {', '.join(WORKLOADS)}")
    model, cases = WORKLOADS[key][1]()
    return model.eval(), cases
