"""``dlopt cache list | show | explain | prune | clear`` and ``--cache-dir`` /
``DLOPT_CACHE_DIR``."""

from __future__ import annotations

import os
import time

import attrs
import pytest
import torch

from dlopt.cache.record_store import CACHE_DIR_ENV, RECORDS_DIR
from dlopt.cli import main
from dlopt.testing.fake_race import FakeRace


def select(cache_dir, seed: int) -> str:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    race = FakeRace()
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
    optimizer = optimizer.with_policy(attrs.evolve(optimizer.policy, plan_cache_dir=str(cache_dir)))
    decision = optimizer.select_signature(model, torch.randn(2, 8))
    return decision.report.cache.key


@pytest.fixture
def two_records(tmp_path):
    return tmp_path, select(tmp_path, 0), select(tmp_path, 1)


def test_list_shows_every_record(two_records, capsys):
    root, a, b = two_records
    assert main(["cache", "list", "--cache-dir", str(root), "--plain"]) == 0
    out = capsys.readouterr().out
    assert a[:12] in out and b[:12] in out and "fast" in out


def test_the_cache_dir_comes_from_the_environment(two_records, capsys, monkeypatch):
    root, a, _ = two_records
    monkeypatch.setenv(CACHE_DIR_ENV, str(root))
    assert main(["cache", "list", "--plain"]) == 0
    assert a[:12] in capsys.readouterr().out


def test_no_cache_dir_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert main(["cache", "list"]) == 2
    assert "--cache-dir" in capsys.readouterr().err


def test_show_prints_the_ingredients(two_records, capsys):
    root, a, _ = two_records
    assert main(["cache", "show", a[:8], "--cache-dir", str(root), "--plain"]) == 0
    out = capsys.readouterr().out
    assert a in out and "model.parameters_sha256" in out and "machine.threads" in out


def test_explain_names_what_differs(two_records, capsys):
    root, a, b = two_records
    assert main(["cache", "explain", a[:10], b[:10], "--cache-dir", str(root), "--plain"]) == 0
    out = capsys.readouterr().out
    assert "model.parameters_sha256" in out
    assert "workload" not in out and "policy" not in out


def test_an_unknown_key_is_a_clear_usage_error(two_records, capsys):
    root, _, _ = two_records
    assert main(["cache", "show", "ffffffff", "--cache-dir", str(root)]) == 2
    assert "no record" in capsys.readouterr().err


def test_prune_and_clear_spare_foreign_files(two_records, capsys):
    root, a, b = two_records
    (root / "mine.txt").write_text("keep")
    long_ago = time.time() - 40 * 86400
    os.utime(root / RECORDS_DIR / a, (long_ago, long_ago))
    assert main(["cache", "prune", "--older-than", "30d", "--cache-dir", str(root)]) == 0
    assert not (root / RECORDS_DIR / a).exists() and (root / RECORDS_DIR / b).exists()
    assert main(["cache", "clear", "--cache-dir", str(root)]) == 0
    assert sorted(os.listdir(root)) == ["mine.txt"]
    assert "removed 1 entry" in capsys.readouterr().out


def test_a_bad_age_is_a_usage_error(two_records, capsys):
    root, _, _ = two_records
    assert main(["cache", "prune", "--older-than", "a month", "--cache-dir", str(root)]) == 2
    assert "30d" in capsys.readouterr().err


def test_select_with_a_cache_dir_misses_then_hits(tmp_path, capsys, monkeypatch, select_argv):
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    argv = select_argv("b2=2x16", extra=["--seed", "3", "--plain", "--cache-dir", str(tmp_path)])
    assert main(argv) == 0
    assert "cache: miss" in capsys.readouterr().out
    assert main(argv) == 0
    assert "cache: hit" in capsys.readouterr().out
    assert main([*argv, "--no-cache-reuse"]) == 0
    assert "reuse_cached_plan is off" in capsys.readouterr().out
