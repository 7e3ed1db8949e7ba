"""The worker: runs one selection in process, journaling it, for a supervising host.

Started by :mod:`dlopt.isolation.supervisor` as ``python -c BOOTSTRAP SPEC``, which calls
:func:`run` (a fresh interpreter: nothing of the host's memory is inherited; its import
path is the host's, without the working directory ``python -m`` would put first). It
rebuilds the model from its ``module:factory`` reference and the workload from the host's
``.npz``, wraps every provider so that each probe, build and call first says what is
running (journal and heartbeat), runs the ordinary in-process selection, writes the
report as strict JSON, ends whatever its plans started and left running, and exits.
Exit status 0: a report was written; 3: the selection raised a dlopt error (journaled as
an ``error`` record); 5: dlopt's own code raised outside every provider call (journaled
as an ``internal_error`` record with its traceback: no plugin is to blame, and a new
worker would fail the same way); anything else: the worker died. dlopt's own warnings (a plan cache
record set aside) are journaled for the host to warn again. A worker whose host died (a
fleet's Ray worker killed, say) stops at once with its children: it must not race on
beside the host's successor on the same machine.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import attrs
import torch

from dlopt.contract.provider import BuiltPlan, ProviderAvailability, ProviderProtocol
from dlopt.errors import ConfigurationError
from dlopt.events import Event, EventKind, fan_out
from dlopt.isolation.journal import Heartbeat, JournalWriter
from dlopt.isolation.transfer import (
    HOST_PID_ENV,
    PLUGIN_PREFIX,
    WORKER_MARK_ENV,
    WorkerSpec,
    build_model,
    policy_from_json,
    read_spec,
    read_workload,
    resolve_reference,
    weights_sha256,
)
from dlopt.platform.interrupt import shielded
from dlopt.platform.processes import (
    become_subreaper,
    descendants,
    end_processes,
    marked_processes,
)
from dlopt.settings.policy import OptimizationPolicy
from dlopt.vocabulary import Stage

#: A probe past its own time limit is answered "unavailable" by the probe stage, but its
#: thread cannot be stopped: this long after the limit the watchdog kills the worker
#: (and the probe with it) and the plan is reported hung at probe.
PROBE_WATCHDOG_GRACE_S = 1.0
#: Exit status of a worker whose selection raised an error it journaled.
EXIT_SELECTION_ERROR = 3
#: Exit status of a worker that left because its host died.
EXIT_HOST_GONE = 4
#: Exit status of a worker whose own code (dlopt's) raised outside every provider call.
EXIT_INTERNAL_ERROR = 5
#: How often the worker checks that its host is still alive (seconds).
HOST_POLL_S = 0.25
#: How long a process the plans left running is given to end on SIGTERM before SIGKILL.
LEFTOVER_GRACE_S = 1.0


class Watched:
    """What the worker knows of each plan's calls, shared by its wrapped providers."""

    def __init__(
        self,
        policy: OptimizationPolicy,
        journal: JournalWriter,
        heartbeat: Heartbeat,
        lost: frozenset[str] = frozenset(),
    ) -> None:
        self.policy = policy
        self.journal = journal
        self.heartbeat = heartbeat
        #: Plans that crashed or hung in an earlier worker: they stay in the selection's
        #: plan set (its cache key is the one the whole set gives, so a record stored after
        #: a fault is found again by the same selection) but are never run again.
        self.lost = lost
        self.stage_of: dict[str, str] = {}
        self.fastest_call: dict[str, float] = {}
        self._marked: set[tuple[str, str]] = set()
        #: The plan whose probe is running now (in the probe's own thread).
        self.probing: str | None = None

    def running(self, plan: str, stage: str, case: str | None = None) -> None:
        """The journal's "now running" marker, once per plan and stage (durable)."""
        if (plan, stage) in self._marked:
            return
        self._marked.add((plan, stage))
        self.journal.append(
            {"kind": "running", "plan": plan, "stage": stage, "case": case, "at": time.time()},
            durable=True,
        )

    def call_limit(self, plan: str) -> float | None:
        """A call's watchdog: a multiple of the plan's fastest call, with a floor; its
        first call (which may compile) gets the build cap."""
        policy = self.policy
        fastest = self.fastest_call.get(plan)
        if fastest is None:
            return policy.build_timeout_s
        return max(policy.call_timeout_floor_s, policy.call_timeout_factor * fastest)

    def on_event(self, event: Event) -> None:
        if event.kind is EventKind.PROVIDER_UNAVAILABLE and event.candidate == self.probing:
            # The probe's time limit answered while its thread runs on, and a thread
            # cannot be stopped: the watchdog ends it with this worker, which waits for
            # that instead of racing beside it (the next worker runs without the plan).
            time.sleep(self.policy.probe_timeout_s + PROBE_WATCHDOG_GRACE_S + 60)
        if event.kind is EventKind.STAGE_STARTED and event.candidate is not None:
            self.stage_of[event.candidate] = str(event.data.get("stage", ""))
        elif event.kind is EventKind.CANDIDATE_VALIDATED and event.candidate is not None:
            self.stage_of[event.candidate] = Stage.MEASURE.value
        record = {
            "kind": "event",
            "event": event.kind.value,
            "message": event.message,
            "candidate": event.candidate,
            "data": event.data,
        }
        # Rounds are many and their samples are re-measured on resume: flushed, not synced.
        self.journal.append(record, durable=event.kind is not EventKind.ROUND_FINISHED)


class WatchedProvider:
    """A provider whose probe, build and every call are announced before they run.

    Its ``save_program`` (where the provider has one) is given the plan as the provider
    built it, its own runner in place of the announcing one: a provider saves a program
    from what its runner holds (the Inductor plans, the module they compiled).
    """

    def __init__(self, inner: ProviderProtocol, watched: Watched) -> None:
        self._inner = inner
        self._watched = watched
        #: The provider itself, for what is keyed by its class (the plan cache): an
        #: isolated selection and one in process must find the same record.
        self.__wrapped__ = inner

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name == "save_program" and callable(attribute):
            return _saving_as_built(attribute)
        return attribute

    @property
    def name(self) -> str:
        return str(self._inner.name)

    def probe(self, context: Any) -> Any:
        watched = self._watched
        if self.name in watched.lost:
            return ProviderAvailability.unavailable(
                "crashed or hung in an earlier isolated worker; not run again"
            )
        watched.running(self.name, Stage.PROBE.value)
        # The probe's own thread limit answers first; the watchdog then ends the probe
        # for good, with the worker (a thread cannot be killed).
        watched.heartbeat.begin(
            self.name, Stage.PROBE.value, watched.policy.probe_timeout_s + PROBE_WATCHDOG_GRACE_S
        )
        watched.probing = self.name
        try:
            return self._inner.probe(context)
        finally:
            watched.probing = None
            watched.heartbeat.end()

    def build(self, model: torch.nn.Module, context: Any) -> Any:
        watched = self._watched
        # The journal and the heartbeat are never torn by a build abandoned at the budget's
        # deadline (dlopt.platform.interrupt): only the plugin's own code is interrupted.
        with shielded():
            watched.running(self.name, Stage.BUILD.value)
            watched.heartbeat.begin(self.name, Stage.BUILD.value, watched.policy.build_timeout_s)
        try:
            plan = self._inner.build(model, context)
        finally:
            with shielded():
                watched.heartbeat.end()
        if isinstance(plan, BuiltPlan):
            plan.runner = _watched_runner(self.name, plan.runner, watched)
        return plan


def _saving_as_built(save_program: Any) -> Any:
    """``save_program`` called with the plan's runner as its provider built it."""

    def save(plan: BuiltPlan, directory: Path, context: Any) -> Any:
        own = getattr(plan.runner, "__wrapped__", plan.runner)
        return save_program(attrs.evolve(plan, runner=own), directory, context)

    return save


def _watched_runner(plan_name: str, runner: Any, watched: Watched) -> Any:
    heartbeat = watched.heartbeat

    def call(*args: Any, **kwargs: Any) -> Any:
        stage = watched.stage_of.get(plan_name, Stage.FIRST_CALL.value)
        with shielded():
            watched.running(plan_name, stage)
            heartbeat.begin(plan_name, stage, watched.call_limit(plan_name))
        start = time.perf_counter()
        try:
            return runner(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            with shielded():
                heartbeat.end()
            if elapsed < watched.fastest_call.get(plan_name, float("inf")):
                watched.fastest_call[plan_name] = elapsed

    call.__wrapped__ = runner  # type: ignore[attr-defined]
    return call


def start_worker(spec: WorkerSpec) -> tuple[OptimizationPolicy, Watched, Any]:
    """Open the journal and heartbeat, load the plugins (each announced), wrap every
    provider: ``(policy, watched, registry)``."""
    from dlopt.plugins.discovery import PluginSettings, load_providers

    journal = JournalWriter(spec.journal)
    heartbeat = Heartbeat(spec.heartbeat)
    # The policy may name a metric a plugin registers, known once the plugins are loaded:
    # until then its limits serve without the user metrics.
    policy = policy_from_json(spec.policy, user_metrics=False)
    lost = frozenset(n for n in spec.excluded if not n.startswith(PLUGIN_PREFIX))
    watched = Watched(policy, journal, heartbeat, lost)
    journal.append({"kind": "start", "pid": os.getpid(), "attempt": spec.attempt}, durable=True)

    def on_plugin(name: str | None) -> None:
        if name is None:
            heartbeat.end()
            return
        watched.running(PLUGIN_PREFIX + name, "load")
        heartbeat.begin(
            PLUGIN_PREFIX + name, "load", policy.probe_timeout_s + PROBE_WATCHDOG_GRACE_S
        )

    settings = PluginSettings.from_env()
    lost_plugins = {
        n.removeprefix(PLUGIN_PREFIX) for n in spec.excluded if n.startswith(PLUGIN_PREFIX)
    }
    settings = attrs.evolve(settings, deny=settings.deny | lost_plugins)
    registry = load_providers(settings, on_plugin=on_plugin)
    policy = watched.policy = policy_from_json(spec.policy)
    registry.providers[:] = [
        attrs.evolve(info, provider=WatchedProvider(info.provider, watched))
        for info in registry.providers
    ]
    return policy, watched, registry


def run_selection(spec: WorkerSpec) -> None:
    """Run the selection ``spec`` describes; the report goes to ``spec.result``."""
    from dlopt.engine.select import Selection, select
    from dlopt.measurement import MonotonicClock
    from dlopt.pipeline.state import SelectionContext
    from dlopt.platform.serialization import atomic_write_text

    policy, watched, registry = start_worker(spec)
    explicit = [WatchedProvider(resolve_reference(ref)(), watched) for ref in spec.providers]
    assert spec.workload is not None
    model, _ = build_model(spec.model, spec.target.input_device)
    if spec.weights and weights_sha256(model) != spec.weights:
        raise ConfigurationError(
            f"the model factory {spec.model} built a model with other weights in the "
            "isolated worker than in this process, so no plan raced there can be judged "
            "here: make it build the same model on every call (load saved weights, or seed "
            "every random generator it draws from), or select in process "
            "(--in-process, OptimizationPolicy(isolation='in_process'))"
        )
    # The host converted the workload once; it comes here as it will race.
    workload = read_workload(spec.workload, spec.tensors, spec.target.input_device)
    # The plans lost to a fault stay chosen (the cache key stays the whole set's) and
    # answer their probe "unavailable" (Watched.lost): none of them runs again.
    policy = attrs.evolve(policy, isolation="in_process")
    clock = MonotonicClock()
    context = SelectionContext(
        policy,
        spec.target,
        clock,
        fan_out(registry.emit, watched.on_event),
        # The time budget counts from the host's select, this worker's start-up included.
        started_ns=(
            clock.now_ns() - int(max(time.time() - spec.started_at, 0.0) * 1e9)
            if spec.started_at
            else None
        ),
    )
    artifact_dir = Path(spec.artifact_dir) if spec.artifact_dir else None
    if spec.handback:
        from dlopt.cache.record_store import PlanCacheWarning

        # The user named no plan cache: a handback record that cannot be written only
        # means the host builds the winner again, which is not theirs to be warned about.
        warnings.filterwarnings("ignore", category=PlanCacheWarning)
    selection = Selection(
        model, workload, context, registry, explicit, artifact_dir, save_programs=not spec.handback
    )
    decision = select(selection)
    atomic_write_text(spec.result, decision.report.to_json() + "\n")
    watched.journal.append(
        {"kind": "done", "selected": decision.report.selected_plan}, durable=True
    )
    decision.close()


def run_probes(spec: WorkerSpec) -> None:
    """Load the plugins and probe every plan but the excluded; statuses to ``spec.result``."""
    from dlopt.contract.provider import ProviderContext
    from dlopt.pipeline.probe import probe_provider
    from dlopt.platform.serialization import atomic_write_text, dumps

    policy, watched, registry = start_worker(spec)
    context = ProviderContext(target=spec.target, policy=policy)
    statuses = [
        probe_provider(info, context)
        for info in registry.providers
        if info.name not in spec.excluded
    ]
    result = {"providers": statuses, "plugin_failures": registry.failures}
    atomic_write_text(spec.result, dumps(result) + "\n")
    watched.journal.append({"kind": "done"}, durable=True)


#: Where faulthandler writes (kept open for the worker's life).
_CRASH_LOG: Any = None


def leave_with_the_host(host_pid: int) -> threading.Thread:
    """Watch the host from a daemon thread: once this process's parent is no longer
    ``host_pid`` (the host died and the worker was handed to another parent), end this
    worker's descendants and its process group (it leads its own, so its SDK's children
    go too, those in groups of their own included) and exit."""

    def watch() -> None:
        while os.getppid() == host_pid:
            time.sleep(HOST_POLL_S)
        end_processes(descendants(os.getpid()), grace_s=0.0)
        with contextlib.suppress(OSError):
            if os.getpgrp() == os.getpid():  # only a group this worker leads
                os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(EXIT_HOST_GONE)

    thread = threading.Thread(target=watch, name="dlopt-host-watch", daemon=True)
    thread.start()
    return thread


def end_leftovers(journal: str) -> None:
    """End what this worker's plans started and left running: its descendants (orphans
    come to it: :func:`become_subreaper`) and every process carrying its mark. What was
    found is journaled for the host, which reports what could not be ended."""
    mark = os.environ.get(WORKER_MARK_ENV)
    found = {info.pid: info for info in descendants(os.getpid())}
    if mark:
        found.update((info.pid, info) for info in marked_processes(WORKER_MARK_ENV, mark))
    if not found:
        return
    survivors = end_processes(found.values(), grace_s=LEFTOVER_GRACE_S)
    ended = [info for info in found.values() if info not in survivors]
    JournalWriter(journal).append(
        {
            "kind": "leftovers",
            "ended": [info.describe() for info in ended],
            "survivors": [info.describe() for info in survivors],
        },
        durable=True,
    )


def journal_warnings(journal: JournalWriter) -> None:
    """Journal dlopt's own warnings as they are shown (a plan cache record set aside):
    the host warns them again, as a selection in its own process would have."""
    show = warnings.showwarning

    def journaled(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if category.__module__.partition(".")[0] == "dlopt":
            with contextlib.suppress(Exception):  # a warning never ends the worker
                journal.append(
                    {"kind": "warning", "category": category.__name__, "message": str(message)},
                    durable=True,
                )
        show(message, category, filename, lineno, file, line)

    warnings.showwarning = journaled


def main(argv: list[str]) -> int:
    from dlopt.errors import DloptError

    # A native crash prints the crashing thread's Python stack to the worker's stderr: the
    # host keeps the last lines as the fault's evidence. Through a copy of the descriptor,
    # as SDK output capture points fd 2 elsewhere while plugins load, probe and build.
    global _CRASH_LOG
    _CRASH_LOG = os.fdopen(os.dup(2), "w")
    faulthandler.enable(file=_CRASH_LOG, all_threads=False)
    host = os.environ.get(HOST_PID_ENV, "")
    leave_with_the_host(int(host) if host.isdigit() else os.getppid())
    # What a plan's process starts and abandons comes to this worker, to be ended with it.
    become_subreaper()
    spec = read_spec(argv[0])
    # The host's import path exactly, in its order (the bootstrap dropped the working
    # directory ``-c`` puts first); what this interpreter added itself comes after it.
    sys.path[:] = [*spec.sys_path, *(entry for entry in sys.path if entry not in spec.sys_path)]
    journal_warnings(JournalWriter(spec.journal))
    try:
        if spec.task == "probe":
            run_probes(spec)
        else:
            run_selection(spec)
    except DloptError as exc:
        JournalWriter(spec.journal).append(
            {"kind": "error", "type": type(exc).__name__, "message": str(exc)}, durable=True
        )
        return EXIT_SELECTION_ERROR
    except Exception as exc:
        # Every provider call is caught where it runs (a plan's failure is a value): what
        # comes here is dlopt's own code failing, which no restart would change.
        trace = traceback.format_exc()
        print(trace, file=_CRASH_LOG, flush=True)
        JournalWriter(spec.journal).append(
            {
                "kind": "internal_error",
                "type": type(exc).__name__,
                "message": str(exc),
                "traceback": trace[-20000:],
            },
            durable=True,
        )
        return EXIT_INTERNAL_ERROR
    finally:
        end_leftovers(spec.journal)
    return 0


def run(argv: list[str]) -> None:
    """The worker's whole life (what ``BOOTSTRAP`` calls): :func:`main`, then leave at
    once; a probe thread abandoned in the background must not hold the exit."""
    sys.stdout.flush()
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


#: How the host starts a worker: ``python -c BOOTSTRAP SPEC``. ``python -m`` would put the
#: working directory first on ``sys.path``, ahead of the packages the host found first,
#: so a stray ``onnxruntime.py`` there would shadow the SDK in the worker alone; ``-c``
#: puts ``""`` there, dropped before anything else is imported.
BOOTSTRAP = (
    "import sys\n"
    "if sys.path[:1] == ['']:\n"
    "    del sys.path[0]\n"
    "from dlopt.isolation.worker import run\n"
    "run(sys.argv[1:])\n"
)


if __name__ == "__main__":
    run(sys.argv[1:])
