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


class FakeRay:
    """Just enough of Ray for ``run_fleet``: tasks finish in submission order, and a
    Ctrl-C arrives after ``interrupt_after`` of them."""

    def __init__(self, interrupt_after: int | None = None) -> None:
        self.interrupt_after = interrupt_after
        self.decorator: dict = {}
        self.submitted: list[tuple[dict, dict]] = []
        self.cancelled: list[int] = []
        self.finished = 0

    def remote(self, **decorator):
        self.decorator = decorator
        fake = self

        class Options:
            def __init__(self, options):
                self.options_given = options

            def remote(self, payload):
                fake.submitted.append((self.options_given, payload))
                return len(fake.submitted) - 1

        class Remote:
            def options(self, **options):
                return Options(options)

        return lambda function: Remote()

    def wait(self, refs, num_returns, timeout):
        if self.interrupt_after is not None and self.finished >= self.interrupt_after:
            raise KeyboardInterrupt
        self.finished += 1
        return [min(refs)], []

    def get(self, ref):
        from dlopt.platform.serialization import to_jsonable

        payload = self.submitted[ref][1]
        return to_jsonable(fleet_result(job=payload["job"], kind=payload["kind"]))

    def cancel(self, ref, recursive):
        self.cancelled.append(ref)

    def nodes(self):
        return [{"Alive": True, "Resources": {RACE_RESOURCE: 1.0, "sim_a": 1.0}, "Labels": {}}]


def fake_fleet(monkeypatch, tmp_path, fake, **run_options):
    import dlopt.fleet.runner as runner
    from dlopt.fleet.spec import resolve_jobs

    spec = parse_spec(
        {
            "name": "s",
            "store": str(tmp_path / "store"),
            "kinds": {
                "a": {"resources": {"sim_a": 1}},
                "b": {"labels": {"pool": "b"}},
                "g": {"resources": {"sim_g": 1, "GPU": 1}, "device": "cuda"},
            },
            "jobs": [
                {"name": "one", "model": "demo_mlp", "kinds": ["a", "b"]},
                {"name": "two", "model": "demo_mlp", "kinds": ["a", "g"]},
            ],
        }
    )
    monkeypatch.setattr(runner, "connect", lambda address, spec, timeout_s: fake)
    lines: list[str] = []
    outcome = runner.run_fleet(
        spec,
        resolve_jobs(spec, allow_imports=False),
        address="auto",
        echo=lines.append,
        **run_options,
    )
    return outcome, lines


def test_each_race_asks_for_its_kind_and_one_race_unit_and_is_never_retried_for_an_error(
    monkeypatch, tmp_path
):
    fake = FakeRay()
    outcome, lines = fake_fleet(monkeypatch, tmp_path, fake)
    assert fake.decorator == {"max_retries": 3, "retry_exceptions": False}
    placed = [(p["job"], p["kind"], o) for o, p in fake.submitted]
    assert [(job, kind) for job, kind, _ in placed] == [
        ("one", "a"),
        ("one", "b"),
        ("two", "a"),
        ("two", "g"),
    ]
    one_a, one_b, two_g = placed[0][2], placed[1][2], placed[3][2]
    assert one_a["resources"] == {RACE_RESOURCE: 1, "sim_a": 1} and one_a["num_cpus"] == 1
    assert "label_selector" not in one_a and "num_gpus" not in one_a
    assert one_b["resources"] == {RACE_RESOURCE: 1} and one_b["label_selector"] == {"pool": "b"}
    # Ray's own GPU is asked for by keyword (Ray refuses it inside ``resources``).
    assert two_g["resources"] == {RACE_RESOURCE: 1, "sim_g": 1} and two_g["num_gpus"] == 1
    # One run id for every race of the run (attempts are counted per run).
    assert len({p["run"] for _, p in fake.submitted}) == 1
    assert [r.job for r in outcome.results] == ["one", "one", "two", "two"]
    # No live node has pool=b: said before the races wait for one.
    assert any("no node of kind b is up" in line for line in lines)
    assert any("no node of kind g is up" in line for line in lines)
    assert not any("no node of kind a" in line for line in lines)


def test_ctrl_c_cancels_what_is_left_and_says_what_finished(monkeypatch, tmp_path):
    fake = FakeRay(interrupt_after=1)
    outcome, lines = fake_fleet(monkeypatch, tmp_path, fake)
    assert outcome.interrupted
    assert [(r.job, r.kind) for r in outcome.results] == [("one", "a")]
    assert outcome.cancelled == (("one", "b"), ("two", "a"), ("two", "g"))
    assert sorted(fake.cancelled) == [1, 2, 3]
    assert "dlopt fleet: finished: one@a; cancelled: 3" in lines


def test_without_ray_the_fleet_says_how_to_install_it(monkeypatch):
    import sys

    from dlopt.fleet.runner import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # ``import ray`` raises ImportError
    with pytest.raises(ConfigurationError, match=r"pip install 'dlopt-core\[fleet\]'"):
        import_ray()


class NodeLossRay(FakeRay):
    """A cluster whose one ``sim_a`` node dies after the first look at the nodes: the
    races of kind ``a`` that have not finished then wait, as Ray's retry does, for a node
    that never comes; kind ``b``'s node stays and its races finish."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    def wait(self, refs, num_returns, timeout):
        kinds = {ref: self.submitted[ref][1]["kind"] for ref in refs}
        done = [ref for ref in refs if kinds[ref] != "a"]
        return done[:1], []

    def nodes(self):
        self.looks += 1
        node_a = {
            "NodeID": "aaaa1111" + "0" * 48,
            "Alive": self.looks == 1,
            "Resources": {RACE_RESOURCE: 1.0, "sim_a": 1.0},
            "Labels": {},
        }
        node_b = {
            "NodeID": "bbbb2222" + "0" * 48,
            "Alive": True,
            "Resources": {RACE_RESOURCE: 1.0, "sim_g": 1.0, "GPU": 1.0},
            "Labels": {"pool": "b"},
        }
        return [node_a, node_b]


def test_the_races_of_a_kind_whose_last_node_left_are_reported_lost(monkeypatch, tmp_path):
    from dlopt.fleet.result_store import ResultStore

    fake = NodeLossRay()
    outcome, lines = fake_fleet(monkeypatch, tmp_path, fake, lost_node_wait_s=0.0)
    results = {(r.job, r.kind): r for r in outcome.results}
    assert set(results) == {("one", "a"), ("one", "b"), ("two", "a"), ("two", "g")}
    lost = [results[("one", "a")], results[("two", "a")]]
    assert [r.status for r in lost] == ["lost", "lost"]
    assert all("the last node of kind a (node aaaa1111) left the cluster" in r.error for r in lost)
    assert results[("one", "b")].status == "done" and results[("two", "g")].status == "done"
    # Their tasks are cancelled, the rest finished; the run counts them as failures.
    assert sorted(fake.cancelled) == [0, 2]
    assert len(outcome.failed) == 2 and not outcome.cancelled
    assert any(line.endswith("one@a: " + lost[0].error) for line in lines)
    # Stored like every result, for status and report.
    stored = ResultStore.open(str(tmp_path / "store")).read_result("s", "one", "a")
    assert stored is not None and stored.status == "lost"


def test_a_kind_that_never_had_a_node_keeps_waiting(monkeypatch, tmp_path):
    # Kind a's node is never alive: its races wait for one to join (Ctrl-C or --timeout
    # end the wait), they are not "lost".
    fake = NodeLossRay()
    fake.looks = 1
    outcome, _ = fake_fleet(monkeypatch, tmp_path, fake, lost_node_wait_s=0.0, timeout_s=1.5)
    assert {(r.job, r.kind) for r in outcome.results} == {("one", "b"), ("two", "g")}
    assert sorted(outcome.cancelled) == [("one", "a"), ("two", "a")]
