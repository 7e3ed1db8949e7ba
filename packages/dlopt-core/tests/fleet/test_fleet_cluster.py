"""The fleet on a real Ray cluster: a head and a second node started on this machine with
``ray start``, each advertising its own machine kind and one ``dlopt_race`` unit, joined
by ``dlopt fleet run SPEC --address auto`` as a user would on a cluster node.

The spec races one job on both kinds. Each race must run on the node of its kind; the
second node is killed while its race runs, and with no other node of that kind left the
race is reported ``lost``, naming the node, while the other kind's race decides.

The cluster is this test's own: its ports are free ones picked now, its Ray temp
directory is new, token authentication is off for it (a machine may hold another
cluster's token), and every process it started is ended when the test ends, passed or
failed (the nodes' process groups, then any process still naming its temp directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from attrs import frozen

pytest.importorskip("ray", reason="the fleet extra is not installed (dlopt-core[fleet])")

from dlopt.fleet.result_store import ResultStore
from dlopt.platform.processes import descendants

pytestmark = pytest.mark.slow

RAY = Path(sys.executable).parent / "ray"
KINDS = ("kind_a", "kind_b")
SPEC = """
name = "cluster"
store = "{store}"

[kinds.kind_a]
resources = {{ kind_a = 1 }}
[kinds.kind_b]
resources = {{ kind_b = 1 }}

[[jobs]]
name = "mlp"
model = "demo_mlp"
kinds = ["kind_a", "kind_b"]
[jobs.policy]
include = ["eager_fp32", "native_channels_last"]
# Each race runs in full on its node (no plan skipped, no record of the other kind's race
# reused), so the second one is still running when its node dies.
exhaustive = true
reuse_cached_plan = false
measurement = {{ max_time_s = 1.0, seed = 3 }}
"""
#: Lists the live node of each kind once every kind has one (at most 90 s).
NODES_OF_KINDS = """
import json, sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
wanted, deadline, found = set(sys.argv[2:]), time.time() + 90, {}
while set(found) != wanted and time.time() < deadline:
    time.sleep(0.5)
    found = {r: n["NodeID"] for n in ray.nodes() if n["Alive"] for r in n["Resources"] if r in wanted}
print(json.dumps(found))
ray.shutdown()
"""


@frozen
class Cluster:
    address: str
    env: dict[str, str]
    nodes: dict[str, subprocess.Popen]
    node_ids: dict[str, str]


def free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def node_arguments(kind: str, ports: list[int], temp_dir: Path) -> list[str]:
    """One node of ``kind``: its own ports, one CPU, the kind's resource and one race unit."""
    names = (
        "--node-manager-port",
        "--object-manager-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--runtime-env-agent-port",
        "--metrics-export-port",
    )
    pairs = [arg for name, port in zip(names, ports, strict=True) for arg in (name, str(port))]
    return [
        *pairs,
        "--temp-dir",
        str(temp_dir),
        "--resources",
        json.dumps({kind: 1, "dlopt_race": 1}),
        "--num-cpus",
        "1",
        "--object-store-memory",
        str(80 * 2**20),
        "--min-worker-port",
        "0",
        "--max-worker-port",
        "0",
        "--include-log-monitor",
        "false",
        "--disable-usage-stats",
        "--block",
    ]


def start(arguments: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as sink:
        return subprocess.Popen(
            [str(RAY), "start", *arguments],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen, *, grace_s: float = 15.0) -> None:
    """End ``process`` and its process group (what ``ray start --block`` started): SIGTERM
    with ``grace_s`` to finish (0: SIGKILL at once), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if grace_s == 0 and sig == signal.SIGTERM:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait_s)
            return


def kill_what_names(marker: str) -> None:
    """SIGKILL every process whose command line holds ``marker`` (this cluster's own temp
    directory): a worker that left its node's process group."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if marker in command:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def wait_for_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.2)
    pytest.fail(f"the Ray head did not open its port {port} within {timeout_s:g} s")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if not RAY.exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    # Short: Ray's socket paths live under it and must stay within 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="dlr-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        RAY_AUTH_MODE="disabled",
        # Notice a dead node within about 2 s (the default takes tens of seconds).
        RAY_health_check_period_ms="500",
        RAY_health_check_failure_threshold="3",
    )
    gcs, dashboard, *ports = free_ports(14)
    address = f"127.0.0.1:{gcs}"
    nodes: dict[str, subprocess.Popen] = {}
    try:
        head = ["--head", "--port", str(gcs), "--include-dashboard", "false"]
        head += ["--dashboard-port", str(dashboard)]
        nodes["kind_a"] = start(
            head + node_arguments("kind_a", ports[:6], temp_dir), env, tmp_path / "head.log"
        )
        wait_for_port(gcs, 60)
        nodes["kind_b"] = start(
            ["--address", address, *node_arguments("kind_b", ports[6:], temp_dir)],
            env,
            tmp_path / "second.log",
        )
        found = subprocess.run(
            [sys.executable, "-c", NODES_OF_KINDS, address, *KINDS],
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
        )
        node_ids = json.loads(found.stdout.strip().splitlines()[-1]) if found.stdout else {}
        assert set(node_ids) == set(KINDS), found.stderr[-2000:]
        yield Cluster(address, env, nodes, node_ids)
    finally:
        for process in reversed(list(nodes.values())):
            stop(process)
        kill_what_names(str(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_races_run_on_their_kinds_nodes_and_a_race_whose_node_dies_is_reported_lost(
    cluster, tmp_path
):
    store = tmp_path / "store"
    spec = tmp_path / "fleet.toml"
    spec.write_text(SPEC.format(store=store))
    started_b = store / "fleet" / "cluster" / "mlp" / "kind_b" / "attempt.json"
    run = subprocess.Popen(
        [
            *(sys.executable, "-m", "dlopt", "fleet", "run", str(spec), "--address", "auto"),
            *("--lost-node-wait", "5", "--connect-timeout", "60"),
        ],
        env={**cluster.env, "RAY_ADDRESS": cluster.address},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not started_b.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert started_b.exists(), "the race of kind_b never started"
        # The second node dies mid-race, as a preempted machine does: everything running
        # on it at once, the Ray workers that left its process group included (one of
        # them runs the race, which would otherwise finish while Ray notices).
        node_b = cluster.nodes["kind_b"]
        on_node_b = descendants(node_b.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node_b.pid, signal.SIGKILL)
        for info in on_node_b:
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGKILL)
        stop(node_b, grace_s=0)
        output, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            stop(run, grace_s=5)
    assert run.returncode == 1, output  # a race was lost: the run did not fully succeed
    node_a, node_b = cluster.node_ids["kind_a"], cluster.node_ids["kind_b"]
    results = ResultStore.open(str(store))
    decided = results.read_result("cluster", "mlp", "kind_a")
    lost = results.read_result("cluster", "mlp", "kind_b")
    # Each race ran on the node of its kind.
    assert decided is not None and decided.status == "done", output
    assert decided.node_id == node_a
    assert json.loads(started_b.read_text())["node_id"] == node_b
    # The lost one is reported with the node it ran on and why, not left waiting.
    assert lost is not None and lost.status == "lost" and lost.node_id == node_b
    assert f"the last node of kind kind_b (node {node_b[:8]}) left the cluster" in lost.error
    assert f"mlp@kind_a: {decided.selected_plan}" in output
    assert f"on node {node_a[:8]}" in output
    assert f"mlp@kind_b: lost: the last node of kind kind_b (node {node_b[:8]})" in output
