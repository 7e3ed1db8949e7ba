"""Joining a cluster: an address nothing answers at, one that needs Ray Client without
``ray[client]``, or a port that answers but is no Ray head, fails within the stated
time (``--connect-timeout``) with exit code 2 and one line, never a traceback or a wait
of minutes. Each case runs ``dlopt fleet run`` in a process of its own, as a user would;
the subprocess time limit only guards against a hang."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the fleet extra is not installed (dlopt-core[fleet])")

SPEC = """
name = "s"
store = "{store}"
[kinds.a]
resources = {{ sim_a = 1 }}
[[jobs]]
name = "j"
model = "demo_mlp"
kinds = ["a"]
"""


def fleet_run(
    tmp_path: Path, *args: str, ray_address: str | None = None
) -> subprocess.CompletedProcess:
    spec = tmp_path / "fleet.toml"
    spec.write_text(SPEC.format(store=tmp_path / "store"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    return subprocess.run(
        [sys.executable, "-m", "dlopt", "fleet", "run", str(spec), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith("dlopt: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    return done.stderr


def test_a_ray_client_address_that_cannot_be_used_is_one_line(tmp_path):
    err = one_line_error(fleet_run(tmp_path, "--address", "ray://127.0.0.1:1"))
    assert "ray://127.0.0.1:1" in err
    assert "pip install 'ray[client]'" in err or "Connection refused" in err


def test_an_unreachable_ray_address_from_the_environment_fails_at_once(tmp_path):
    done = fleet_run(tmp_path, "--address", "auto", ray_address="127.0.0.1:1")
    err = one_line_error(done)
    assert "no Ray cluster at 127.0.0.1:1 (Connection refused)" in err


def test_a_port_that_answers_but_is_no_ray_head_fails_within_the_connect_timeout(tmp_path):
    # A listener that accepts connections and never says a word.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    try:
        done = fleet_run(
            tmp_path, "--address", "auto", "--connect-timeout", "3", ray_address=address
        )
    finally:
        server.close()
        for connection in accepted:
            connection.close()
    err = one_line_error(done)
    assert f"the Ray cluster at {address} did not let a process join within 3 s" in err
    assert "--connect-timeout" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--address", "bogus"), "--address 'bogus': give local, auto or ray://HOST:PORT"),
        (("--connect-timeout", "0"), "--connect-timeout 0.0: give a finite number > 0"),
        (("--lost-node-wait", "nan"), "--lost-node-wait nan: give a finite number > 0"),
    ],
)
def test_run_options_are_checked_before_the_spec_and_ray(tmp_path, capsys, args, message):
    from dlopt.cli import main

    assert main(["fleet", "run", str(tmp_path / "absent.toml"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
