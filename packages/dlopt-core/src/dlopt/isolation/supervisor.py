"""The host's side of an isolated selection: start a worker, watch it, name the culprit
of a crash or a hang, resume without it, and bring the winner back into the host.

A worker runs the one selection path (:func:`dlopt.engine.select.select`, through
:mod:`dlopt.isolation.worker`). The host
polls three things: the worker's exit, its journal (events are forwarded to the host's
observers as they arrive) and its heartbeat (the per-call watchdog: a call past its
deadline is a hang, and the worker's process group is killed). When the worker dies, the
heartbeat or else the journal's last "now running" marker names the plan and stage; that
plan is rejected (``crashed`` with the signal, or ``hung`` with the time) and a new
worker races the others. Resuming re-runs the race among the survivors rather than
splicing rounds from two processes (docs/isolation.md says why).

Nothing of a worker outlives the selection: its output is read through a pipe (the last
:data:`OUTPUT_KEPT_BYTES` kept, in memory), what it or its plans left running is ended
when it ends (whatever carries its mark, :data:`WORKER_MARK_ENV`), and the selection's
working directory goes once the workers are done. The host never loads a plugin that
crashed or hung a worker while it loaded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch

from dlopt import errors
from dlopt.cache.record_store import PlanCacheWarning
from dlopt.engine.select import Selection, WinnerNotServed, decision_in_host
from dlopt.events import Event, EventKind
from dlopt.evidence.report import (
    CandidateEvidence,
    IsolationSummary,
    OptimizationReport,
    WorkerAttempt,
    WorkerFault,
    report_from_json,
)
from dlopt.isolation.journal import Heartbeat, read_journal
from dlopt.isolation.transfer import (
    HOST_PID_ENV,
    PLUGIN_PREFIX,
    WORKER_MARK_ENV,
    WorkerSpec,
    build_model,
    host_import_path,
    policy_to_json,
    reference_of,
    resolve_reference,
    weights_sha256,
    write_spec,
    write_workload,
)
from dlopt.isolation.worker import BOOTSTRAP, LEFTOVER_GRACE_S
from dlopt.pipeline.state import SelectionContext, StageError
from dlopt.platform.containment import TEMP_ENV
from dlopt.platform.processes import end_processes, marked_processes
from dlopt.settings.policy import AUTO_BUDGET_MAX_S
from dlopt.settings.workload import WorkloadProfile
from dlopt.vocabulary import Stage, Status

if TYPE_CHECKING:
    from dlopt.cache.record_store import CacheRecord
    from dlopt.engine.decision import OptimizationDecision
    from dlopt.settings.policy import OptimizationPolicy

log = logging.getLogger(__name__)

#: How often the host looks at its worker.
POLL_S = 0.05
#: Lines of the worker's output kept in a fault.
STDERR_LINES = 40
#: The worker's output (stdout and stderr) the host keeps, in memory: its last bytes. A
#: plugin that prints without end costs neither memory nor disk.
OUTPUT_KEPT_BYTES = 1 << 20
#: dlopt's warnings a worker journals, warned again in the host (by category name; any
#: other category of dlopt's is warned as a ``UserWarning``).
FORWARDED_WARNINGS: dict[str, type[Warning]] = {"PlanCacheWarning": PlanCacheWarning}
#: A worker ended by a kill no watchdog sent is resumed this often before the plan it
#: was running at each of those kills is blamed.
EXTERNAL_KILLS_BEFORE_BLAME = 2
#: Kills from outside a selection resumes from before it gives up.
MAX_EXTERNAL_KILLS = 5
#: Workers one selection may start (each failed one loses at least one plan).
MAX_WORKERS = 64
#: The selection's own plan cache, in its working directory, when the user named none:
#: the worker's winner comes back to the host through it (``WorkerSpec.handback``).
HANDBACK_CACHE = "handback"
#: The workers' temp directory, in the working directory (``TMPDIR`` and the like).
WORKER_TEMP_DIR = "tmp"
_STAGES = {s.value for s in Stage}

RESUME_NOTE = (
    "plans that crashed or hung are rejected; the race is re-run among the others in a new "
    "worker, so every interval comes from one process"
)


class IsolationError(errors.DloptError):
    """The isolated selection could not finish: its worker failed outside any plan."""


class InternalError(IsolationError):
    """dlopt's own code raised in the isolated worker (a bug to report; no plugin's fault)."""


@attrs.frozen
class WorkerEnd:
    """How one worker ended: its result (strict JSON text), a dlopt error, or a fault."""

    result: str | None = None
    error: tuple[str, str] | None = None
    #: dlopt's own failure: its type, message and traceback.
    internal: tuple[str, str, str] | None = None
    plan: str | None = None
    fault: WorkerFault | None = None
    external: bool = False
    stderr: tuple[str, ...] = ()
    #: Processes the worker or its plans left running that could not be ended.
    leftovers: tuple[str, ...] = ()


@attrs.frozen
class Supervised:
    """What the workers of one selection gave: the last one's result (strict JSON text),
    the faults by plan, every worker's summary and the warnings for the report."""

    result: str
    faults: dict[str, WorkerFault]
    attempts: list[WorkerAttempt]
    warnings: tuple[str, ...] = ()


class OutputTail:
    """A worker's output, read from its pipe by a thread as it comes: the last ``limit``
    bytes are kept (so the pipe never fills and the worker never blocks on it)."""

    def __init__(self, fd: int, limit: int = OUTPUT_KEPT_BYTES) -> None:
        self._fd = fd
        self._limit = limit
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._stop_at: float | None = None
        #: Bytes read and not kept (the oldest).
        self.dropped = 0
        self._thread = threading.Thread(target=self._read, name="dlopt-worker-output", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._fd], [], [], 0.1)
                stop_at = self._stop_at
                if stop_at is not None and (not ready or time.monotonic() > stop_at):
                    return
                if not ready:
                    continue
                data = os.read(self._fd, 1 << 16)
                if not data:  # every writer closed it
                    return
                with self._lock:
                    self._kept += data
                    excess = len(self._kept) - self._limit
                    if excess > 0:
                        del self._kept[:excess]
                        self.dropped += excess
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def close(self, wait_s: float = 1.0) -> None:
        """Read what is in the pipe now (for at most ``wait_s``), then stop: a process the
        worker left behind may hold the pipe open, and is not waited for."""
        self._stop_at = time.monotonic() + wait_s
        self._thread.join(wait_s + 0.5)

    def data(self) -> bytes:
        """The bytes kept, oldest first."""
        with self._lock:
            return bytes(self._kept)

    def lines(self, count: int = STDERR_LINES) -> tuple[str, ...]:
        """The last ``count`` lines kept, each cut to 400 characters."""
        text = self.data().decode("utf-8", errors="replace")
        return tuple(line[:400] for line in text.splitlines()[-count:])


def model_reference(model: Any) -> str:
    """The ``module:factory`` a worker rebuilds ``model`` from; a live module is refused."""
    if isinstance(model, str):
        resolve_reference(model)  # a typo fails here, in the host, not in the worker
        return model
    if isinstance(model, torch.nn.Module):
        raise errors.ConfigurationError(
            "an isolated selection rebuilds the model in a fresh worker process and cannot "
            "take a live torch.nn.Module: pass a factory instead, as 'module:function' text "
            "or a module-level function (select('mypkg.models:build', workload)), or select "
            "in process (OptimizationPolicy(isolation='in_process'))"
        )
    if callable(model):
        return reference_of(model, "the model factory")
    raise errors.ConfigurationError(
        f"model must be a 'module:factory' reference or a factory function in isolated mode, "
        f"got {type(model).__name__}"
    )


def build_host_model(ref: str, target: Any) -> tuple[torch.nn.Module, WorkloadProfile | None]:
    """The model in the host too: the winner is validated against its reference here
    (a factory's pair whose second item is no ``WorkloadProfile`` is refused)."""
    return build_model(ref, target.input_device)


def select_in_worker(selection: Selection, model_ref: str) -> OptimizationDecision:
    """Run ``selection`` in supervised workers (see the module docstring); the worker
    rebuilds the model from ``model_ref`` (``selection.model`` is the host's copy, which
    the winner is validated against here)."""
    provider_refs = tuple(
        reference_of(type(p), f"provider {getattr(p, 'name', p)!r}") for p in selection.providers
    )
    workload, policy, emit = selection.workload, selection.context.policy, selection.context.emit
    reference: list[str] = []

    def check_fault(plan: str, fault: WorkerFault, records: list[dict[str, Any]]) -> None:
        reference[:] = reference or [_reference_name(records) or ""]
        if plan == reference[0]:
            raise errors.ReferenceCheckError(
                f"the reference plan {plan!r} {describe_fault(fault)}; nothing can be "
                "validated without it"
            )

    with working_directory() as workdir:
        handback = policy.plan_cache_dir is None
        worker_policy = (
            attrs.evolve(policy, plan_cache_dir=str(workdir / HANDBACK_CACHE))
            if handback
            else policy
        )
        spec = WorkerSpec(
            model=model_ref,
            target=selection.context.target,
            policy=policy_to_json(worker_policy),
            workload=write_workload(workload, workdir / "inputs.npz"),
            tensors=str(workdir / "inputs.npz"),
            journal=str(workdir / "journal-1.jsonl"),
            heartbeat=str(workdir / "heartbeat"),
            result=str(workdir / "result-1.json"),
            artifact_dir=str(selection.artifact_dir or workdir / "artifacts"),
            providers=provider_refs,
            sys_path=host_import_path(),
            started_at=_wall_time_of(selection.context),
            handback=handback,
            weights=weights_sha256(selection.model),
        )
        done = supervise(spec, workdir, emit, selection.context.should_continue, check_fault)
        report = with_faults(
            report_from_json(done.result), done.faults, done.attempts, done.warnings
        )
        # Read while the working directory (the handback record's home) still exists.
        record = _worker_record(worker_policy, report)
        if handback:
            report = attrs.evolve(report, cache=None)  # the user asked for no plan cache
        if report.throughput is not None and workload.batch_sizes is not None:
            # The worker dropped the batch sizes the reference ran out of memory on.
            workload = workload.first_cases(len(report.throughput.batch_sizes))
        if selection.registry is None:
            from dlopt.plugins.discovery import PluginSettings, load_providers

            # A plugin that crashed or hung a worker as it loaded would do the same here.
            settings = PluginSettings.from_env()
            unsafe = {
                n.removeprefix(PLUGIN_PREFIX) for n in done.faults if n.startswith(PLUGIN_PREFIX)
            }
            settings = attrs.evolve(settings, deny=settings.deny | unsafe)
            selection = attrs.evolve(selection, registry=load_providers(settings))
        try:
            # Inside the working directory's life: the winner is copied out of the record
            # as it is brought back (artifacts into the plan's directory, torch's caches
            # into its own), so the decision needs nothing here once it exists.
            return decision_in_host(attrs.evolve(selection, workload=workload), report, record)
        except WinnerNotServed as exc:
            raise IsolationError(str(exc)) from None


def probe_in_worker(
    target: Any, policy: Any, emit: Callable[[Event], None] | None = None
) -> tuple[list[Any], list[Any]]:
    """Load the plugins and probe every plan in supervised workers (``dlopt providers
    --isolate``): ``(statuses, plugin failures)``. A plan whose probe crashes or hangs is
    reported unavailable with the fault; a plugin whose import does, as a load failure."""
    from dlopt.contract.provider import ProviderAvailability
    from dlopt.contract.records import PluginFailure
    from dlopt.pipeline.probe import ProbeRecord
    from dlopt.platform.serialization import from_jsonable, parse_strict_json

    with working_directory() as workdir:
        spec = WorkerSpec(
            task="probe",
            target=target,
            policy=policy_to_json(policy),
            journal=str(workdir / "journal-1.jsonl"),
            heartbeat=str(workdir / "heartbeat"),
            result=str(workdir / "report-1.json"),
            sys_path=host_import_path(),
        )
        done = supervise(spec, workdir, emit or (lambda _e: None), None)
    data = parse_strict_json(done.result)
    statuses = [from_jsonable(s, ProbeRecord) for s in data["providers"]]
    failures = [from_jsonable(f, PluginFailure) for f in data["plugin_failures"]]
    for name, fault in done.faults.items():
        if name.startswith(PLUGIN_PREFIX):
            failures.append(
                PluginFailure(
                    name.removeprefix(PLUGIN_PREFIX),
                    "load",
                    f"{describe_fault(fault)} in the isolated worker",
                )
            )
        else:
            statuses.append(
                ProbeRecord(
                    name=name,
                    plugin="unknown",
                    distribution=None,
                    version=None,
                    precision="unknown",
                    availability=ProviderAvailability.unavailable(
                        f"probe {describe_fault(fault)} in the isolated worker",
                        install_hint="report this to the plugin's maintainers",
                    ),
                    probe_time_s=fault.elapsed_s or 0.0,
                    sdk_output=fault.stderr,
                )
            )
    return statuses, failures


@contextlib.contextmanager
def working_directory() -> Iterator[Path]:
    """A selection's working directory (the inputs, each worker's spec, journal and
    result, the heartbeat, the workers' artifacts, the handback record), removed once its
    workers are done and the winner is back in the host, however that ends: the report
    keeps what the journals said (``isolation.attempts``), and the winner was copied
    into the host's own directory as it came back."""
    path = Path(tempfile.mkdtemp(prefix="dlopt-isolated-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def supervise(
    spec: WorkerSpec,
    workdir: Path,
    emit: Callable[[Event], None],
    should_continue: Callable[[], bool] | None = None,
    check_fault: Callable[[str, WorkerFault, list[dict[str, Any]]], None] | None = None,
) -> Supervised:
    """Run workers for ``spec`` until one writes its result, each without the plans that
    crashed or hung before. ``check_fault`` may raise to end the selection (the reference
    crashed)."""
    faults: dict[str, WorkerFault] = {}
    external_kills: dict[str, int] = {}
    kills = 0
    deadline = _restart_deadline(spec)
    attempts: list[WorkerAttempt] = []
    leftovers: list[str] = []
    for attempt in range(1, MAX_WORKERS + 1):
        spec = attrs.evolve(
            spec,
            attempt=attempt,
            journal=str(workdir / f"journal-{attempt}.jsonl"),
            result=str(workdir / f"result-{attempt}.json"),
            excluded=tuple(faults),
        )
        end = run_worker(spec, workdir, emit, should_continue)
        attempts.append(_summary(attempt, end, spec.journal))
        leftovers += end.leftovers
        if end.result is not None:
            return Supervised(end.result, faults, attempts, tuple(leftovers))
        if end.error is not None:
            kind = getattr(errors, end.error[0], None)
            if not (isinstance(kind, type) and issubclass(kind, errors.DloptError)):
                kind = errors.DloptError
            raise kind(end.error[1])
        if end.internal is not None:
            raise InternalError(_internal_message(*end.internal))
        if end.external and kills < MAX_EXTERNAL_KILLS:
            # Killed from outside (an operator, the OOM killer): not the plan's fault
            # until it happens again while that same plan runs.
            kills += 1
            if end.plan is None:
                continue
            external_kills[end.plan] = external_kills.get(end.plan, 0) + 1
            if external_kills[end.plan] < EXTERNAL_KILLS_BEFORE_BLAME:
                continue
        if end.plan is None or end.fault is None:
            tail = "\n".join(end.stderr[-5:]) or "(no output)"
            raise IsolationError(
                f"the isolated worker died outside any provider call; its last output:\n{tail}"
            )
        if end.plan in faults:
            # The same culprit again, though the new worker was told to leave it out: the
            # crash is not that plugin's, and another worker would crash the same way.
            tail = "\n".join(end.stderr[-5:]) or "(no output)"
            raise IsolationError(
                f"the isolated worker crashed again in {end.plan!r} after it was left out: "
                f"not a crash a plugin caused; its last output:\n{tail}"
            )
        if deadline is not None and time.monotonic() > deadline:
            raise IsolationError(
                f"{end.plan!r} {describe_fault(end.fault)} after the time budget ran out; "
                f"no worker is started past it ({len(faults)} plan(s) crashed or hung "
                "before: see `dlopt report`), select again with a larger --time-budget"
            )
        faults[end.plan] = end.fault
        _announce(emit, end.plan, end.fault)
        if check_fault is not None:
            check_fault(end.plan, end.fault, read_journal(spec.journal))
    raise IsolationError(f"the isolated selection lost {MAX_WORKERS} workers; giving up")


def _restart_deadline(spec: WorkerSpec) -> float | None:
    """When no new worker may start (``time.monotonic``): the selection's time budget from
    now (the ``auto`` budget's ceiling, which the worker reckons itself), ``None`` without
    one."""
    budget = spec.policy.get("time_budget_s")
    if spec.policy.get("exhaustive") or budget is None:
        return None
    seconds = AUTO_BUDGET_MAX_S if budget == "auto" else float(budget)
    return time.monotonic() + seconds


def _internal_message(kind: str, message: str, trace: str) -> str:
    """One line naming dlopt's own failure, with where its traceback was written."""
    path = _write_traceback(trace)
    where = f"the traceback is in {path}" if path is not None else f"traceback:\n{trace}"
    return (
        f"dlopt's own code failed in the isolated worker ({kind}: {message}); this is a bug "
        f"in dlopt, not in a plugin: please report it with the traceback ({where})"
    )


def _write_traceback(trace: str) -> Path | None:
    """Keep a worker's traceback in the user cache directory's logs (``None``: unwritable)."""
    from dlopt.platform.fileio import user_cache_dir

    try:
        folder = user_cache_dir() / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"isolated-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        path.write_text(trace, encoding="utf-8")
    except OSError:
        return None
    return path


def run_worker(
    spec: WorkerSpec,
    workdir: Path,
    emit: Callable[[Event], None],
    should_continue: Callable[[], bool] | None = None,
) -> WorkerEnd:
    """Start one worker for ``spec``, watch it to its end and say how it ended; what it
    left running is ended (whatever carries its mark) however it ended."""
    spec_path = write_spec(spec, workdir / f"spec-{spec.attempt}.json")
    heartbeat = Heartbeat(spec.heartbeat, create=True)
    mark = f"{os.getpid()}-{spec.attempt}-{secrets.token_hex(8)}"
    # The worker's temp directory is inside the working directory, removed with it: what
    # its SDKs write there (Inductor's compile cache, ONNX Runtime's ``.ses``) goes too.
    temp = workdir / WORKER_TEMP_DIR
    temp.mkdir(exist_ok=True)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(spec.sys_path),
        **dict.fromkeys(TEMP_ENV, str(temp)),
        **{HOST_PID_ENV: str(os.getpid()), WORKER_MARK_ENV: mark},
    )
    # One pipe for stdout and stderr, read as it comes (OutputTail): never a file that
    # grows with what a plugin prints.
    read_end, write_end = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", BOOTSTRAP, str(spec_path)],
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=write_end,
            env=env,
            start_new_session=True,  # its own process group: a kill takes its children too
        )
    except BaseException:
        os.close(read_end)
        heartbeat.close()
        raise
    finally:
        os.close(write_end)
    output = OutputTail(read_end)
    forwarded = 0
    hang: tuple[str, str, float, float] | None = None
    left: list[str] = []
    try:
        while process.poll() is None:
            forwarded = _forward(spec.journal, forwarded, emit)
            beat = heartbeat.read()
            now = time.time()
            if beat is not None and beat.deadline is not None and now > beat.deadline:
                hang = (
                    beat.plan,
                    beat.stage,
                    now - beat.started_at,
                    beat.deadline - beat.started_at,
                )
                _kill(process)
                break
            if should_continue is not None and not should_continue():
                _kill(process)
                raise errors.SelectionCancelled("cancelled while the isolated worker ran")
            time.sleep(POLL_S)
        process.wait()
        beat = heartbeat.read()
    finally:
        if process.poll() is None:
            _kill(process)
        heartbeat.close()
        left = _end_leftovers(process, mark)
        output.close()
    records = read_journal(spec.journal)
    _forward(spec.journal, forwarded, emit)
    leftovers = tuple(
        f"worker {spec.attempt} left process {what} running and it could not be ended"
        for what in [*_survivors(records), *left]
    )
    for line in leftovers:
        log.warning("%s", line)
    stderr_tail = output.lines()
    if hang is not None:
        plan, stage, elapsed, limit = hang
        fault = WorkerFault(
            kind="hung",
            stage=_stage_word(stage),
            attempt=spec.attempt,
            elapsed_s=round(elapsed, 3),
            limit_s=round(limit, 3),
            stderr=stderr_tail,
        )
        return WorkerEnd(plan=plan, fault=fault, stderr=stderr_tail, leftovers=leftovers)
    code = process.returncode
    if code == 0 and Path(spec.result).is_file():
        result = Path(spec.result).read_text(encoding="utf-8")
        return WorkerEnd(result=result, leftovers=leftovers)
    error = next((r for r in reversed(records) if r.get("kind") == "error"), None)
    if error is not None:
        return WorkerEnd(
            error=(str(error.get("type")), str(error.get("message"))), leftovers=leftovers
        )
    internal = next((r for r in reversed(records) if r.get("kind") == "internal_error"), None)
    if internal is not None:
        return WorkerEnd(
            internal=(
                str(internal.get("type")),
                str(internal.get("message")),
                str(internal.get("traceback", "")),
            ),
            stderr=stderr_tail,
            leftovers=leftovers,
        )
    culprit, stage = _culprit(beat, records)
    signal_name = _signal_name(-code) if code < 0 else None
    fault = WorkerFault(
        kind="crashed",
        stage=_stage_word(stage),
        attempt=spec.attempt,
        signal=signal_name,
        exit_code=code if code >= 0 else None,
        stderr=stderr_tail,
    )
    external = code in (-signal.SIGKILL, -signal.SIGTERM)
    return WorkerEnd(
        plan=culprit,
        fault=fault,
        external=external,
        stderr=stderr_tail,
        leftovers=leftovers,
    )


def _end_leftovers(process: subprocess.Popen[bytes], mark: str) -> list[str]:
    """End what an ended worker left running: every process carrying its ``mark`` (a
    crashed or killed worker's children in groups of their own, its orphans), then what
    is left of its process group. What could not be ended, in words."""
    survivors = end_processes(marked_processes(WORKER_MARK_ENV, mark), grace_s=LEFTOVER_GRACE_S)
    with contextlib.suppress(OSError):  # members that dropped the mark from their environment
        os.killpg(process.pid, signal.SIGKILL)
    return [info.describe() for info in survivors]


def _survivors(records: list[dict[str, Any]]) -> list[str]:
    """What the worker journaled it could not end at its exit."""
    found: list[str] = []
    for record in records:
        if record.get("kind") == "leftovers" and isinstance(record.get("survivors"), list):
            found += [str(what) for what in record["survivors"]]
    return found


def _summary(attempt: int, end: WorkerEnd, journal: str) -> WorkerAttempt:
    """What one worker's journal holds, and how it ended."""
    try:
        records = read_journal(journal)
    except ValueError:
        records = []
    events = [r for r in records if r.get("kind") == "event"]
    validated = tuple(
        str(r.get("candidate")) for r in events if r.get("event") == EventKind.CANDIDATE_VALIDATED
    )
    rounds = sum(1 for r in events if r.get("event") == EventKind.ROUND_FINISHED)
    if end.result is not None or end.error is not None:
        outcome = "report" if end.result is not None else "error"
    elif end.external:
        outcome = "killed"
    else:
        outcome = end.fault.kind if end.fault is not None else "crashed"
    return WorkerAttempt(
        attempt,
        outcome,
        plan=end.plan,
        stage=end.fault.stage if end.fault is not None else None,
        validated=validated,
        rounds=rounds,
    )


def _culprit(beat: Any, records: list[dict[str, Any]]) -> tuple[str | None, str]:
    """The plan in flight when the worker died: the heartbeat's, else the journal's last
    marker (a stage's evidence after that marker means the plan had finished it)."""
    if beat is not None:
        return beat.plan, beat.stage
    marker: dict[str, Any] | None = None
    for record in records:
        if record.get("kind") == "running":
            marker = record
        elif record.get("kind") == "event" and marker is not None:
            if record.get("event") == EventKind.STAGE_STARTED.value:
                continue
            if record.get("candidate") == marker.get("plan"):
                marker = None  # that stage ended with evidence: no call was in flight
    if marker is None:
        return None, ""
    return str(marker.get("plan")), str(marker.get("stage"))


def _forward(journal: str, done: int, emit: Callable[[Event], None]) -> int:
    """Re-emit in the host the events the worker journaled since record ``done``, and warn
    its warnings again."""
    try:
        records = read_journal(journal)
    except ValueError:
        return done
    for record in records[done:]:
        if record.get("kind") == "warning":
            category = FORWARDED_WARNINGS.get(str(record.get("category")), UserWarning)
            warnings.warn(str(record.get("message", "")), category, stacklevel=2)
            continue
        if record.get("kind") != "event":
            continue
        try:
            kind = EventKind(record.get("event"))
        except ValueError:
            continue
        data = record.get("data")
        emit(
            Event(
                kind,
                str(record.get("message", "")),
                candidate=record.get("candidate"),
                data=data if isinstance(data, dict) else {},
            )
        )
    return len(records)


def _announce(emit: Callable[[Event], None], plan: str, fault: WorkerFault) -> None:
    kind = EventKind.CANDIDATE_CRASHED if fault.kind == "crashed" else EventKind.CANDIDATE_HUNG
    emit(
        Event(
            kind,
            describe_fault(fault),
            candidate=plan,
            data={
                "stage": fault.stage,
                "signal": fault.signal,
                "exit_code": fault.exit_code,
                "elapsed_s": fault.elapsed_s,
            },
        )
    )


def describe_fault(fault: WorkerFault) -> str:
    """One line: ``crashed at build (SIGSEGV)`` or ``hung at measure (12.0 s, limit 10 s)``."""
    if fault.kind == "hung":
        return f"hung at {fault.stage} ({fault.elapsed_s:.1f} s, limit {fault.limit_s:g} s)"
    how = fault.signal or f"exit status {fault.exit_code}"
    return f"crashed at {fault.stage} ({how})"


def with_faults(
    report: OptimizationReport,
    faults: dict[str, WorkerFault],
    attempts: Sequence[WorkerAttempt],
    cleanup_warnings: Sequence[str] = (),
) -> OptimizationReport:
    """The last worker's report with a rejected entry for every plan that crashed or hung
    (and a load failure for every plugin whose import did), and the isolation summary
    (with ``cleanup_warnings``: what the workers left that could not be ended)."""
    from dlopt.contract.records import PluginFailure

    lost = tuple(
        CandidateEvidence(
            name=plan,
            status=Status.REJECTED,
            precision="unknown",
            error=StageError(
                Stage(fault.stage) if fault.stage in _STAGES else Stage.BUILD,
                f"{describe_fault(fault)} in the isolated worker",
            ),
            fault=fault,
        )
        for plan, fault in faults.items()
        if not plan.startswith(PLUGIN_PREFIX)
    )
    broken_plugins = tuple(
        PluginFailure(
            plan.removeprefix(PLUGIN_PREFIX),
            "load",
            f"{describe_fault(fault)} in the isolated worker",
        )
        for plan, fault in faults.items()
        if plan.startswith(PLUGIN_PREFIX)
    )
    summary = IsolationSummary(
        mode="process",
        workers=len(attempts),
        crashed=tuple(p for p, f in faults.items() if f.kind == "crashed"),
        hung=tuple(p for p, f in faults.items() if f.kind == "hung"),
        external_kills=sum(1 for a in attempts if a.outcome == "killed"),
        note=RESUME_NOTE if len(attempts) > 1 else None,
        attempts=tuple(attempts),
        warnings=tuple(cleanup_warnings),
    )
    # The last worker kept each lost plan in its plan set, unavailable: its fault replaces it.
    kept = tuple(c for c in report.candidates if c.name not in faults)
    return attrs.evolve(
        report,
        candidates=kept + lost,
        plugin_failures=report.plugin_failures + broken_plugins,
        isolation=summary,
    )


def _worker_record(policy: OptimizationPolicy, report: OptimizationReport) -> CacheRecord | None:
    """The plan cache record the worker wrote or reused for this decision: it brings the
    winner back into the host (its program, artifacts or compile caches) without a second
    compile; the host validates it against its own reference either way."""
    from dlopt.cache.record_store import PlanCache

    cache = report.cache
    if policy.plan_cache_dir is None or cache is None:
        return None
    if not (cache.cache_hit or cache.record_written):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the worker warned about its records already
        record = PlanCache(policy.plan_cache_dir).lookup(cache.key)
    if record is None or record.report.selected_plan != report.selected_plan:
        return None
    return record


def _reference_name(records: Sequence[dict[str, Any]]) -> str | None:
    for record in records:
        if record.get("kind") == "event" and record.get("event") == EventKind.RACE_STARTED.value:
            providers = (record.get("data") or {}).get("providers") or []
            return str(providers[0]) if providers else None
    return None


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stage_word(stage: str) -> str:
    return stage if stage in _STAGES else (stage or "unknown")


def _wall_time_of(context: SelectionContext) -> float:
    """When ``context``'s selection started, as ``time.time()`` (the worker's clock is
    another process's; wall time is what both read)."""
    if context.started_ns is None:
        return time.time()
    return time.time() - (context.clock.now_ns() - context.started_ns) / 1e9
