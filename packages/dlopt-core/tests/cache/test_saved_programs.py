"""Saved programs in the plan cache: a selected plan whose provider saves programs is
stored with one, a hit serves it (falling back to the provider's rebuild when it cannot
be loaded), and a provider that fails to save still gets its record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from attrs import define, field

from dlopt.cache.comeback import PROGRAM_ARTIFACT, PROGRAM_METADATA_FILE, read_program_metadata
from dlopt.cache.record_store import PlanCache
from dlopt.plugins.contract import BuiltPlan, ProviderContext
from dlopt.testing.fake_race import FakeRace
from dlopt.testing.fakes import FakeProvider

PROGRAM_FILE = "program.txt"


@define
class ProgramFake(FakeProvider):
    """A fake whose "program" is a text file naming the model it serves (held by the test,
    standing in for the compiled weights a real program carries)."""

    served_model: torch.nn.Module | None = None
    save_error: str | None = None
    load_error: str | None = None
    saves: int = field(default=0, init=False)
    loads: int = field(default=0, init=False)

    def save_program(
        self, plan: BuiltPlan, directory: Path, context: ProviderContext
    ) -> dict[str, Any] | None:
        self.saves += 1
        if self.save_error is not None:
            raise RuntimeError(self.save_error)
        assert context.cases, "save_program gets the race's prepared cases"
        (directory / PROGRAM_FILE).write_text("fake program\n")
        return {"file": PROGRAM_FILE, "cases": len(context.cases)}

    def load_program(
        self, directory: Path, metadata: dict[str, Any], context: ProviderContext
    ) -> BuiltPlan:
        self.loads += 1
        if self.load_error is not None:
            raise RuntimeError(self.load_error)
        assert (directory / metadata["file"]).read_text() == "fake program\n"
        assert self.served_model is not None
        plan = FakeProvider.build(self, self.served_model, context)
        self.builds -= 1  # counted as a load, not a build
        plan.metadata = {**plan.metadata, "served_as": "fake_program"}
        return plan


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()


def select(tmp_path: Path, model: torch.nn.Module, seed: int, **fake: Any) -> tuple:
    race = FakeRace(seed=seed)
    provider = ProgramFake("fast", latency_s=race.jitter(1e-3), advance=race.clock.advance, **fake)
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), provider)
    optimizer = optimizer.with_policy(attrs.evolve(optimizer.policy, plan_cache_dir=str(tmp_path)))
    return optimizer.select_signature(model, torch.randn(4, 8)), provider


def test_a_hit_serves_the_saved_program_without_rebuilding(tmp_path: Path) -> None:
    model = small_model()
    first, race_provider = select(tmp_path, model, seed=1)
    cache = first.report.cache
    assert race_provider.saves == 1 and cache.saved_program.startswith("saved in"), cache
    record = PlanCache(tmp_path).lookup(cache.key)
    program = record.bundle.artifact_path(PROGRAM_ARTIFACT)
    assert (program / PROGRAM_METADATA_FILE).is_file()
    assert read_program_metadata(program) == {"file": PROGRAM_FILE, "cases": 1}

    second, provider = select(tmp_path, model, seed=2, served_model=model)
    assert second.report.cache.cache_hit is True
    assert (provider.loads, provider.builds) == (1, 0)
    assert second.plan.metadata["served_as"] == "fake_program"


def test_a_program_that_cannot_be_loaded_falls_back_to_the_rebuild(tmp_path: Path) -> None:
    model = small_model()
    select(tmp_path, model, seed=1)
    second, provider = select(tmp_path, model, seed=2, load_error="runtime too old")
    assert second.report.cache.cache_hit is True
    assert (provider.loads, provider.builds) == (1, 1)
    assert second.plan.metadata["saved_program_not_served"] == "RuntimeError: runtime too old"


def test_a_plan_that_cannot_be_saved_still_gets_its_record(tmp_path: Path) -> None:
    model = small_model()
    first, _ = select(tmp_path, model, seed=1, save_error="unsupported operator")
    cache = first.report.cache
    assert cache.record_written is True
    assert cache.saved_program == "not saved: RuntimeError: unsupported operator"
    record = PlanCache(tmp_path).lookup(cache.key)
    with pytest.raises(KeyError, match="no artifact"):
        record.bundle.artifact_path(PROGRAM_ARTIFACT)
    second, provider = select(tmp_path, model, seed=2, served_model=model)
    assert second.report.cache.cache_hit is True
    assert (provider.loads, provider.builds) == (0, 1)
