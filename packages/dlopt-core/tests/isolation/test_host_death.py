"""A worker whose host died leaves at once: left running, it would race on beside the
host's successor (a fleet's Ray task retried on the same node) and distort its timings."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

#: A worker stand-in: it watches its parent as the real worker does, then idles.
WORKER = (
    "import os, time\n"
    "from dlopt.isolation.worker import leave_with_the_host\n"
    "leave_with_the_host(os.getppid())\n"
    "print('watching', flush=True)\n"
    "time.sleep(120)\n"
)
#: A host that starts the worker in its own session (as the supervisor does), says its
#: pid, and dies without a word to it.
HOST = textwrap.dedent(
    f"""
    import os, subprocess, sys
    worker = subprocess.Popen([sys.executable, "-c", {WORKER!r}], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    assert worker.stdout.readline().strip() == b"watching"
    print(worker.pid, flush=True)
    os._exit(0)
    """
)


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (reaped, or a zombie no one reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def test_a_worker_whose_host_died_exits():
    host = subprocess.run([sys.executable, "-c", HOST], capture_output=True, text=True, timeout=120)
    assert host.returncode == 0, host.stderr
    worker = int(host.stdout.strip())
    deadline = time.monotonic() + 30  # a bound on the wait, not a timing claim
    while not gone(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = gone(worker)
    if not left:
        os.kill(worker, 9)  # tidy up before failing
    assert left, "the worker outlived its host"
