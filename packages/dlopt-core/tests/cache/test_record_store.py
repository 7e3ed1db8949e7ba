"""The record store on disk: one valid record when two processes write one key, clear
and prune spare foreign files, resolve and list."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlopt.cache.record_store import (
    MARKER_NAME,
    RECORDS_DIR,
    PlanCache,
    PlanCacheError,
    read_record,
)

WRITER = textwrap.dedent(
    """
    import sys, time
    import torch
    from dlopt.cache.record_store import PlanCache
    from dlopt.testing.fake_race import FakeRace

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    race = FakeRace()
    decision = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)).select_signature(
        model, torch.randn(2, 8)
    )
    cache = PlanCache(sys.argv[1])
    key = "ab" * 32
    start = float(sys.argv[2])
    while time.time() < start:  # both writers start together
        time.sleep(0.001)
    result = cache.write(key, {"who": sys.argv[3]}, decision.report, {})
    print(result.written)
    """
)


def test_two_processes_writing_one_key_leave_one_valid_record(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    start = time.time() + 8.0
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "cache"), str(start), who],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("first", "second")
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    assert sorted(out.strip() for out, _ in outputs) == ["False", "True"]
    key = "ab" * 32
    record = read_record(tmp_path / "cache" / RECORDS_DIR / key, key)
    assert record.ingredients["who"] in ("first", "second")
    assert list((tmp_path / "cache" / "staging").iterdir()) == []


def make_cache(tmp_path: Path) -> PlanCache:
    import torch

    from dlopt.testing.fake_race import FakeRace

    race = FakeRace()
    model = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    decision = race.optimizer(race.fake("eager_fp32", 2e-3)).select_signature(
        model, torch.randn(2, 8)
    )
    cache = PlanCache(tmp_path)
    for digit in "abc":
        assert cache.write(digit * 64, {"n": digit}, decision.report, {}).written
    return cache


def test_clear_removes_only_what_dlopt_wrote(tmp_path):
    cache = make_cache(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / RECORDS_DIR / "README").write_text("also mine")
    (tmp_path / RECORDS_DIR / "my-folder").mkdir()
    removed = cache.remove()
    assert len(removed) == 3
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / RECORDS_DIR / "README").read_text() == "also mine"
    assert (tmp_path / RECORDS_DIR / "my-folder").is_dir()
    assert not any(p.name == "a" * 64 for p in (tmp_path / RECORDS_DIR).iterdir())


def test_clear_of_an_empty_cache_removes_its_marker_and_layout(tmp_path):
    cache = make_cache(tmp_path)
    cache.remove()
    assert sorted(os.listdir(tmp_path)) == []


def test_prune_removes_only_records_older_than_asked(tmp_path):
    cache = make_cache(tmp_path)
    old = tmp_path / RECORDS_DIR / ("a" * 64)
    long_ago = time.time() - 40 * 86400
    os.utime(old, (long_ago, long_ago))
    (tmp_path / "foreign.bin").write_bytes(b"x")
    os.utime(tmp_path / "foreign.bin", (long_ago, long_ago))
    removed = cache.remove(older_than_s=30 * 86400)
    assert removed == [old]
    assert (tmp_path / "foreign.bin").exists() and (tmp_path / MARKER_NAME).exists()
    assert {s.key[0] for s in cache.summaries()} == {"b", "c"}


def test_a_directory_without_the_marker_is_never_cleared(tmp_path):
    (tmp_path / RECORDS_DIR).mkdir()
    (tmp_path / RECORDS_DIR / ("a" * 64)).mkdir()
    with pytest.raises(PlanCacheError, match="not a dlopt plan cache"):
        PlanCache(tmp_path).remove()
    assert (tmp_path / RECORDS_DIR / ("a" * 64)).is_dir()


def test_keys_resolve_from_unique_prefixes(tmp_path):
    cache = make_cache(tmp_path)
    assert cache.resolve("aaaaaa") == "a" * 64
    with pytest.raises(PlanCacheError, match="no record"):
        cache.resolve("dddddd")
    with pytest.raises(PlanCacheError, match="at least 6"):
        cache.resolve("a")
    with pytest.raises(PlanCacheError, match="not a cache key"):
        cache.record_path("../etc")
