"""``dlopt serve`` end to end: a real Ray Serve application with 2 replicas on this machine,
answering real HTTP requests; SIGTERM leaves nothing running (``nox -s tests-deploy``)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from dlopt.cli.demo import build_demo_model

pytestmark = pytest.mark.deploy
pytest.importorskip("ray.serve")

RAY_PROCESSES = ("raylet", "gcs_server", "ray::")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ray_processes() -> set[int]:
    """Processes of a Ray instance on this machine (by their command lines)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(name in cmdline for name in RAY_PROCESSES):
            found.add(int(entry.name))
    return found


def _post(url: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _served_precision(cache: Path) -> str:
    """The precision of the plan the replicas serve, from the one record in the cache."""
    (manifest,) = cache.glob("records/*/bundle/manifest.json")
    return str(json.loads(manifest.read_text())["precision"])


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_dlopt_serve_answers_http_from_two_replicas_and_sigterm_stops_everything(
    tmp_path, assert_answers_as_validated
):
    before = _ray_processes()
    port = _free_port()
    log = tmp_path / "serve.log"
    command = [
        sys.executable, "-m", "dlopt", "serve", "dlopt.cli.demo:demo_convnet",
        "--port", str(port), "--replicas", "2", "--cache-dir", str(tmp_path / "cache"),
        "--time-budget", "20",
    ]  # fmt: skip
    with open(log, "w") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while "ready on" not in log.read_text():
            assert server.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        # Both replicas answer /healthz once running.
        status, text = _get(f"{base}/healthz")
        assert status == 200 and "2 of 2" in text, text
        model = build_demo_model()
        precision = _served_precision(tmp_path / "cache")
        for batch in (1, 3, 8):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 64, 64)).astype(np.float32)
            status, body = _post(f"{base}/v1/predict", _npz(arg0=x))
            assert status == 200, body[:300]
            out = np.load(io.BytesIO(body), allow_pickle=False)
            with torch.inference_mode():
                expected = model(torch.from_numpy(x)).numpy()
            assert list(out.keys()) == ["out0"]
            assert_answers_as_validated(out["out0"], expected, precision)
        # Bad requests: a 4xx and one line saying what is wrong, never a traceback.
        bad = {
            "wrong dtype": _npz(arg0=np.zeros((1, 3, 64, 64), np.float64)),
            "wrong shape": _npz(arg0=np.zeros((1, 3, 32, 32), np.float32)),
            "wrong name": _npz(image=np.zeros((1, 3, 64, 64), np.float32)),
            "not an npz": b"hello",
            "pickled arrays": _pickled_npz(),
        }
        for what, body in bad.items():
            status, reply = _post(f"{base}/v1/predict", body)
            text = reply.decode()
            assert 400 <= status < 500, (what, status, text)
            assert text.count("\n") == 1 and "Traceback" not in text, (what, text)
        assert (
            "float64, expected float32"
            in _post(f"{base}/v1/predict", bad["wrong dtype"])[1].decode()
        )
        assert "pickle" in _post(f"{base}/v1/predict", bad["pickled arrays"])[1].decode()
        assert _get(f"{base}/nowhere")[0] == 404
        time.sleep(1.5)  # every replica has pushed its record
        status, metrics = _get(f"{base}/metrics")
        assert status == 200 and 'dlopt_calls_total{decision="dlopt"' in metrics
        served = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("dlopt_calls_total") and 'route="plan"' in line
        )
        assert served >= 3
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert code == 0, log.read_text()[-3000:]
    assert "stopping" in log.read_text()
    deadline = time.monotonic() + 30
    while _ray_processes() - before and time.monotonic() < deadline:
        time.sleep(1)
    left = _ray_processes() - before
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in left]


def _pickled_npz() -> bytes:
    """An .npz whose member is an object array (numpy would need pickle to read it)."""
    buffer = io.BytesIO()
    np.savez(buffer, arg0=np.array([{"a": 1}], dtype=object))
    return buffer.getvalue()


def test_a_usage_mistake_is_one_line_before_ray_starts(tmp_path):
    before = _ray_processes()
    result = subprocess.run(
        [sys.executable, "-m", "dlopt", "serve", "nowhere.module:build", "--port", "8000",
         "--case", "b1=1x4@1", "--cache-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("dlopt: error: cannot import 'nowhere.module'")
    assert "Traceback" not in result.stderr
    assert _ray_processes() - before == set()
