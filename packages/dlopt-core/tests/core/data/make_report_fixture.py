"""A small report covering every kind of candidate: selected, lost, unavailable, rejected."""

import sys

import torch

from dlopt.testing.models import StructuredMLP

try:
    from dlopt.testing.fake_race import FakeRace
except ImportError:  # before the layout of packages by role
    from dlopt.testing.race import FakeRace

race = FakeRace()
optimizer = race.optimizer(
    race.fake("eager_fp32", 2e-3),
    race.fake("fast", 1e-3),
    race.fake("slow", 3e-3),
    race.fake("native_a", 1.9e-3),
    race.fake("missing_sdk", 1e-3, fail="probe"),
    race.fake("broken_build", 1e-3, fail="build"),
    max_time_s=5.0,
)
torch.manual_seed(0)
decision = optimizer.select_signature(StructuredMLP(), torch.randn(4, 16))
decision.report.save(sys.argv[1])
