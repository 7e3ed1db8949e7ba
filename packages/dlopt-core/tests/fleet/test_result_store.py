"""The fleet's result store, without Ray: results round-trip as strict JSON in a directory
and at an fsspec URL, and a record published to a URL comes back as a plan cache record
a serving process finds (fake-clock selections: instant)."""

from __future__ import annotations

import os
import threading
import uuid

import attrs
import pytest
import torch
from fleet_results import fleet_result

from dlopt.cache.record_store import RECORD_NAME, RECORDS_DIR, PlanCache
from dlopt.errors import ConfigurationError
from dlopt.fleet.result_store import FsspecStore, LocalStore, ResultStore, pull
from dlopt.testing.fake_race import FakeRace


def memory_url() -> str:
    pytest.importorskip("fsspec")
    return f"memory://dlopt-fleet-{uuid.uuid4().hex}"


def test_open_picks_the_kind_of_store(tmp_path):
    assert isinstance(ResultStore.open(str(tmp_path)), LocalStore)
    assert ResultStore.open(f"file://{tmp_path}").location == str(tmp_path)
    assert isinstance(ResultStore.open(memory_url()), FsspecStore)
    with pytest.raises(ConfigurationError, match="directory or a URL"):
        ResultStore.open(" ")


@pytest.mark.parametrize("kind", ["directory", "url"])
def test_results_round_trip_and_a_failed_rerun_leaves_no_stale_report(tmp_path, kind):
    store = ResultStore.open(str(tmp_path) if kind == "directory" else memory_url())
    race = FakeRace()
    model = torch.nn.Linear(4, 2).eval()
    report = (
        race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
        .select_signature(model, torch.randn(2, 4))
        .report
    )
    store.write_result(fleet_result(), report)
    assert store.read_result("s", "j", "k") == fleet_result()
    assert store.read_report("s", "j", "k") == report
    store.write_result(fleet_result(status="failed", error="the factory raised"), None)
    assert store.read_result("s", "j", "k").error == "the factory raised"
    assert store.read_report("s", "j", "k") is None
    assert store.read_result("s", "j", "other") is None


def test_a_damaged_result_is_a_clear_error(tmp_path):
    store = ResultStore.open(str(tmp_path))
    store.write_text("fleet/s/j/k/result.json", '{"spec": "s", "speedup": NaN}')
    with pytest.raises(ConfigurationError, match="is not a fleet result"):
        store.read_result("s", "j", "k")
    with pytest.raises(ConfigurationError, match="cannot name a path"):
        store.result_dir("s", "../j", "k")


def test_a_record_published_to_a_url_is_pulled_into_a_plan_cache(tmp_path):
    """The race caches in a temporary directory, publishes the record to the URL; a serving
    host pulls it (verified) and its selection is a revalidated hit under the same key."""
    model, x = torch.nn.Linear(8, 4).eval(), torch.randn(4, 8)

    def optimizer(race: FakeRace, cache_dir):
        made = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
        return made.with_policy(attrs.evolve(made.policy, plan_cache_dir=str(cache_dir)))

    store = ResultStore.open(memory_url())
    assert isinstance(store, FsspecStore)
    raced_dir, temporary = store.race_cache_dir()
    assert temporary
    raced = optimizer(FakeRace(), raced_dir).select_signature(model, x)
    key = raced.report.cache.key
    store.publish(raced_dir, key)
    assert store.record_keys() == [key]
    assert store.fs.exists(f"{store.base}/{RECORDS_DIR}/{key}/{RECORD_NAME}")

    serving = tmp_path / "serving-cache"
    assert pull(store, str(serving)) == [key]
    assert pull(store, str(serving)) == []  # already there: kept
    assert PlanCache(serving).lookup(key).report.selected_plan == "fast"
    served = optimizer(FakeRace(seed=99), serving).select_signature(model, x)
    assert served.report.cache.cache_hit is True and served.report.cache.key == key


def test_pull_skips_a_record_still_being_uploaded(tmp_path):
    store = ResultStore.open(memory_url())
    assert isinstance(store, FsspecStore)
    key = "a" * 64
    store.write_text(f"{RECORDS_DIR}/{key}/bundle/report.json", "{}")  # no record.json yet
    assert pull(store, str(tmp_path / "cache")) == []


def test_pull_needs_a_url_store(tmp_path):
    with pytest.raises(ConfigurationError, match="point plan_cache_dir at it directly"):
        pull(ResultStore.open(str(tmp_path)), str(tmp_path / "cache"))


def test_attempts_are_counted_per_run(tmp_path):
    store = ResultStore.open(str(tmp_path))
    assert store.attempts("s", "j", "k", "run-1") == 0
    assert store.begin_attempt("s", "j", "k", "run-1") == 1
    assert store.begin_attempt("s", "j", "k", "run-1") == 2  # Ray retried it
    assert store.attempts("s", "j", "k", "run-1") == 2
    assert store.begin_attempt("s", "j", "k", "run-2") == 1  # a new run counts afresh
    store.write_text("fleet/s/j/k/attempt.json", "{damaged")
    assert store.begin_attempt("s", "j", "k", "run-2") == 1


def test_an_attempt_records_where_it_started(tmp_path):
    store = ResultStore.open(str(tmp_path))
    store.begin_attempt("s", "j", "k", "run1", node_id="n" * 56, host="h1", started_at=5.0)
    where = store.last_attempt("s", "j", "k", "run1")
    assert (where["node_id"], where["host"], where["started_at"]) == ("n" * 56, "h1", 5.0)
    assert store.last_attempt("s", "j", "k", "another run") == {}


def test_a_stored_file_that_is_a_fifo_is_an_error_not_a_wait(tmp_path):
    store = ResultStore.open(str(tmp_path))
    folder = tmp_path / store.result_dir("s", "j", "k")
    folder.mkdir(parents=True)
    os.mkfifo(folder / "result.json")
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            store.read_result("s", "j", "k")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # the old behaviour: let the blocked open go, then fail
        with open(os.open(folder / "result.json", os.O_WRONLY), "wb"):
            pass
        pytest.fail("reading a result that is a FIFO blocked")
    assert isinstance(outcome[0], ConfigurationError)
    assert f"cannot read {folder / 'result.json'} from the fleet's store" in str(outcome[0])
    assert "it is a FIFO (named pipe), not a regular file" in str(outcome[0])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_text("mine"), "exists and is not a directory"),
        (lambda p: None, None),
    ],
)
def test_a_store_is_checked_before_any_race(tmp_path, make, message):
    from dlopt.fleet.result_store import store_problems

    root = tmp_path / "store"
    make(root)
    problems = store_problems(str(root), writable=True)
    if message is None:
        assert problems == [] and not root.exists()  # checked, not created
    else:
        assert len(problems) == 1 and message in problems[0]
    assert "cannot write" in store_problems("/proc/dlopt-store", writable=True)[0]
    assert store_problems("/proc/dlopt-store", writable=False) == []
