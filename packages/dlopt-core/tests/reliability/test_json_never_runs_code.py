"""Fault class: a JSON file that names code. Loading a policy never imports or calls it.

User metrics in JSON are referred to by the name of a registered metric (the ones dlopt
ships, or one a plugin registers through ``dlopt_register_metrics``) with plain JSON
params; anything else loads as a placeholder that says to pass the metric in code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import attrs
import pytest

from dlopt.errors import ConfigurationError
from dlopt.platform.serialization import dumps, from_jsonable, parse_strict_json
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.testing.plugins import plugin_module
from dlopt.validation import QualityPolicy, UserMetric, psnr, top1_agreement
from dlopt.validation.user_metrics import (
    PsnrFn,
    Top1AgreementFn,
    UnresolvedMetricFn,
    known_metrics,
    metric_fn,
)


def _policy_json(fn: object) -> str:
    return json.dumps(
        {"user_metrics": [{"name": "m", "fn": fn, "limit": 0.5, "direction": "higher"}]}
    )


@pytest.fixture
def recorded_calls(monkeypatch):
    """Replace the usual shell-outs with recorders; nothing may reach them."""
    calls: list[tuple[str, tuple, dict]] = []

    def recorder(label):
        def record(*args, **kwargs):
            calls.append((label, args, kwargs))
            return 0

        return record

    monkeypatch.setattr(subprocess, "run", recorder("subprocess.run"))
    monkeypatch.setattr(os, "system", recorder("os.system"))
    return calls


@pytest.mark.parametrize(
    ("spec", "params"),
    [
        ("subprocess:run", {"args": ["touch", "pwned"]}),
        ("os:system", {"command": "touch pwned"}),
        ("os:system", None),
    ],
)
def test_old_callable_form_never_imports_or_calls(recorded_calls, spec, params, tmp_path):
    policy = from_jsonable(
        parse_strict_json(_policy_json({"callable": spec, "params": params})), QualityPolicy
    )
    fn = policy.user_metrics[0].fn
    assert isinstance(fn, UnresolvedMetricFn)
    assert recorded_calls == []
    # Calling the placeholder explains what to do; it still runs nothing.
    with pytest.raises(ConfigurationError, match=r"pass .* in code"):
        fn(1.0, 1.0)
    assert recorded_calls == []


def test_a_module_named_in_json_is_never_imported(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "dlopt_evil_metric.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef metric(c, r):\n    return 1.0\n"
    )
    monkeypatch.syspath_prepend(str(module_dir))
    for fn in (
        {"callable": "dlopt_evil_metric:metric", "params": None},
        {"unregistered": "dlopt_evil_metric:metric"},
    ):
        policy = from_jsonable(parse_strict_json(_policy_json(fn)), QualityPolicy)
        assert isinstance(policy.user_metrics[0].fn, UnresolvedMetricFn)
    assert not marker.exists()
    assert "dlopt_evil_metric" not in sys.modules


def test_registered_metrics_load_by_name_with_their_params():
    policy = QualityPolicy(user_metrics=(top1_agreement(0.95, dim=1), psnr(30.0, data_range=2.0)))
    text = dumps(policy)
    data = json.loads(text)
    assert data["user_metrics"][0]["fn"] == {"metric": "top1_agreement", "params": {"dim": 1}}
    assert "callable" not in text
    back = from_jsonable(parse_strict_json(text), QualityPolicy)
    assert back == policy
    assert back.user_metrics[0].fn == Top1AgreementFn(1)
    assert back.user_metrics[1].fn == PsnrFn(2.0)
    assert dumps(back) == text


def test_old_reports_naming_dlopt_metrics_still_load_working():
    # The old form named dlopt's own classes: matched by name against the registry.
    fn = {"callable": "dlopt.validation.user_metrics:PsnrFn", "params": {"data_range": 3.0}}
    policy = from_jsonable(parse_strict_json(_policy_json(fn)), QualityPolicy)
    assert policy.user_metrics[0].fn == PsnrFn(3.0)


def test_unknown_metric_name_is_a_clear_error():
    with pytest.raises(Exception) as info:
        from_jsonable(
            parse_strict_json(_policy_json({"metric": "subprocess.run", "params": {}})),
            QualityPolicy,
        )
    text = _all_messages(info.value)
    assert "subprocess.run" in text and "top1_agreement" in text and "psnr" in text


def test_bad_params_for_a_registered_metric_are_a_clear_error():
    with pytest.raises(Exception) as info:
        from_jsonable(
            parse_strict_json(_policy_json({"metric": "psnr", "params": {"nope": 1}})),
            QualityPolicy,
        )
    assert "psnr" in _all_messages(info.value)


def test_unregistered_callables_are_written_by_name_only_and_load_as_placeholders():
    def my_metric(candidate, reference):
        return 1.0

    policy = QualityPolicy(user_metrics=(UserMetric("mine", my_metric, 0.5),))
    text = dumps(policy)
    fn = json.loads(text)["user_metrics"][0]["fn"]
    assert set(fn) == {"unregistered"} and "my_metric" in fn["unregistered"]
    back = from_jsonable(parse_strict_json(text), QualityPolicy)
    assert isinstance(back.user_metrics[0].fn, UnresolvedMetricFn)
    assert dumps(back) == text


@attrs.frozen
class CountAbove:
    """A plugin's metric: the fraction of candidate elements above ``threshold``."""

    threshold: float = 0.0

    def __call__(self, candidate, reference) -> float:
        return float((candidate > self.threshold).float().mean())


def test_a_plugin_registers_a_metric_by_name():
    plugin = plugin_module("count_plugin", metrics={"count_above_test": CountAbove})
    registry = load_providers(
        PluginSettings(autoload=False), extra_plugins=[("count_plugin", plugin)]
    )
    assert registry.failures == []
    assert "count_above_test" in known_metrics()
    assert metric_fn("count_above_test", {"threshold": 0.5}) == CountAbove(0.5)
    policy = QualityPolicy(user_metrics=(UserMetric("c", CountAbove(0.25), 0.1),))
    text = dumps(policy)
    assert json.loads(text)["user_metrics"][0]["fn"] == {
        "metric": "count_above_test",
        "params": {"threshold": 0.25},
    }
    assert from_jsonable(parse_strict_json(text), QualityPolicy).user_metrics[0].fn == CountAbove(
        0.25
    )


@pytest.mark.parametrize(
    ("name", "metric_type", "expected"),
    [
        ("psnr", CountAbove, "already registered"),
        ("../evil", CountAbove, "name"),
        ("plain_function", lambda c, r: 1.0, "attrs class"),
    ],
)
def test_bad_metric_registrations_are_reported_per_plugin(name, metric_type, expected):
    plugin = plugin_module("bad_metrics", metrics={name: metric_type})
    registry = load_providers(
        PluginSettings(autoload=False), extra_plugins=[("bad_metrics", plugin)]
    )
    (failure,) = registry.failures
    assert failure.plugin == "bad_metrics" and failure.stage == "register_metrics"
    assert expected in failure.error
    assert known_metrics()["psnr"] is PsnrFn


def _all_messages(exc: BaseException) -> str:
    parts = [str(exc)]
    for sub in getattr(exc, "exceptions", ()):
        parts.append(_all_messages(sub))
    if exc.__cause__ is not None:
        parts.append(_all_messages(exc.__cause__))
    return " | ".join(parts)


def test_reading_a_policy_never_loads_plugins(monkeypatch):
    """Plugins' metrics are registered by loading the plugins, never by reading a name."""
    from dlopt.plugins import discovery

    loads: list[object] = []
    monkeypatch.setattr(discovery, "load_providers", lambda *a, **k: loads.append(a))
    with pytest.raises(Exception) as info:
        from_jsonable(
            parse_strict_json(_policy_json({"metric": "not_loaded_yet", "params": {}})),
            QualityPolicy,
        )
    assert loads == []
    assert "dlopt.load_providers()" in _all_messages(info.value)


@attrs.frozen
class CountBelow:
    """Another plugin's metric, registered only inside an isolated worker."""

    threshold: float = 0.0

    def __call__(self, candidate, reference) -> float:
        return float((candidate < self.threshold).float().mean())


def test_the_isolated_worker_reads_a_plugin_metric_once_its_plugins_are_loaded(
    monkeypatch, tmp_path
):
    from dlopt.isolation.journal import Heartbeat
    from dlopt.isolation.transfer import WorkerSpec, policy_to_json
    from dlopt.isolation.worker import start_worker
    from dlopt.plugins import discovery
    from dlopt.settings.policy import OptimizationPolicy
    from dlopt.settings.target import ExecutionTarget

    real = discovery.load_providers
    plugin = plugin_module("below_plugin", metrics={"count_below_worker": CountBelow})

    def load_with_plugin(settings=None, **kwargs):
        return real(
            PluginSettings(autoload=False), extra_plugins=[("below_plugin", plugin)], **kwargs
        )

    monkeypatch.setattr(discovery, "load_providers", load_with_plugin)
    policy = policy_to_json(OptimizationPolicy())
    fn = {"metric": "count_below_worker", "params": {"threshold": 0.5}}
    policy["quality"]["user_metrics"] = [json.loads(_policy_json(fn))["user_metrics"][0]]
    Heartbeat(tmp_path / "heartbeat", create=True)
    spec = WorkerSpec(
        target=ExecutionTarget("cpu"),
        policy=policy,
        journal=str(tmp_path / "journal"),
        heartbeat=str(tmp_path / "heartbeat"),
        result=str(tmp_path / "result.json"),
    )
    assert "count_below_worker" not in known_metrics()
    read, watched, _ = start_worker(spec)
    assert read.quality.user_metrics[0].fn == CountBelow(0.5)
    assert watched.policy is read
