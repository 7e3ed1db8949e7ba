"""The tool boundary: structured errors, strict bounded JSON, budgets, one race per workload,
cancellation, and decisions equal to the Python API's."""

from __future__ import annotations

import ast
import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlopt.agents
from dlopt.agents import RESULT_SCHEMA, TOOL_NAMES, OptimizationAgentToolkit, ToolkitLimits
from dlopt.agents.schemas import INSPECT_RUNTIME, LIST_WORKLOADS, OPTIMIZE, READ_REPORT
from dlopt.errors import ConfigurationError
from dlopt.events import EventKind
from dlopt.settings.policy import OptimizationPolicy
from dlopt.testing.fake_race import FakeRace
from dlopt.testing.models import StructuredMLP

from .conftest import BUDGET

ENVELOPE = jsonschema.Draft202012Validator(RESULT_SCHEMA)


def checked(result: dict[str, Any], limit: int = 20_000) -> dict[str, Any]:
    """``result`` after checking it is a strict-JSON envelope within ``limit`` characters."""
    text = json.dumps(result, allow_nan=False)
    assert len(json.dumps(result, allow_nan=False, separators=(",", ":"))) <= limit
    ENVELOPE.validate(result)
    assert json.loads(text) == result  # plain JSON types only: nothing lost on the way
    return result


def error_code(result: dict[str, Any]) -> str:
    assert checked(result)["ok"] is False, result
    return str(result["error"]["code"])


def wait_until(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    return thread, box


def _held_race(make_toolkit: Any) -> tuple[Any, dict[str, Any], Any, threading.Thread, list[Any]]:
    """An OPTIMIZE of ``w`` running in a thread, held in the gated ``fast`` plan's build:
    ``(toolkit, providers, gated, thread, box)``."""
    toolkit, _, providers = make_toolkit(gated=True)
    gated = providers["fast"]
    thread, box = in_thread(lambda: toolkit.invoke(OPTIMIZE, {"workload": "w"}))
    assert gated.started.wait(20)
    return toolkit, providers, gated, thread, box


def _release(gated: Any, thread: threading.Thread) -> None:
    """Let the held build go on and wait for the call to return."""
    gated.gate.set()
    thread.join(20)


# -- structured errors ----------------------------------------------------------------


def test_unknown_tool_is_a_structured_error_listing_the_tools(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    result = toolkit.invoke("dlopt_delete_everything", {})
    assert error_code(result) == "unknown_tool"
    assert result["error"]["details"]["tools"] == list(TOOL_NAMES)
    assert error_code(toolkit.invoke(42, {})) == "unknown_tool"


@pytest.mark.parametrize("tool", [OPTIMIZE, READ_REPORT])
def test_unknown_workload_is_a_structured_error_listing_the_workloads(make_toolkit, tool) -> None:
    toolkit, _, providers = make_toolkit()
    result = toolkit.invoke(tool, {"workload": "resnet"})
    assert error_code(result) == "unknown_workload"
    assert result["error"]["details"]["workloads"] == ["w"]
    assert providers["fast"].builds == 0


def test_reading_before_optimizing_and_unknown_candidates(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    assert error_code(toolkit.invoke(READ_REPORT, {"workload": "w"})) == "no_decision"
    assert checked(toolkit.invoke(OPTIMIZE, {"workload": "w"}))["ok"]
    result = toolkit.invoke(READ_REPORT, {"workload": "w", "candidate": "tensorrt_fp16"})
    assert error_code(result) == "unknown_candidate"
    assert result["error"]["details"]["candidates"] == ["eager_fp32", "fast"]


@pytest.mark.parametrize(
    "arguments",
    [
        {"workload": "w", "model": "torchvision.models:resnet50"},  # unknown field
        {"workload": 7},  # wrong type
        {"workload": "w", "min_speedup": "1.1"},
        {"workload": "w", "min_speedup": True},
        {"workload": "w", "min_speedup": 0.5},  # below the host's floor
        {"workload": "w", "measurement": {"max_time_s": 5.5}},  # above the cap
        {"workload": "w", "measurement": {"max_rounds": 2}},  # below min_rounds
        {"workload": "w", "measurement": {"max_rounds": 3.5}},
        {"workload": "w", "measurement": {"seed": 1}},  # not an agent's field
        {"workload": "w", "objective": "throughput"},
        {"workload": "w", "include": "fast"},
        {"workload": "w", "include": ["fast", "fast"]},
        {"workload": "../../etc/passwd"},  # names never become paths
        {"workload": "w", "exclude": ["/tmp/plan"]},
        {"workload": "w", "min_speedup": math.nan},  # not JSON at all
        {"workload": "w", "min_speedup": math.inf},
        {"workload": "w", "include": ("fast",)},
        {"workload": b"w"},
        {},  # workload is required
        [],
        "not json",
        '{"workload": NaN}',
        '["w"]',
        "x" * 70_000,
        "[" * 60_000,  # nested past the parser's depth
        {"workload": "w", "measurement": {"a": [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]}},
    ],
)
def test_invalid_arguments_are_refused_before_anything_runs(make_toolkit, arguments) -> None:
    toolkit, _, providers = make_toolkit()
    result = toolkit.invoke(OPTIMIZE, arguments)
    assert error_code(result) == "invalid_arguments", result
    assert providers["fast"].builds == 0
    assert len(result["error"]["message"]) <= 1_100


def test_a_validation_message_says_where_and_what(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    message = toolkit.invoke(OPTIMIZE, {"workload": "w", "measurement": {"max_time_s": 99}})[
        "error"
    ]["message"]
    assert message.startswith("measurement.max_time_s:") and "maximum of 5.0" in message


def test_arguments_may_come_as_json_text(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    result = checked(toolkit.invoke(OPTIMIZE, '{"workload": "w", "min_speedup": 1.05}'))
    assert result["ok"] and result["result"]["min_speedup"] == 1.05


def test_a_failing_selection_is_a_structured_error(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    toolkit.register_workload("bad", StructuredMLP(), torch.randn(4, 3))  # wrong width
    result = toolkit.invoke(OPTIMIZE, {"workload": "bad"})
    assert error_code(result) == "optimization_failed"
    assert "ReferenceCheckError" in result["error"]["message"]


def test_a_plan_name_that_matches_no_plan_is_a_configuration_error(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    result = toolkit.invoke(OPTIMIZE, {"workload": "w", "exclude": ["fastt"]})
    assert error_code(result) == "configuration_error"
    assert "did you mean 'fast'" in result["error"]["message"]


# -- decisions ---------------------------------------------------------------------


def test_optimize_then_read_report_gives_the_python_apis_decision(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    optimized = checked(toolkit.invoke(OPTIMIZE, {"workload": "w"}))["result"]
    summary = checked(toolkit.invoke(READ_REPORT, {"workload": "w"}))["result"]

    # The same race through the Python API: same fakes, same seeds, same fake clock.
    race = FakeRace()
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3), **BUDGET)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(3))
    with optimizer.select_signature(StructuredMLP(), x) as decision:
        expected = decision.report

    for seen in (optimized, summary):
        assert seen["selected_plan"] == expected.selected_plan == "fast"
        assert seen["baseline"] == expected.baseline
        assert seen["selection_reason"] == expected.selection_reason
        assert [(c["name"], c["status"]) for c in seen["candidates"]] == [
            (c.name, c.status.value) for c in expected.candidates
        ]
    assert optimized["time_limit_reached"] is False
    call_only = ("joined", "time_limit_reached")
    assert {k: v for k, v in optimized.items() if k not in call_only} == summary

    evidence = checked(toolkit.invoke(READ_REPORT, {"workload": "w", "candidate": "fast"}))
    cand = evidence["result"]["candidate"]
    assert cand["name"] == "fast" and cand["status"] == "selected"
    assert cand["latency_ms"] == pytest.approx(expected.candidate("fast").latency_ms)


def test_the_host_takes_the_decision_and_serves_it(make_toolkit, x) -> None:
    toolkit, _, providers = make_toolkit()
    toolkit.invoke(OPTIMIZE, {"workload": "w"})
    decision = toolkit.take_decision("w")
    assert decision is not None and decision.selected_plan == "fast"
    torch.testing.assert_close(decision(x), StructuredMLP()(x))
    assert toolkit.take_decision("w") is None
    assert toolkit.report("w") is decision.report  # the report stays readable
    toolkit.close()
    assert providers["fast"].closes == 0  # the host owns it now
    decision.close()


def test_a_newer_decision_closes_the_one_it_replaces(make_toolkit) -> None:
    toolkit, _, providers = make_toolkit()
    toolkit.invoke(OPTIMIZE, {"workload": "w"})
    toolkit.invoke(OPTIMIZE, {"workload": "w"})
    assert providers["fast"].builds == 2 and providers["fast"].closes == 1
    toolkit.close()
    assert providers["fast"].closes == 2


def test_list_workloads_shows_signatures_and_the_latest_decision(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    (listed,) = checked(toolkit.invoke(LIST_WORKLOADS))["result"]["workloads"]
    assert listed["name"] == "w" and listed["description"] == "a small MLP, batch 4"
    assert listed["cases"] == [{"name": "w", "weight": 1.0, "inputs": "args[0]: float32[4, 16]"}]
    assert listed["latest_decision"] is None and listed["optimizing"] is False
    toolkit.invoke(OPTIMIZE, {"workload": "w"})
    (listed,) = toolkit.invoke(LIST_WORKLOADS)["result"]["workloads"]
    assert listed["latest_decision"]["selected_plan"] == "fast"


def test_inspect_runtime_lists_the_optimizers_plans_and_the_hosts_caps(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit(ToolkitLimits(max_races=3, max_measure_time_s=2.0))
    result = checked(toolkit.invoke(INSPECT_RUNTIME, {}))["result"]
    plans = {p["name"]: p for p in result["providers"]}
    assert {"eager_fp32", "fast"} <= set(plans)
    assert plans["eager_fp32"]["role"] == "reference" and plans["fast"]["available"]
    assert result["runtime"]["torch"] == torch.__version__
    host = result["host_policy"]
    assert host["races_left"] == 3 and host["measurement_cap"]["max_time_s"] == 2.0
    assert host["include"] == ["eager_fp32", "fast"]


# -- budgets -----------------------------------------------------------------------


def test_the_agents_budget_is_what_the_race_gets(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    result = toolkit.invoke(
        OPTIMIZE, {"workload": "w", "measurement": {"max_time_s": 0.5, "max_rounds": 3}}
    )
    measurement = checked(result)["result"]["measurement"]
    assert (measurement["max_time_s"], measurement["max_rounds"]) == (0.5, 3)
    assert measurement["rounds"] <= 3
    policy = toolkit.report("w").measurement.policy
    assert (policy.max_time_s, policy.max_rounds) == (0.5, 3)


def test_without_a_budget_the_race_gets_the_hosts_cap(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit(ToolkitLimits(max_measure_time_s=1.5, max_rounds=6))
    toolkit.invoke(OPTIMIZE, {"workload": "w"})
    policy = toolkit.report("w").measurement.policy
    assert (policy.max_time_s, policy.max_rounds) == (1.5, 6)


def test_the_hosts_exclusions_stand(race, x) -> None:
    fast = race.fake("fast", 1e-3)
    host = race.optimizer(race.fake("eager_fp32", 2e-3), fast, **BUDGET)
    host.policy = OptimizationPolicy(
        measurement=host.policy.measurement, include=("eager_fp32", "fast"), exclude=("fast",)
    )
    with OptimizationAgentToolkit(host) as toolkit:
        toolkit.register_workload("w", StructuredMLP(), x)
        result = toolkit.invoke(OPTIMIZE, {"workload": "w", "include": ["fast"]})
        assert error_code(result) == "invalid_arguments" and "'fast'" in result["error"]["message"]
        summary = checked(toolkit.invoke(OPTIMIZE, {"workload": "w", "exclude": []}))["result"]
        assert "fast" not in [c["name"] for c in summary["candidates"]]
    assert fast.builds == 0


def test_agent_settings_reach_the_policy(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    result = toolkit.invoke(
        OPTIMIZE,
        {
            "workload": "w",
            "objective": "lifecycle_latency",
            "expected_calls": 1000,
            "min_speedup": 1.5,
            "exclude": ["fast"],
        },
    )
    summary = checked(result)["result"]
    assert summary["objective"] == "lifecycle_latency" and summary["min_speedup"] == 1.5
    assert summary["selected_plan"] == "eager_fp32"
    assert toolkit.report("w").constraints.expected_calls == 1000


def test_the_race_budget_is_spent_then_refused(make_toolkit) -> None:
    toolkit, _, providers = make_toolkit(ToolkitLimits(max_races=1))
    assert checked(toolkit.invoke(OPTIMIZE, {"workload": "w"}))["ok"]
    assert error_code(toolkit.invoke(OPTIMIZE, {"workload": "w"})) == "budget_exhausted"
    assert providers["fast"].builds == 1
    assert checked(toolkit.invoke(READ_REPORT, {"workload": "w"}))["ok"]


def test_a_call_past_the_hosts_time_limit_stops(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit(ToolkitLimits(max_call_s=1e-9))
    assert error_code(toolkit.invoke(OPTIMIZE, {"workload": "w"})) == "time_limit"
    assert toolkit.report("w") is None and toolkit.in_flight() == {}


# -- concurrency and cancellation -----------------------------------------------------


def test_two_concurrent_optimize_calls_for_one_workload_run_one_race(make_toolkit) -> None:
    toolkit, _, gated, first, first_box = _held_race(make_toolkit)
    second, second_box = in_thread(lambda: toolkit.invoke(OPTIMIZE, '{"workload": "w"}'))
    wait_until(lambda: toolkit.in_flight() == {"w": 1})  # the second call is waiting
    listed = toolkit.invoke(LIST_WORKLOADS)["result"]["workloads"]
    assert listed[0]["optimizing"] is True
    _release(gated, first)
    second.join(20)
    (one,), (two,) = first_box, second_box
    assert gated.inner.builds == 1  # one race
    assert checked(one)["result"]["joined"] is False and checked(two)["result"]["joined"] is True
    assert one["result"]["selected_plan"] == two["result"]["selected_plan"] == "fast"
    assert toolkit.in_flight() == {}


def test_a_concurrent_call_with_other_settings_is_told_busy(make_toolkit) -> None:
    toolkit, _, gated, first, box = _held_race(make_toolkit)
    busy = toolkit.invoke(OPTIMIZE, {"workload": "w", "min_speedup": 1.2})
    assert error_code(busy) == "busy"
    with pytest.raises(ConfigurationError, match="being optimized"):
        toolkit.register_workload("w", StructuredMLP(), torch.randn(4, 16))
    _release(gated, first)
    assert checked(box[0])["ok"] and gated.inner.builds == 1


def test_the_host_cancels_a_running_call_and_its_plans_are_closed(make_toolkit) -> None:
    toolkit, providers, gated, first, first_box = _held_race(make_toolkit)
    second, second_box = in_thread(lambda: toolkit.invoke(OPTIMIZE, {"workload": "w"}))
    wait_until(lambda: toolkit.in_flight() == {"w": 1})
    assert toolkit.cancel("other") == 0
    assert toolkit.cancel("w") == 1
    _release(gated, first)
    second.join(20)
    assert error_code(first_box[0]) == "cancelled"
    assert error_code(second_box[0]) == "cancelled"  # the joined call shares the outcome
    assert providers["eager_fp32"].closes == 1 and gated.inner.closes == 1
    assert toolkit.report("w") is None and toolkit.take_decision("w") is None
    # A cancellation is not remembered: the next call races.
    assert checked(toolkit.invoke(OPTIMIZE, {"workload": "w"}))["ok"]


def test_a_cancel_before_the_race_builds_no_more_plans(make_toolkit) -> None:
    toolkit, _, providers = make_toolkit(gated="eager_fp32")
    gated = providers["eager_fp32"]
    first, box = in_thread(lambda: toolkit.invoke(OPTIMIZE, {"workload": "w"}))
    assert gated.started.wait(20)
    assert toolkit.cancel("w") == 1
    _release(gated, first)
    assert error_code(box[0]) == "cancelled"
    assert "before" in box[0]["error"]["message"]
    assert providers["fast"].builds == 0 and gated.inner.closes == 1
    assert toolkit.report("w") is None and toolkit.in_flight() == {}


def _on_first_round(action: Any) -> Any:
    """A host observer that runs ``action`` once, when the race's first round ends."""
    done = threading.Event()

    def observe(event: Any) -> None:
        if event.kind is EventKind.ROUND_FINISHED and not done.is_set():
            done.set()
            action()

    return observe


def test_a_host_cancel_during_the_race_ends_it_and_keeps_no_decision(make_toolkit) -> None:
    toolkits: list[OptimizationAgentToolkit] = []
    observer = _on_first_round(lambda: toolkits[0].cancel("w"))
    toolkit, _, providers = make_toolkit(observers=(observer,))
    toolkits.append(toolkit)
    result = toolkit.invoke(OPTIMIZE, {"workload": "w"})
    assert error_code(result) == "cancelled"
    assert "during the race" in result["error"]["message"]
    # The decision the cut-short race made is released with every plan, not stored.
    assert providers["eager_fp32"].closes == 1 and providers["fast"].closes == 1
    assert toolkit.report("w") is None and toolkit.take_decision("w") is None
    assert checked(toolkit.invoke(OPTIMIZE, {"workload": "w"}))["ok"]


def test_the_time_limit_reached_during_the_race_returns_the_decision_of_the_rounds_run(
    make_toolkit, monkeypatch
) -> None:
    import dlopt.agents.toolkit as toolkit_module

    expired = threading.Event()
    monkeypatch.setattr(toolkit_module, "_now", lambda: 1e9 if expired.is_set() else 0.0)
    toolkit, _, providers = make_toolkit(
        ToolkitLimits(max_call_s=60.0), observers=(_on_first_round(expired.set),)
    )
    result = checked(toolkit.invoke(OPTIMIZE, {"workload": "w"}))
    assert result["ok"], result
    summary = result["result"]
    assert summary["time_limit_reached"] is True
    assert summary["measurement"]["stop_reason"] == "cancelled"
    assert summary["measurement"]["rounds"] == 1  # it stopped at the first check after
    # Every plan but the one the decision serves was released.
    closed = {name for name, p in providers.items() if p.closes}
    assert closed == {"eager_fp32", "fast"} - {summary["selected_plan"]}
    decision = toolkit.take_decision("w")
    assert decision is not None and decision.selected_plan == summary["selected_plan"]
    decision.close()


def test_a_full_race_within_the_time_limit_is_not_flagged(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit(ToolkitLimits(max_call_s=3600.0))
    summary = checked(toolkit.invoke(OPTIMIZE, {"workload": "w"}))["result"]
    assert summary["time_limit_reached"] is False
    assert summary["measurement"]["stop_reason"] != "cancelled"


def test_dlopt_exports_the_toolkit() -> None:
    import dlopt

    assert dlopt.OptimizationAgentToolkit is OptimizationAgentToolkit
    assert dlopt.ToolkitLimits is ToolkitLimits


def test_a_call_waiting_for_another_workloads_race_can_be_cancelled(make_toolkit) -> None:
    toolkit, _, providers = make_toolkit(gated=True)
    toolkit.register_workload("w2", StructuredMLP(), torch.randn(2, 16))
    gated = providers["fast"]
    first, first_box = in_thread(lambda: toolkit.invoke(OPTIMIZE, {"workload": "w"}))
    assert gated.started.wait(20)
    second, second_box = in_thread(lambda: toolkit.invoke(OPTIMIZE, {"workload": "w2"}))
    wait_until(lambda: set(toolkit.in_flight()) == {"w", "w2"})
    assert toolkit.cancel("w2") == 1
    second.join(20)
    assert error_code(second_box[0]) == "cancelled"  # it never raced
    _release(gated, first)
    assert checked(first_box[0])["ok"] and gated.inner.builds == 1


def test_inspecting_waits_for_a_running_race(make_toolkit) -> None:
    toolkit, _, gated, race, race_box = _held_race(make_toolkit)
    inspect, inspect_box = in_thread(lambda: toolkit.invoke(INSPECT_RUNTIME))
    inspect.join(0.5)
    assert inspect_box == []  # no probe runs while plans are being built and timed
    _release(gated, race)
    inspect.join(20)
    assert checked(race_box[0])["ok"] and checked(inspect_box[0])["ok"]


# -- bounded, strict results ---------------------------------------------------------


def test_results_stay_within_the_hosts_size_limit(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit(ToolkitLimits(max_result_chars=2_000))
    for i in range(30):
        toolkit.register_workload(
            f"{i:02d}" + "w" * 98, StructuredMLP(), torch.randn(4, 16), description="d" * 5000
        )
    toolkit.invoke(OPTIMIZE, {"workload": "w"})
    results = [
        checked(toolkit.invoke(tool, arguments), limit=2_000)
        for tool, arguments in [
            (INSPECT_RUNTIME, {}),
            (LIST_WORKLOADS, {}),
            (READ_REPORT, {"workload": "w"}),
            (READ_REPORT, {"workload": "w", "candidate": "fast"}),
            ("x" * 5000, {}),
            (OPTIMIZE, {"workload": "y" * 100}),
        ]
    ]
    listed = results[1]
    shown = listed["result"]["workloads"]
    assert listed["truncated"] is True and shown[0]["name"] == "w"
    assert shown[-1] == f"...[{31 - (len(shown) - 1)} more items]"  # says how many are left out
    evidence = results[3]
    assert evidence["truncated"] is True or evidence["error"]["code"] == "result_too_large"
    assert results[5]["error"]["code"] == "unknown_workload"


def test_evidence_names_artifacts_without_host_paths(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    toolkit.invoke(OPTIMIZE, {"workload": "w"})
    cand = toolkit.invoke(READ_REPORT, {"workload": "w", "candidate": "fast"})["result"]
    assert isinstance(cand["candidate"]["artifacts"], list)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["w", "fast", "eager_fp32", "lifecycle_latency", "../x"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "workload",
        "candidate",
        "objective",
        "min_speedup",
        "expected_calls",
        "include",
        "exclude",
        "measurement",
        "max_time_s",
        "max_rounds",
    ]
) | st.text(max_size=8)
ODD = st.sampled_from([math.nan, -math.inf, (1, 2), b"w", {1, 2}, object(), Path("/etc")])
ARGUMENTS = (
    st.dictionaries(KEYS, JSON | ODD | st.dictionaries(KEYS, JSON, max_size=3), max_size=5)
    | JSON
    | JSON.map(lambda v: json.dumps(v))
    | st.text(max_size=40)
    | ODD
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    tool=st.sampled_from(TOOL_NAMES) | st.text(max_size=12),
    arguments=ARGUMENTS,
    workload=st.sampled_from(["w", "missing"]) | st.none(),
)
def test_fuzzed_calls_never_raise_and_give_strict_bounded_json(
    make_toolkit, tool, arguments, workload
) -> None:
    toolkit, _, _ = make_toolkit(ToolkitLimits(max_result_chars=4_000))
    if workload is not None and isinstance(arguments, dict):
        arguments = {**arguments, "workload": workload}
    checked(toolkit.invoke(tool, arguments), limit=4_000)


# -- registration and the closed surface -------------------------------------------


def test_registration_refuses_unsafe_names_and_silent_replacement(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    model, x = StructuredMLP(), torch.randn(4, 16)
    for name in ["../w", "a/b", "", ".hidden", "x" * 101]:
        with pytest.raises(ConfigurationError, match="plain name"):
            toolkit.register_workload(name, model, x)
    with pytest.raises(ConfigurationError, match="replace=True"):
        toolkit.register_workload("w", model, x)
    with pytest.raises(ConfigurationError, match=r"torch\.nn\.Module"):
        toolkit.register_workload("f", lambda v: v, x)
    with pytest.raises(ConfigurationError, match="InferenceOptimizer"):
        OptimizationAgentToolkit("cpu")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"max_result_chars": 100}, "max_result_chars"),
        ({"max_measure_time_s": 0}, "max_measure_time_s"),
        ({"max_rounds": 2}, "max_rounds"),
        ({"min_speedup_range": (2.0, 1.0)}, "lowest 2.0 is above highest 1.0"),
        ({"min_speedup_range": (1.0,)}, r"\(lowest, highest\)"),
        ({"max_races": -1}, "max_races"),
    ],
)
def test_limits_refuse_what_cannot_bound_anything(limits, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ToolkitLimits(**limits)


def test_caps_below_the_policys_min_rounds_are_refused(make_toolkit) -> None:
    with pytest.raises(ConfigurationError, match="below the optimizer policy's min_rounds"):
        make_toolkit(ToolkitLimits(max_rounds=3), min_rounds=4)


def test_the_toolkit_source_runs_no_code_paths_or_network() -> None:
    """No tool can reach code, files or sockets: the package imports and calls none."""
    forbidden_modules = {"importlib", "subprocess", "socket", "urllib", "http", "pickle", "os"}
    forbidden_calls = {"eval", "exec", "open", "__import__", "compile", "getattr"}
    root = Path(dlopt.agents.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                names = []
            assert not {n.split(".")[0] for n in names} & forbidden_modules, (path.name, names)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "getattr":  # only constant attribute names
                    assert isinstance(node.args[1], ast.Constant), (path.name, node.lineno)
                    continue
                assert node.func.id not in forbidden_calls, (path.name, node.func.id)
