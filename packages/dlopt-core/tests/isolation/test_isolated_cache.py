"""An isolated selection with the plan cache: the host brings the winner back from the
record the worker wrote (its saved program here) instead of building it again, on the
race that wrote the record and on a later hit. Without a plan cache the worker hands its
winner back through a record of the selection's own, which leaves nothing behind."""

from __future__ import annotations

import os
import tempfile

import faulty_plans
import pytest
from faulty_plans import (
    BUILDS_ENV,
    HOST_PID_ENV,
    LoadsArtifacts,
    SavedProgramPlan,
    WrongInHost,
    bounded,
    isolated_policy,
)

from dlopt import InferenceOptimizer, verify_bundle
from dlopt.bundle.store import PROGRAM_ARTIFACT
from dlopt.cache.record_store import RECORD_NAME, SET_ASIDE_DIR, PlanCache, PlanCacheWarning
from dlopt.isolation.supervisor import IsolationError


def select(cache_dir):
    policy = isolated_policy(
        "fast_program", include=("eager_fp32", "fast_program"), plan_cache_dir=str(cache_dir)
    )
    with bounded(120):
        optimizer = InferenceOptimizer("cpu", policy, [SavedProgramPlan()])
        return optimizer.select("faulty_plans:tiny_model")


def test_the_host_serves_the_winner_from_the_workers_record(tmp_path):
    model, workload = faulty_plans.tiny_model()
    (x,) = workload.cases[0].args
    with select(tmp_path) as first:
        assert first.selected_plan == "fast_program"
        assert first.report.cache.record_written is True
        assert first.report.cache.saved_program.startswith("saved in")
        assert first.plan.metadata == {"served_as": "program"}
        assert (first(x) - model.linear(x)).abs().max() < 1e-6
    with select(tmp_path) as second:
        assert second.report.cache.cache_hit is True
        assert second.plan.metadata == {"served_as": "program"}


def test_the_host_reads_the_reference_rounding_the_worker_measured(tmp_path, monkeypatch):
    # The host checks the winner against its own reference, with the rounding the worker's
    # race measured on the same inputs: no float64 run of its own, then or on a hit.
    from dlopt.validation import reference

    runs: list[int] = []
    real = reference.measure_fp32_rounding
    monkeypatch.setattr(
        reference, "measure_fp32_rounding", lambda *a, **k: runs.append(1) or real(*a, **k)
    )
    with select(tmp_path) as first:
        assert first.report.cache.record_written is True
    with select(tmp_path) as second:
        assert second.report.cache.cache_hit is True
    assert runs == []


def test_a_record_set_aside_in_the_worker_is_warned_in_the_host_with_why(tmp_path):
    with select(tmp_path) as first:
        key = first.report.cache.key
    record = PlanCache(tmp_path).record_path(key)
    (record / RECORD_NAME).write_bytes(b"{ this is no record")
    with pytest.warns(PlanCacheWarning, match="could not be read") as warned:
        second = select(tmp_path)
    with second:
        cache = second.report.cache
        assert cache.cache_hit is False
        assert cache.reason.startswith("the record for this key could not be read (")
        assert "set aside" in cache.reason
    assert str(record) in str(warned[0].message)
    assert list((tmp_path / SET_ASIDE_DIR).iterdir())  # kept for a look, out of the way


def select_without_cache(plan, monkeypatch, tmp_path):
    builds = tmp_path / "builds.txt"
    builds.touch()
    monkeypatch.setenv(BUILDS_ENV, str(builds))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what the selection leaves
    policy = isolated_policy(plan.name, include=("eager_fp32", plan.name))
    assert policy.plan_cache_dir is None
    with bounded(120):
        optimizer = InferenceOptimizer("cpu", policy, [plan])
        decision = optimizer.select("faulty_plans:tiny_model")
    return decision, builds.read_text().split()


def test_without_a_plan_cache_the_host_loads_the_workers_winner_instead_of_building_it(
    monkeypatch, tmp_path
):
    model, workload = faulty_plans.tiny_model()
    (x,) = workload.cases[0].args
    decision, builders = select_without_cache(LoadsArtifacts(), monkeypatch, tmp_path)
    with decision:
        assert decision.selected_plan == "fast_loaded"
        # Built once, in the worker; the host loaded the files the worker's record kept.
        assert len(builders) == 1 and int(builders[0]) != os.getpid()
        assert decision.plan.metadata == {"served_as": "loaded"}
        assert (decision(x) - model.linear(x)).abs().max() < 1e-6
        assert decision.report.cache is None  # the user asked for no plan cache
        assert not list(tmp_path.glob("dlopt-isolated-*"))  # the handback went with it


def test_without_a_plan_cache_the_handback_record_saves_no_program(monkeypatch, tmp_path):
    # A program costs a compile to save and the host needs the plan once: it is built
    # again instead, and a bundle still saves a program when asked.
    decision, _ = select_without_cache(SavedProgramPlan(), monkeypatch, tmp_path)
    with decision:
        assert decision.selected_plan == "fast_program"
        assert decision.plan.metadata != {"served_as": "program"}
        bundle = decision.save_bundle(tmp_path / "bundle", compiled_program=True)
        assert PROGRAM_ARTIFACT in verify_bundle(bundle).manifest["artifacts"]


def test_a_winner_that_fails_when_brought_back_into_the_host_is_an_error_naming_it(
    monkeypatch, tmp_path
):
    monkeypatch.setenv(HOST_PID_ENV, str(os.getpid()))
    with pytest.raises(IsolationError) as raised:
        select_without_cache(WrongInHost(), monkeypatch, tmp_path)
    message = str(raised.value)
    assert "'wrong_in_host' passed in the worker but not when brought back" in message
    assert "failed at validation" in message
    assert not list(tmp_path.glob("dlopt-isolated-*"))  # nothing left behind either
