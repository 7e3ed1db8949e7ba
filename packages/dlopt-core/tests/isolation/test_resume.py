"""A worker killed from outside resumes from its journal; the journal and the heartbeat
tolerate what a death leaves behind."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from faulty_plans import bounded, isolated_policy, optimizer_with

from dlopt.events import EventKind
from dlopt.isolation.journal import Heartbeat, JournalWriter, last_running, read_journal
from dlopt.isolation.supervisor import _culprit


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        text = (task / "children").read_text()
        pids += [int(p) for p in text.split()]
    return pids


@pytest.mark.slow
def test_a_worker_killed_mid_race_is_resumed_and_nothing_is_blamed(plain_decision_plan):
    killed: list[int] = []

    def kill_worker_once(event):
        if event.kind is EventKind.ROUND_FINISHED and not killed:
            for pid in _children():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    with bounded(120):
        decision = optimizer_with(policy=isolated_policy(), observers=[kill_worker_once]).select(
            "faulty_plans:tiny_model"
        )
    assert killed
    report = decision.report
    assert report.isolation is not None
    assert (report.isolation.workers, report.isolation.external_kills) == (2, 1)
    assert report.isolation.crashed == report.isolation.hung == ()
    assert all(c.fault is None for c in report.candidates)
    # The lost worker's evidence is in its journal, summarised in the report.
    lost, last = report.isolation.attempts
    assert (lost.outcome, last.outcome) == ("killed", "report")
    assert lost.rounds >= 1 and set(lost.validated) == {"eager_fp32", "fast"}
    assert decision.selected_plan == plain_decision_plan
    decision.close()


def test_the_journal_drops_a_last_line_cut_short(tmp_path):
    path = tmp_path / "journal.jsonl"
    writer = JournalWriter(path)
    writer.append({"kind": "start", "pid": 1}, durable=True)
    writer.append({"kind": "running", "plan": "p", "stage": "build", "case": None})
    writer.close()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"kind": "event", "event": "cand')  # the worker died mid-write
    records = read_journal(path)
    assert [r["kind"] for r in records] == ["start", "running"]
    assert last_running(records) == {"kind": "running", "plan": "p", "stage": "build", "case": None}
    assert _culprit(None, records) == ("p", "build")


def test_a_damaged_line_inside_the_journal_is_refused(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_text('{"kind": "start"}\nnot json\n{"kind": "done"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        read_journal(path)


def test_journal_records_are_strict_json_lines(tmp_path):
    path = tmp_path / "journal.jsonl"
    writer = JournalWriter(path)
    with pytest.raises(ValueError):
        writer.append({"kind": "event", "value": float("nan")})
    writer.append({"kind": "event", "text": "two\nlines"})
    writer.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["text"] == "two\nlines"


def test_evidence_after_a_marker_means_no_call_was_in_flight():
    records = [
        {"kind": "running", "plan": "p", "stage": "build"},
        {"kind": "event", "event": "candidate_built", "candidate": "p"},
    ]
    assert _culprit(None, records) == (None, "")


def test_the_heartbeat_says_which_call_is_in_flight(tmp_path):
    host = Heartbeat(tmp_path / "beat", create=True)
    worker = Heartbeat(tmp_path / "beat")
    assert host.read() is None
    worker.begin("some_plan", "measure", 2.5)
    beat = host.read()
    assert beat is not None and (beat.plan, beat.stage) == ("some_plan", "measure")
    assert beat.deadline == pytest.approx(beat.started_at + 2.5)
    worker.end()
    assert host.read() is None
    worker.begin("p", "build", None)
    assert host.read().deadline is None
    worker.close()
    host.close()
