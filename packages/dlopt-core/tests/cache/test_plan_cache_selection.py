"""The plan cache inside a selection: a miss races and stores, a hit is revalidated and
served, a plan that regressed falls back to a race, unreadable records are set aside."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import attrs
import pytest
import torch

from dlopt.api.optimizer import InferenceOptimizer
from dlopt.cache.record_store import RECORDS_DIR, SET_ASIDE_DIR, PlanCache, PlanCacheWarning
from dlopt.testing.fake_race import FakeRace


def small_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    ).eval()


def with_cache(optimizer: InferenceOptimizer, cache_dir: Path, **policy) -> InferenceOptimizer:
    return optimizer.with_policy(
        attrs.evolve(optimizer.policy, plan_cache_dir=str(cache_dir), **policy)
    )


def cached_optimizer(race: FakeRace, cache_dir: Path, fast_latency: float = 1e-3, **policy):
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", fast_latency))
    return with_cache(optimizer, cache_dir, **policy)


def test_miss_stores_a_record_and_the_next_selection_is_a_revalidated_hit(tmp_path):
    model, x = small_model(), torch.randn(4, 8)
    first = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    assert first.selected_plan == "fast"
    assert first.report.cache is not None and first.report.cache.cache_hit is False
    assert first.report.cache.record_written is True
    assert first.report.cache.reason == "no record for this key"
    key = first.report.cache.key
    assert (tmp_path / RECORDS_DIR / key / "record.json").is_file()

    second = cached_optimizer(FakeRace(seed=99), tmp_path).select_signature(model, x)
    cache = second.report.cache
    assert cache is not None and cache.cache_hit is True and cache.key == key
    assert second.selected_plan == "fast"
    assert cache.probe_baseline == "eager_fp32"
    assert cache.probe_speedup is not None and cache.probe_speedup.high >= 1.02
    assert cache.lookup_time_s is not None and cache.revalidation_time_s is not None
    torch.testing.assert_close(second(x), model(x))


def test_a_hits_probe_starts_from_the_spread_its_record_kept(tmp_path, monkeypatch):
    """The record's race measured the pick's spread against the baseline; the probe
    pools it in and confirms the 2x pick at round 2, where without it the race's least
    rounds (3) are needed."""
    from dlopt.cache import recheck

    model, x = small_model(), torch.randn(4, 8)
    first = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    spread = first.report.candidate("fast").race.round_spread
    assert spread is not None and spread > 0
    assert first.report.candidate("eager_fp32").race.round_spread is None  # the baseline

    second = cached_optimizer(FakeRace(seed=99), tmp_path).select_signature(model, x)
    probe = second.report.cache.probe_speedup
    assert second.report.cache.cache_hit is True
    assert probe is not None and probe.rounds == recheck.PROBE_MIN_ROUNDS_KNOWN_SPREAD

    monkeypatch.setattr(recheck, "recorded_spread", lambda *args: None)
    third = cached_optimizer(FakeRace(seed=99), tmp_path).select_signature(model, x)
    probe = third.report.cache.probe_speedup
    assert third.report.cache.cache_hit is True
    assert probe is not None and probe.rounds >= 3


def test_a_hits_probe_builds_only_the_two_plans_it_races(tmp_path):
    """A record whose baseline is a native plan: the probe races the pick against that
    plan, and the reference plan, which races nothing, is not built (the ground truth
    already ran the model on every case)."""

    def optimizer(race: FakeRace):
        fakes = (
            race.fake("eager_fp32", 3e-3),
            race.fake("native_channels_last", 2e-3),
            race.fake("fast", 0.5e-3),
        )
        return with_cache(race.optimizer(*fakes), tmp_path), {fake.name: fake for fake in fakes}

    model, x = small_model(), torch.randn(4, 8)
    first_optimizer, _ = optimizer(FakeRace())
    first = first_optimizer.select_signature(model, x)
    assert (first.report.baseline, first.selected_plan) == ("native_channels_last", "fast")

    second_optimizer, fakes = optimizer(FakeRace(seed=99))
    second = second_optimizer.select_signature(model, x)
    assert second.report.cache.cache_hit is True
    assert second.report.cache.probe_baseline == "native_channels_last"
    assert {name: fake.builds for name, fake in fakes.items()} == {
        "eager_fp32": 0,
        "native_channels_last": 1,
        "fast": 1,
    }


def test_a_hit_does_not_profile_the_model_and_a_race_after_a_failed_recheck_does(
    tmp_path, monkeypatch
):
    # The operator mix and the per-case call times feed only the priors and the time
    # budget: a hit builds nothing, so it pays neither's reference calls.
    from dlopt.pipeline import ground_truth

    profiled: list[int] = []
    real = ground_truth.operator_mix
    monkeypatch.setattr(
        ground_truth, "operator_mix", lambda *a, **k: profiled.append(1) or real(*a, **k)
    )
    model, x = small_model(), torch.randn(4, 8)
    first = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    assert profiled == [1] and first.report.decision_time.operator_mix.linear > 0
    hit = cached_optimizer(FakeRace(seed=99), tmp_path).select_signature(model, x)
    assert hit.report.cache.cache_hit is True and profiled == [1]
    again = cached_optimizer(FakeRace(seed=5), tmp_path, fast_latency=3e-3).select_signature(
        model, x
    )
    assert again.report.cache.cache_hit is False and profiled == [1, 1]
    assert again.report.decision_time.operator_mix.linear > 0


def test_a_plan_that_regressed_is_caught_and_raced_again(tmp_path):
    model, x = small_model(), torch.randn(4, 8)
    cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    # Same key (names, options, machine), but "fast" is now slower than the baseline.
    again = cached_optimizer(FakeRace(seed=5), tmp_path, fast_latency=3e-3).select_signature(
        model, x
    )
    cache = again.report.cache
    assert cache is not None and cache.cache_hit is False
    assert "the recheck failed" in (cache.reason or "")
    assert "no longer clears min_speedup" in (cache.reason or "")
    assert again.selected_plan == "eager_fp32"
    # The record now holds the new decision.
    record = PlanCache(tmp_path).lookup(cache.key)
    assert record is not None and record.report.selected_plan == "eager_fp32"


def test_a_miss_beside_an_older_record_says_what_differs(tmp_path):
    x = torch.randn(4, 8)
    cached_optimizer(FakeRace(), tmp_path).select_signature(small_model(0), x)
    other = cached_optimizer(FakeRace(), tmp_path).select_signature(small_model(1), x)
    cache = other.report.cache
    assert cache is not None and cache.cache_hit is False
    assert cache.differences == ("model.parameters_sha256",)
    assert "model.parameters_sha256" in (cache.reason or "")


def test_reuse_off_races_and_replaces_the_record(tmp_path):
    model, x = small_model(), torch.randn(4, 8)
    cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    again = cached_optimizer(FakeRace(), tmp_path, reuse_cached_plan=False).select_signature(
        model, x
    )
    assert again.report.cache is not None and again.report.cache.cache_hit is False
    assert "reuse_cached_plan is off" in (again.report.cache.reason or "")
    assert again.report.cache.record_written is True


@pytest.mark.parametrize("damage", ["truncated", "corrupted", "older_schema", "foreign"])
def test_unreadable_records_are_set_aside_with_a_warning(tmp_path, damage):
    model, x = small_model(), torch.randn(4, 8)
    first = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    key = first.report.cache.key
    record_dir = tmp_path / RECORDS_DIR / key
    record_json = record_dir / "record.json"
    report_json = record_dir / "bundle" / "report.json"
    if damage == "truncated":
        report_json.write_bytes(report_json.read_bytes()[:100])
    elif damage == "corrupted":
        data = bytearray(report_json.read_bytes())
        data[50] ^= 0x1
        report_json.write_bytes(bytes(data))
    elif damage == "older_schema":
        record = json.loads(record_json.read_text())
        record["record_version"] = 0
        record_json.write_text(json.dumps(record))
    else:
        record_json.write_text("\x00\x01 not json")
    with pytest.warns(PlanCacheWarning, match="could not be read"):
        again = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    assert again.report.cache.cache_hit is False
    assert again.report.cache.record_written is True
    aside = list((tmp_path / SET_ASIDE_DIR).iterdir())
    assert len(aside) == 1 and aside[0].name.startswith(key)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        third = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    assert third.report.cache.cache_hit is True


def test_the_cache_field_round_trips_and_is_absent_without_a_cache(tmp_path):
    from dlopt.evidence.report import report_from_json

    model, x = small_model(), torch.randn(4, 8)
    cached = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x).report
    assert json.loads(cached.to_json())["cache"]["cache_hit"] is False
    assert report_from_json(cached.to_json()) == cached
    race = FakeRace()
    plain = race.optimizer(race.fake("eager_fp32", 2e-3)).select_signature(model, x).report
    assert "cache" not in json.loads(plain.to_json())
    assert report_from_json(plain.to_json()).cache is None


def _count_rounding_runs(monkeypatch) -> list[int]:
    """Counts the float64 runs that measure the reference's fp32 rounding."""
    from dlopt.validation import reference

    runs: list[int] = []
    real = reference.measure_fp32_rounding
    monkeypatch.setattr(
        reference, "measure_fp32_rounding", lambda *a, **k: runs.append(1) or real(*a, **k)
    )
    return runs


def _rounding_field(tmp_path: Path, key: str) -> dict:
    data = json.loads((tmp_path / RECORDS_DIR / key / "record.json").read_text())
    return data["reference_rounding"]


def test_a_hit_reads_the_reference_rounding_back_instead_of_running_float64(tmp_path, monkeypatch):
    from dlopt.pipeline import ground_truth

    runs = _count_rounding_runs(monkeypatch)
    attached = []
    real = ground_truth.with_fp32_rounding

    def spy(truth, *args):
        real(truth, *args)
        attached.append([case.fp32_rounding for case in truth.reference.cases])

    monkeypatch.setattr(ground_truth, "with_fp32_rounding", spy)
    model, x = small_model(), torch.randn(4, 8)
    first = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    assert runs == [1]
    kept = _rounding_field(tmp_path, first.report.cache.key)
    assert kept["note"] is None and len(kept["cases"]) == 1
    (leaf,) = kept["cases"][0].values()
    assert 0 < leaf["rel_l2"] < 1e-4 and leaf["max_abs_error"] > 0

    hit = cached_optimizer(FakeRace(seed=99), tmp_path).select_signature(model, x)
    assert hit.report.cache.cache_hit is True and runs == [1]
    # The hit judged its plans against the rounding the race measured.
    assert len(attached) == 2 and attached[1] == attached[0] and attached[0][0]


def test_other_input_values_of_the_same_signature_measure_the_rounding_again(tmp_path, monkeypatch):
    runs = _count_rounding_runs(monkeypatch)
    model = small_model()
    first = cached_optimizer(FakeRace(), tmp_path).select_signature(model, torch.randn(4, 8))
    other = cached_optimizer(FakeRace(seed=99), tmp_path).select_signature(
        model, torch.randn(4, 8) * 3
    )
    # The same key (shapes and dtypes), another measurement: the record's was not theirs.
    assert other.report.cache.key == first.report.cache.key
    assert other.report.cache.cache_hit is True and runs == [1, 1]


@pytest.mark.parametrize(
    "damage",
    [
        lambda kept: kept.update(cases=[{"out": {"rel_l2": -1.0, "max_abs_error": 0.0}}]),
        lambda kept: kept.update(cases=[]),
        lambda kept: kept.update(note=3),
        lambda kept: kept["cases"][0].update({"out": "1e-6"}),
    ],
    ids=["negative", "case-count", "note", "leaf"],
)
def test_a_malformed_kept_rounding_is_measured_again(tmp_path, monkeypatch, damage):
    runs = _count_rounding_runs(monkeypatch)
    model, x = small_model(), torch.randn(4, 8)
    key = cached_optimizer(FakeRace(), tmp_path).select_signature(model, x).report.cache.key
    path = tmp_path / RECORDS_DIR / key / "record.json"
    data = json.loads(path.read_text())
    damage(data["reference_rounding"])
    path.write_text(json.dumps(data))
    hit = cached_optimizer(FakeRace(seed=99), tmp_path).select_signature(model, x)
    assert hit.report.cache.cache_hit is True and runs == [1, 1]


def test_a_race_after_a_failed_recheck_reuses_no_file_of_the_record(tmp_path, monkeypatch):
    """Bringing a record's plan back leaves its files in the plan's directory; when the
    recheck fails, the race must not build from them (a tampered ONNX export whose
    manifest key still matched was reused)."""
    from dlopt.testing.fakes import FakeProvider

    model, x = small_model(), torch.randn(4, 8)
    cached_optimizer(FakeRace(), tmp_path).select_signature(model, x)
    found_at_build: list[bool] = []
    real_build = FakeProvider.build

    def build(self, model, context):
        if self.name == "fast":
            kept = context.artifact_dir / "fast" / "exported.onnx"
            found_at_build.append(kept.exists())
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text("what the record held")  # as a reload leaves its files
        return real_build(self, model, context)

    monkeypatch.setattr(FakeProvider, "build", build)
    again = cached_optimizer(FakeRace(seed=5), tmp_path, fast_latency=3e-3).select_signature(
        model, x
    )
    assert "the recheck failed" in (again.report.cache.reason or "")
    # Brought back once for the recheck, built again for the race: nothing was left then.
    assert found_at_build == [False, False]


@pytest.mark.parametrize(
    ("baseline", "versus", "expected"),
    [
        ("eager_fp32", "eager_fp32", (0.1, 4)),  # the reference was the baseline: 5 rounds
        ("native_channels_last", "native_channels_last", (0.1, 6)),  # a native one: 7
        ("native_channels_last", "eager_fp32", None),  # not the pair the record measured
    ],
)
def test_the_recorded_spread_is_the_one_against_the_records_baseline(baseline, versus, expected):
    from types import SimpleNamespace

    from dlopt.cache.recheck import recorded_spread
    from dlopt.evidence.report import RaceEvidence
    from dlopt.measurement import RatioInterval
    from dlopt.measurement.sequential import KnownSpread

    def interval(rounds: int) -> RatioInterval:
        return RatioInterval(2.0, 1.5, 2.5, 0.95, "t", rounds)

    race = RaceEvidence(
        speedup_vs_reference=interval(5), speedup_vs_baseline=interval(7), round_spread=0.1
    )
    record = SimpleNamespace(
        report=SimpleNamespace(baseline=baseline, candidate=lambda name: SimpleNamespace(race=race))
    )
    found = recorded_spread(record, "fast", versus, "eager_fp32")
    assert found == (KnownSpread(*expected) if expected is not None else None)
