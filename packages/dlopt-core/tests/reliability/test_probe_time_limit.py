"""Fault class: a probe that hangs. It is given a time limit and reported unavailable.

A hung probe cannot be killed in-process: it is left running in a daemon thread, and
the provider is reported as unavailable with how long it was waited for.
"""

from __future__ import annotations

import threading

import pytest

from dlopt.contract.provider import ProviderAvailability, ProviderContext, ProviderInfo
from dlopt.errors import ConfigurationError
from dlopt.pipeline.probe import probe_provider
from dlopt.settings.policy import (
    DEFAULT_PROBE_TIMEOUT_S,
    OptimizationPolicy,
    default_probe_timeout_s,
)
from dlopt.testing import FakeProvider


class _BlockingProbe(FakeProvider):
    """A probe that waits on ``release`` (set at test end) before answering."""

    release: threading.Event | None = None

    def probe(self, context):
        assert self.release is not None
        self.release.wait()
        return ProviderAvailability.ok()


@pytest.fixture
def blocking_info():
    release = threading.Event()
    provider = _BlockingProbe("hung_probe")
    provider.release = release
    yield ProviderInfo(provider, plugin="hung_plugin")
    release.set()


def test_a_hung_probe_is_unavailable_after_the_limit(blocking_info):
    status = probe_provider(blocking_info, ProviderContext(), timeout_s=0.05)
    assert not status.availability.available
    reason = status.availability.reason
    assert "probe took" in reason and "limit 0.05 s" in reason
    assert status.probe_time_s >= 0.05


def test_the_policy_sets_the_limit(blocking_info):
    context = ProviderContext(policy=OptimizationPolicy(probe_timeout_s=0.05))
    status = probe_provider(blocking_info, context)
    assert not status.availability.available and "limit 0.05 s" in status.availability.reason


def test_the_environment_sets_the_default(blocking_info, monkeypatch):
    monkeypatch.setenv("DLOPT_PROBE_TIMEOUT_S", "0.05")
    assert default_probe_timeout_s() == 0.05
    status = probe_provider(blocking_info, ProviderContext())
    assert "limit 0.05 s" in status.availability.reason


def test_a_quick_probe_is_unaffected():
    info = ProviderInfo(FakeProvider("quick"), plugin="p")
    status = probe_provider(info, ProviderContext(), timeout_s=30.0)
    assert status.availability.available
    assert probe_provider(info, ProviderContext(), timeout_s=None).availability.available


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "5"])
def test_bad_limits_are_refused(value, monkeypatch):
    with pytest.raises(ConfigurationError, match="probe_timeout_s"):
        OptimizationPolicy(probe_timeout_s=value)
    monkeypatch.setenv("DLOPT_PROBE_TIMEOUT_S", str(value))
    if isinstance(value, str):
        return
    with pytest.raises(ConfigurationError, match="DLOPT_PROBE_TIMEOUT_S"):
        default_probe_timeout_s()


def test_default_is_a_few_seconds(monkeypatch):
    monkeypatch.delenv("DLOPT_PROBE_TIMEOUT_S", raising=False)
    assert default_probe_timeout_s() == DEFAULT_PROBE_TIMEOUT_S
    assert OptimizationPolicy().probe_timeout_s == DEFAULT_PROBE_TIMEOUT_S
