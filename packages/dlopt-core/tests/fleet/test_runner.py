"""The runner's decisions that need no Ray: what a local instance advertises, which kinds
no node of a cluster can race, and what a progress line says."""

from __future__ import annotations

import pytest
from fleet_results import fleet_result

from dlopt.errors import ConfigurationError
from dlopt.evidence.report import RatioInterval
from dlopt.fleet.runner import kinds_without_a_node, local_node_settings, progress_line
from dlopt.fleet.spec import RACE_RESOURCE, parse_spec


def spec_with(kinds):
    return parse_spec(
        {
            "name": "s",
            "store": "/x",
            "kinds": kinds,
            "jobs": [{"name": "j", "model": "demo_mlp", "kinds": list(kinds)}],
        }
    )


def test_a_local_instance_stands_in_for_every_kind_with_one_race_unit():
    spec = spec_with(
        {
            "a": {"resources": {"sim_a": 1, "CPU": 1}},
            "b": {"resources": {"sim_a": 2, "sim_b": 1}},
            "c": {"labels": {"pool": "c"}},
        }
    )
    resources, labels = local_node_settings(spec)
    # Ray's own CPU is detected, not declared; one race unit, whatever the kinds.
    assert resources == {RACE_RESOURCE: 1.0, "sim_a": 2.0, "sim_b": 1.0}
    assert labels == {"pool": "c"}


@pytest.mark.parametrize(
    ("kinds", "message"),
    [
        ({"h": {"labels": {"ray.io/accelerator-type": "H200"}}}, "Ray sets ray.io/ labels"),
        (
            {"a": {"labels": {"pool": "a"}}, "b": {"labels": {"pool": "b"}}},
            "one node and cannot have label 'pool' = 'b'",
        ),
    ],
)
def test_kinds_a_local_instance_cannot_stand_in_for_are_refused(kinds, message):
    with pytest.raises(ConfigurationError, match=message):
        local_node_settings(spec_with(kinds))


def test_kinds_without_a_live_node_are_named():
    spec = spec_with(
        {
            "a": {"resources": {"sim_a": 1}},
            "h": {"labels": {"ray.io/accelerator-type": "H200"}},
            "not_h": {"labels": {"ray.io/accelerator-type": "!H200"}},
        }
    )
    cpu = {"Alive": True, "Resources": {"CPU": 8.0, "sim_a": 1.0}, "Labels": {}}
    gpu = {
        "Alive": False,
        "Resources": {RACE_RESOURCE: 1.0},
        "Labels": {"ray.io/accelerator-type": "H200"},
    }
    kinds = ["a", "h", "not_h"]
    # No live node has a race unit: no kind can race.
    assert kinds_without_a_node(spec, kinds, [cpu, gpu]) == kinds
    cpu["Resources"][RACE_RESOURCE] = 1.0
    # The CPU node races a; h needs the (dead) H200 node; a selector Ray evaluates
    # (!H200) is left to Ray.
    assert kinds_without_a_node(spec, kinds, [cpu, gpu]) == ["h"]
    gpu["Alive"] = True
    assert kinds_without_a_node(spec, kinds, [cpu, gpu]) == []


def test_a_progress_line_names_the_plan_interval_node_and_culprits():
    done = fleet_result(
        job="mlp",
        kind="a",
        node_id="1a2b3c4d5e6f",
        time_to_decision_s=14.24,
        speedup=RatioInterval(1.31, 1.12, 1.52, confidence=0.95, method="t", rounds=9),
    )
    line = progress_line(done)
    assert line.startswith("mlp@a: fast 1.31x [1.12, 1.52] in 14.2 s on node 1a2b3c4d")
    assert line.endswith("bad crashed at measure (SIGSEGV)")
    failed = fleet_result(job="mlp", kind="a", status="failed", node_id=None, error="it raised")
    assert progress_line(failed) == "mlp@a: failed: it raised"
