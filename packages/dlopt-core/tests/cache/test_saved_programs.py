"""Saved programs: a selected plan whose provider saves programs is stored with one in
its plan cache record, a hit serves it (falling back to the provider's rebuild when it
cannot be loaded), a provider that fails to save still gets its record, and a bundle
saved with ``compiled_program=True`` serves without the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from attrs import define, field

from dlopt.api.bundles import load_bundle
from dlopt.bundle.store import PROGRAM_ARTIFACT, BundleError
from dlopt.cache.record_store import PlanCache
from dlopt.cache.reload import PROGRAM_METADATA_FILE, read_program_metadata
from dlopt.contract.provider import BuiltPlan, ProviderContext
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.testing.fake_race import FakeRace
from dlopt.testing.fakes import FakeProvider
from dlopt.testing.plugins import plugin_module

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


def select(
    cache_dir: Path | None, model: torch.nn.Module, seed: int, plain: bool = False, **fake: Any
) -> tuple:
    race = FakeRace(seed=seed)
    kind = FakeProvider if plain else ProgramFake
    provider = kind("fast", latency_s=race.jitter(1e-3), advance=race.clock.advance, **fake)
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), provider)
    if cache_dir is not None:
        optimizer = optimizer.with_policy(
            attrs.evolve(optimizer.policy, plan_cache_dir=str(cache_dir))
        )
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


@pytest.mark.parametrize("cached", [True, False], ids=["from the record", "saved on demand"])
def test_a_bundle_with_its_compiled_program_serves_without_the_model(tmp_path, cached):
    model = small_model()
    decision, provider = select(tmp_path / "cache" if cached else None, model, seed=1)
    bundle = decision.save_bundle(tmp_path / "bundle", compiled_program=True)
    assert provider.saves == 1  # the record's program is the bundle's: saved once
    loader = ProgramFake("fast", served_model=model)
    plugins = [("fakeplug", plugin_module("fakeplug", loader))]
    registry = load_providers(PluginSettings(autoload=False), extra_plugins=plugins)
    served = load_bundle(bundle, registry=registry, load_compiled_program=True)
    assert served.plan.metadata["served_as"] == "fake_program" and loader.loads == 1
    x = torch.randn(4, 8)
    torch.testing.assert_close(served(x), model(x))


def test_a_bundle_cannot_hold_a_program_its_provider_cannot_save(tmp_path):
    decision, _ = select(None, small_model(), seed=1, plain=True)
    with pytest.raises(BundleError, match="saves no compiled programs"):
        decision.save_bundle(tmp_path / "bundle", compiled_program=True)
    failing, _ = select(None, small_model(), seed=1, save_error="unsupported operator")
    with pytest.raises(BundleError, match="unsupported operator"):
        failing.save_bundle(tmp_path / "bundle", compiled_program=True)
