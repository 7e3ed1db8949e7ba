"""A provider's probe is answered once per environment: a later process on the same
environment reads the answer back (and never imports the SDK for a plan it does not
build); a change of the environment probes again."""

from __future__ import annotations

import re

import pytest

from dlopt.contract import probe_cache
from dlopt.plugin import ExecutionTarget, Provider, ProviderAvailability, ProviderContext


class Counted(Provider):
    name = "counted"
    calls = 0
    raises = False

    def availability(self, context):
        type(self).calls += 1
        if type(self).raises:
            raise RuntimeError("the SDK is half installed")
        return ProviderAvailability.ok("fine", sdk_versions={"sdk": "1.2"}, details={"eps": "a,b"})


@pytest.fixture
def kept(tmp_path, monkeypatch):
    monkeypatch.setenv("DLOPT_USER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(probe_cache.PROBE_CACHE_ENV, "on")
    Counted.calls, Counted.raises = 0, False
    return tmp_path


def test_a_later_process_reads_the_answer_back(kept):
    first = Counted().probe(ProviderContext())
    again = Counted().probe(ProviderContext())  # a new instance: as in another process
    assert Counted.calls == 1 and again == first
    assert again.sdk_versions == {"sdk": "1.2"} and again.details == {"eps": "a,b"}
    assert len(list((kept / "probes").glob("*.json"))) == 1


def test_another_target_or_options_or_environment_probes_again(kept, monkeypatch):
    Counted().probe(ProviderContext())
    Counted().probe(ProviderContext(target=ExecutionTarget("cpu", threads=1)))
    Counted().probe(ProviderContext(options={"x": 1}))
    assert Counted.calls == 3
    monkeypatch.setattr(probe_cache, "environment_fingerprint", lambda: "an upgrade")
    Counted().probe(ProviderContext())
    assert Counted.calls == 4


def test_an_upgraded_distribution_changes_the_environment_fingerprint(tmp_path, monkeypatch):
    from dlopt.platform import machine

    (tmp_path / "vendorsdk-1.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    machine.environment_fingerprint.cache_clear()
    before = machine.environment_fingerprint()
    (tmp_path / "vendorsdk-1.0.dist-info").rename(tmp_path / "vendorsdk-1.1.dist-info")
    machine.environment_fingerprint.cache_clear()
    try:
        assert machine.environment_fingerprint() != before
    finally:
        machine.environment_fingerprint.cache_clear()


def test_another_virtualenv_with_the_same_versions_is_another_environment(monkeypatch):
    # An unavailable probe's reason names files of its environment ("cannot load
    # /venv-a/.../libopenvino_intel_gpu_plugin.so"): another venv must not read it back.
    import sys

    from dlopt.platform import machine

    machine.environment_fingerprint.cache_clear()
    before = machine.environment_fingerprint()
    monkeypatch.setattr(sys, "prefix", sys.prefix + "-another")
    machine.environment_fingerprint.cache_clear()
    try:
        assert machine.environment_fingerprint() != before
    finally:
        machine.environment_fingerprint.cache_clear()


def test_a_failed_probe_is_not_kept_and_off_means_off(kept, monkeypatch):
    Counted.raises = True
    assert Counted().probe(ProviderContext()).available is False
    Counted.raises = False
    assert Counted().probe(ProviderContext()).available is True  # probed again
    assert Counted.calls == 2
    monkeypatch.setenv(probe_cache.PROBE_CACHE_ENV, "off")
    Counted().probe(ProviderContext())
    assert Counted.calls == 3


def test_an_unreadable_entry_is_probed_again(kept):
    Counted().probe(ProviderContext())
    (entry,) = (kept / "probes").glob("*.json")
    entry.write_text('{"format": 1, "availability": {"available": NaN}}')
    assert Counted().probe(ProviderContext()).reason == "fine"
    entry.write_text('{"format": 1, "availability": {"surprise": 1}}')
    assert Counted().probe(ProviderContext()).reason == "fine"
    assert Counted.calls == 3


@pytest.mark.parametrize(
    ("availability", "problem"),
    [
        ({"available": "yes", "reason": "fine"}, "available is 'yes'"),
        ({"available": True, "reason": 3}, "reason is 3"),
        ({"available": True, "sdk_versions": {"sdk": 1}}, "sdk_versions is"),
        ({"available": True, "surprise": 1}, "unknown field(s) surprise"),
        ({"reason": "fine"}, "no 'available' field"),
    ],
)
def test_an_entry_of_the_wrong_types_is_set_aside_named_and_probed_again(
    kept, availability, problem
):
    import json

    from dlopt.platform.fileio import UserCacheWarning

    Counted().probe(ProviderContext())
    (entry,) = (kept / "probes").glob("*.json")
    entry.write_text(json.dumps({"format": probe_cache.ENTRY_FORMAT, "availability": availability}))
    with pytest.warns(UserCacheWarning, match=re.escape(problem)) as warned:
        answer = Counted().probe(ProviderContext())
    assert str(entry) in str(warned[0].message)
    assert Counted.calls == 2 and answer.available is True and answer.reason == "fine"
    assert entry.with_name(entry.name + ".set-aside").exists()
    assert json.loads(entry.read_text())["availability"]["available"] is True  # probed anew


def test_a_fifo_in_place_of_an_entry_never_hangs_the_probe(kept):
    import os

    from dlopt.platform.fileio import UserCacheWarning

    Counted().probe(ProviderContext())
    (entry,) = (kept / "probes").glob("*.json")
    entry.unlink()
    os.mkfifo(entry)
    with pytest.warns(UserCacheWarning, match="not a regular file"):
        answer = Counted().probe(ProviderContext())
    assert answer.available is True and Counted.calls == 2
