"""An isolated selection with the plan cache: the host brings the winner back from the
record the worker wrote (its saved program here) instead of building it again, on the
race that wrote the record and on a later hit."""

from __future__ import annotations

import faulty_plans
import pytest
from faulty_plans import SavedProgramPlan, bounded, isolated_policy

from dlopt import InferenceOptimizer
from dlopt.cache.record_store import RECORD_NAME, SET_ASIDE_DIR, PlanCache, PlanCacheWarning


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
