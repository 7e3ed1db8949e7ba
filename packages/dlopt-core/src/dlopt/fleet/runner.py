"""``dlopt fleet run``: one Ray task per (job, machine kind), on a node of that kind.

- **Placement**: a kind's resources are the task's resource request; a kind's labels are
  its ``label_selector``. Every race also asks for one unit of ``dlopt_race``, which each
  node advertises exactly once: at most one race per node at a time.
- **Failures**: a task whose process dies (node lost, worker killed) is retried by Ray
  (``max_retries``); an exception is never retried (``retry_exceptions=False``), and a
  provider's crash never reaches Ray at all (the isolated selection inside the task
  reports it as evidence).
- **Lost nodes**: when the last live node of a kind leaves while races of that kind are
  still to run, they wait ``lost_node_wait_s`` for another node of the kind to join, and
  are then reported ``lost``, with the node they last ran on and why.
- **Joining a cluster** (``auto``, ``ray://``): the address is resolved and probed
  before Ray is asked to connect, and the connection is given ``connect_timeout_s``;
  an address nothing answers at, a Ray Client address without ``ray[client]``, or a
  cluster that does not answer in time is a ConfigurationError naming the address.
- **Progress**: a line per (job, kind) as it finishes; Ctrl-C cancels what has not
  finished and says what has, and where it is.

Ray is imported here, inside functions only: ``import dlopt`` and the CLI never load it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attrs import frozen

from dlopt.errors import ConfigurationError
from dlopt.fleet import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_LOST_NODE_WAIT_S
from dlopt.fleet.result_store import FleetResult, ResultStore
from dlopt.fleet.spec import RACE_RESOURCE, FleetSpec, MachineKind, ResolvedJob
from dlopt.platform.serialization import from_jsonable

INSTALL_HINT = "pip install 'dlopt-core[fleet]'"
#: Retries of a task whose process died (not of a failed race: that is evidence).
DEFAULT_MAX_RETRIES = 3
#: How often the driver looks at which nodes are alive while races are pending.
_NODE_CHECK_INTERVAL_S = 2.0
#: Ray Client's default port (``ray://HOST`` without one).
_RAY_CLIENT_PORT = 10001
#: Label keys Ray sets itself: a local instance cannot pretend to have them.
_RESERVED_LABEL_PREFIX = "ray.io/"
#: Ray's own resources, which a task asks for by keyword, never in ``resources``.
_RAY_KEYWORDS = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}


@frozen
class FleetRun:
    """What a run did: the results in the order they finished, and the (job, kind) pairs
    it cancelled (Ctrl-C, the time limit) or could not run."""

    results: tuple[FleetResult, ...]
    cancelled: tuple[tuple[str, str], ...] = ()
    interrupted: bool = False

    @property
    def failed(self) -> tuple[FleetResult, ...]:
        return tuple(r for r in self.results if r.status != "done")


def import_ray() -> Any:
    """Ray, or a clear error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigurationError(
            f"dlopt fleet runs on Ray, which is not installed: {INSTALL_HINT}"
        ) from None
    return ray


def local_node_settings(spec: FleetSpec) -> tuple[dict[str, float], dict[str, str]]:
    """The resources and labels a local instance needs to stand in for every machine kind
    of ``spec`` (and the one ``dlopt_race`` unit)."""
    resources: dict[str, float] = {RACE_RESOURCE: 1.0}
    labels: dict[str, str] = {}
    for name, kind in spec.kinds.items():
        for resource, amount in kind.resources.items():
            if resource in _RAY_KEYWORDS:
                continue  # Ray's own, detected on the node
            resources[resource] = max(resources.get(resource, 0.0), float(amount))
        for key, value in kind.labels.items():
            if key.startswith(_RESERVED_LABEL_PREFIX):
                raise ConfigurationError(
                    f"kinds.{name}: a local Ray instance cannot stand in for the label {key!r} "
                    "(Ray sets ray.io/ labels itself); give the kind resources to test it "
                    "locally, or run on a cluster (--address auto)"
                )
            if labels.get(key, value) != value or not _plain_label_value(value):
                raise ConfigurationError(
                    f"kinds.{name}: a local Ray instance is one node and cannot have label "
                    f"{key!r} = {value!r} beside the other kinds' labels; test kinds "
                    "locally with resources"
                )
            labels[key] = value
    return resources, labels


def _plain_label_value(value: str) -> bool:
    return not value.startswith("!") and not value.startswith("in(")


def connect(address: str, spec: FleetSpec, *, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> Any:
    """Join or start Ray for ``spec``'s fleet (:func:`connect_ray`): a local instance stands
    in for the spec's machine kinds."""
    resources, labels = local_node_settings(spec)
    return connect_ray(address, resources=resources, labels=labels, timeout_s=timeout_s)


def connect_ray(
    address: str,
    *,
    resources: dict[str, float] | None = None,
    labels: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> Any:
    """Join or start Ray: ``local`` starts a small local instance (with ``resources`` and
    ``labels``; reused when this process already runs one), ``auto`` joins the cluster
    this machine is part of (``$RAY_ADDRESS``, else the one ``ray start`` made here),
    ``ray://HOST:PORT`` a remote one through Ray Client. Joining takes at most
    ``timeout_s``; an address that cannot be used is a ConfigurationError (one line,
    naming the address and what to do)."""
    ray = import_ray()
    if address == "local":
        if ray.is_initialized():
            return ray
        ray.init(
            address="local",
            num_cpus=max(1, min(2, os.cpu_count() or 1)),
            resources=resources or None,
            labels=labels or None,
            include_dashboard=False,
            object_store_memory=128 * 2**20,
            log_to_driver=False,
            configure_logging=False,
        )
        return ray
    if address != "auto" and not address.startswith("ray://"):
        raise ConfigurationError(
            f"--address {address!r}: give local, auto or ray://HOST:PORT (docs/fleet.md)"
        )
    if ray.is_initialized():
        return ray
    deadline = time.monotonic() + timeout_s
    target = cluster_address(address)
    probe_address(target, timeout_s)
    _join_in_a_probe(target, timeout_s, deadline)
    _init_within(ray, target, timeout_s, deadline)
    return ray


def cluster_address(address: str) -> str:
    """The address ``auto`` or ``ray://...`` stands for, as Ray would resolve it:
    ``$RAY_ADDRESS`` first, then the cluster ``ray start`` made on this machine; a Ray
    Client address needs ``ray[client]``. A ConfigurationError when there is none."""
    from_env = os.environ.get("RAY_ADDRESS", "").strip() if address == "auto" else ""
    chosen = from_env or address
    how = f"RAY_ADDRESS={chosen}" if from_env else f"--address {chosen}"
    if "://" in chosen:
        if not chosen.startswith("ray://"):
            raise ConfigurationError(
                f"{how}: give HOST:PORT of a cluster's head, or ray://HOST:PORT (Ray Client)"
            )
        if importlib.util.find_spec("grpc") is None:
            raise ConfigurationError(
                f"{how} joins through Ray Client, which needs pip install 'ray[client]' "
                "here; or run the fleet on a node of the cluster with --address auto"
            )
        return chosen
    if chosen != "auto":
        return chosen
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die

        return str(canonicalize_bootstrap_address_or_die("auto"))
    except ConnectionError:
        raise ConfigurationError(
            "--address auto: no Ray cluster runs on this machine and RAY_ADDRESS is not set; "
            "start one with `ray start --head` (docs/fleet.md), set RAY_ADDRESS=HOST:PORT, "
            "or use --address local"
        ) from None
    except Exception:  # Ray's own lookup moved: let ray.init resolve it, within the time limit
        return "auto"


def probe_address(address: str, timeout_s: float) -> None:
    """Refuse ``address`` (``HOST:PORT`` or ``ray://HOST[:PORT]``) when nothing answers
    there: a TCP connection, within ``timeout_s``, before Ray is asked to connect (Ray
    itself retries an unreachable address for minutes)."""
    if address == "auto":
        return
    text = address.removeprefix("ray://")
    host, colon, port_text = text.rpartition(":")
    if not colon:
        host, port_text = text, str(_RAY_CLIENT_PORT if address.startswith("ray://") else 6379)
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigurationError(f"Ray address {address!r}: the port is not a number") from None
    if not 0 < port < 65536 or not host:
        raise ConfigurationError(f"Ray address {address!r}: give HOST:PORT with a port 1-65535")
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout_s):
            pass
    except TimeoutError:
        raise ConfigurationError(
            f"no Ray cluster answered at {address} within {timeout_s:g} s; check the address "
            "and that the head's port is reachable from here (--connect-timeout S waits longer)"
        ) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigurationError(
            f"no Ray cluster at {address} ({reason}); start one with `ray start --head` "
            "(docs/fleet.md), give the address of a running one, or use --address local"
        ) from None


#: What the probe process runs: join the cluster as this process will, and leave.
_JOIN_PROBE = (
    "import sys, ray\n"
    "ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)\n"
    "ray.shutdown()\n"
)


def _join_in_a_probe(address: str, timeout_s: float, deadline: float) -> None:
    """Join ``address`` once in a separate process, killed when the time is up: a port
    that answers may still not be a Ray cluster's, and Ray retries such an address for
    minutes, printing as it goes. A failure is one line: the probe's last error."""
    import signal
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-c", _JOIN_PROBE, address],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _, err = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise ConfigurationError(
            f"the Ray cluster at {address} did not let a process join within {timeout_s:g} s; "
            "check that it is a Ray head's address and that the cluster is healthy (`ray "
            "status --address HOST:PORT`), or wait longer with --connect-timeout S"
        ) from None
    if process.returncode != 0:
        lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line.split(":", 1)[0]]
        reason = (errors or lines or [f"exit status {process.returncode}"])[-1].strip()
        raise ConfigurationError(f"cannot join the Ray cluster at {address}: {reason}")


class _OnlyFromThisThread(logging.Filter):
    """Ray warns that it sets no SIGTERM handler when joined from a helper thread: true,
    and nothing the user can act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _init_within(ray: Any, address: str, timeout_s: float, deadline: float) -> None:
    """``ray.init(address)`` in a helper thread, waited on for ``timeout_s``: Ray retries a
    cluster that does not answer for minutes, and cannot be interrupted meanwhile."""
    outcome: list[BaseException | None] = []

    def join() -> None:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
            outcome.append(None)
        except BaseException as exc:  # reported by the waiting thread
            outcome.append(exc)

    quiet = _OnlyFromThisThread()
    logger = logging.getLogger("ray._private.worker")
    logger.addFilter(quiet)
    try:
        helper = threading.Thread(target=join, name="dlopt-ray-init", daemon=True)
        helper.start()
        helper.join(max(0.1, deadline - time.monotonic()))
    finally:
        logger.removeFilter(quiet)
    if not outcome:
        raise ConfigurationError(
            f"the Ray cluster at {address} did not let this process join within "
            f"{timeout_s:g} s; check that it is a Ray head's address and that the cluster is "
            "healthy (`ray status --address HOST:PORT`), or wait longer with --connect-timeout S"
        )
    error = outcome[0]
    if error is not None:
        raise ConfigurationError(
            f"cannot join the Ray cluster at {address}: {type(error).__name__}: "
            f"{_first_line(error)}"
        ) from None


def kinds_without_a_node(
    spec: FleetSpec, kinds: Sequence[str], nodes: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The machine kinds among ``kinds`` that no live node of ``nodes`` (``ray.nodes()``)
    can race now: none has one ``dlopt_race`` unit, the kind's resources and its labels. A
    label value in Ray's selector syntax (``!v``, ``in(a,b)``) is left to Ray."""

    def fits(node: Mapping[str, Any], name: str) -> bool:
        kind = spec.kinds[name]
        have = node.get("Resources") or {}
        labels = node.get("Labels") or {}
        wanted = {RACE_RESOURCE: 1.0, **kind.resources}
        return all(have.get(r, 0.0) >= amount for r, amount in wanted.items()) and all(
            labels.get(key) == value
            for key, value in kind.labels.items()
            if _plain_label_value(value)
        )

    alive = [node for node in nodes if node.get("Alive", True)]
    return [name for name in kinds if not any(fits(node, name) for node in alive)]


def _live_nodes(ray: Any) -> list[Mapping[str, Any]] | None:
    """``ray.nodes()``, or ``None`` when Ray cannot say now (the node checks are advice:
    the races are scheduled, and wait, either way)."""
    try:
        return list(ray.nodes())
    except Exception:
        return None


def _warn_about_missing_nodes(
    spec: FleetSpec,
    kinds: Sequence[str],
    nodes: Sequence[Mapping[str, Any]] | None,
    echo: Callable[[str], None],
) -> None:
    if nodes is None:
        return
    for name in kinds_without_a_node(spec, kinds, nodes):
        kind = spec.kinds[name]
        wanted = f"labels {kind.labels}" if kind.labels else f"resources {dict(kind.resources)}"
        echo(
            f"dlopt fleet: no node of kind {name} is up ({wanted} and one {RACE_RESOURCE!r}); "
            f"its races wait until one joins (start it with `ray start ... --resources "
            f"'{{\"{RACE_RESOURCE}\": 1}}'`, docs/fleet.md), or Ctrl-C / --timeout"
        )


def task_options(kind: MachineKind) -> dict[str, Any]:
    """How one race of ``kind`` asks Ray for a node: one CPU (unless the kind asks for
    more), one ``dlopt_race`` unit, the kind's resources, and its labels as a
    ``label_selector``."""
    options: dict[str, Any] = {"num_cpus": 1, "resources": {RACE_RESOURCE: 1}}
    for resource, amount in kind.resources.items():
        if resource in _RAY_KEYWORDS:
            options[_RAY_KEYWORDS[resource]] = amount
        else:
            options["resources"][resource] = amount
    if kind.labels:
        options["label_selector"] = dict(kind.labels)
    return options


def payloads(
    spec: FleetSpec, jobs: Sequence[ResolvedJob], *, allow_imports: bool
) -> list[dict[str, Any]]:
    """The plain data each task gets, one per (job, kind), in the spec's order."""
    from dlopt.platform.serialization import to_jsonable

    import_path = [p for p in sys.path if p] if allow_imports else []
    run = uuid.uuid4().hex
    made = []
    for resolved in jobs:
        job = resolved.job
        for kind in job.kinds:
            made.append(
                {
                    "spec": spec.name,
                    "job": job.name,
                    "kind": kind,
                    "run": run,
                    "store": spec.store,
                    "factory": resolved.factory,
                    "policy": dict(job.policy),
                    "device": spec.kinds[kind].device,
                    "threads": job.threads,
                    "workload": to_jsonable(job.workload),
                    "providers": list(job.providers),
                    "import_path": import_path,
                }
            )
    return made


def run_fleet(
    spec: FleetSpec,
    jobs: Sequence[ResolvedJob],
    *,
    address: str = "local",
    allow_imports: bool = False,
    max_retries: int = DEFAULT_MAX_RETRIES,
    timeout_s: float | None = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    lost_node_wait_s: float = DEFAULT_LOST_NODE_WAIT_S,
    echo: Callable[[str], None] = print,
) -> FleetRun:
    """Qualify every (job, machine kind) of ``spec``; see the module docstring."""
    from dlopt.fleet.task import qualify

    ray = connect(address, spec, timeout_s=connect_timeout_s)
    store = ResultStore.open(spec.store)
    remote = ray.remote(max_retries=max_retries, retry_exceptions=False)(qualify)
    pending: dict[Any, dict[str, Any]] = {}
    for payload in payloads(spec, jobs, allow_imports=allow_imports):
        # Every node reads the store where the driver resolved it (a relative path or
        # ``~`` would mean another place on each node).
        payload["store"] = store.location
        options = task_options(spec.kinds[payload["kind"]])
        options["name"] = f"dlopt-fleet:{payload['job']}@{payload['kind']}"
        pending[remote.options(**options).remote(payload)] = payload
    total = len(pending)
    echo(f"dlopt fleet: {total} races ({len(jobs)} jobs) scheduled; results in {store.location}")
    used = list(dict.fromkeys(p["kind"] for p in pending.values()))
    nodes = _live_nodes(ray)
    _warn_about_missing_nodes(spec, used, nodes, echo)
    watch = _NodeWatch(spec, lost_node_wait_s)
    watch.observe(nodes, set(used), time.monotonic())
    finished: list[FleetResult] = []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while pending:
            if deadline is not None and time.monotonic() > deadline:
                echo(f"dlopt fleet: time limit of {timeout_s:g} s reached")
                return _stop(ray, pending, finished, store, echo, interrupted=False)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                payload = pending.pop(ref)
                result = _collect(ray, ref, payload, store)
                finished.append(result)
                echo(f"[{len(finished)}/{total}] {progress_line(result)}")
            for kind, reason in watch.lost_kinds(ray, {p["kind"] for p in pending.values()}):
                for ref, payload in list(pending.items()):
                    if payload["kind"] != kind:
                        continue
                    with contextlib.suppress(Exception):  # already gone with its node
                        ray.cancel(ref, recursive=True)
                    del pending[ref]
                    result = _lost(payload, store, reason)
                    finished.append(result)
                    echo(f"[{len(finished)}/{total}] {progress_line(result)}")
    except KeyboardInterrupt:
        echo("dlopt fleet: interrupted")
        return _stop(ray, pending, finished, store, echo, interrupted=True)
    return FleetRun(tuple(finished))


class _NodeWatch:
    """Which machine kinds lost their last live node while races of theirs were pending.

    A kind counts as lost once no live node of it has been seen for ``wait_s`` after one
    was: Ray keeps a race whose node died waiting, forever, for another node of the kind
    (its retry), so the driver decides when that wait is over. A kind that never had a
    node is not lost: its races wait for one to join, as the start of the run said.
    """

    def __init__(self, spec: FleetSpec, wait_s: float) -> None:
        self.spec = spec
        self.wait_s = wait_s
        self.last_check = -math.inf
        self.seen: dict[str, list[str]] = {}  # kind -> the live nodes of it last seen
        self.gone_since: dict[str, float] = {}

    def lost_kinds(self, ray: Any, kinds: set[str]) -> list[tuple[str, str]]:
        """The kinds among ``kinds`` (those with races pending) now lost, each with the
        reason their races get; the nodes are looked at every few seconds at most."""
        now = time.monotonic()
        if not kinds or now - self.last_check < min(_NODE_CHECK_INTERVAL_S, self.wait_s):
            return []
        return self.observe(_live_nodes(ray), kinds, now)

    def observe(
        self, nodes: Sequence[Mapping[str, Any]] | None, kinds: set[str], now: float
    ) -> list[tuple[str, str]]:
        """Record which live nodes each of ``kinds`` has in ``nodes`` (``ray.nodes()``) at
        ``now``, and return the kinds that have now been without one for the wait."""
        self.last_check = now
        if nodes is None:
            return []
        lost = []
        for kind in sorted(kinds):
            live = [
                str(node.get("NodeID", ""))
                for node in nodes
                if not kinds_without_a_node(self.spec, [kind], [node])
            ]
            if live:
                self.seen[kind] = live
                self.gone_since.pop(kind, None)
                continue
            if kind not in self.seen:
                continue
            since = self.gone_since.setdefault(kind, now)
            if now - since >= self.wait_s:
                last = ", ".join(node[:8] for node in self.seen.pop(kind)) or "?"
                lost.append(
                    (
                        kind,
                        f"lost: the last node of kind {kind} (node {last}) left the cluster "
                        f"and no other node of the kind joined within {self.wait_s:g} s; start "
                        "one (docs/fleet.md) and run the spec again to race it",
                    )
                )
        return lost


def _lost(payload: dict[str, Any], store: ResultStore, reason: str) -> FleetResult:
    """The result of a race whose nodes are gone: ``lost``, with the node it last started
    on (from its attempt record) and ``reason``; stored like any other."""
    now = time.time()
    where = store.last_attempt(payload["spec"], payload["job"], payload["kind"], payload["run"])
    result = FleetResult(
        spec=payload["spec"],
        job=payload["job"],
        kind=payload["kind"],
        status="lost",
        node_id=where.get("node_id"),
        host=str(where.get("host") or ""),
        pid=0,
        started_at=float(where.get("started_at") or now),
        ended_at=now,
        time_to_decision_s=0.0,
        error=reason,
        attempt=max(1, int(where.get("attempt") or 0)),
    )
    store.write_result(result, None)
    return result


def _collect(ray: Any, ref: Any, payload: dict[str, Any], store: ResultStore) -> FleetResult:
    """The task's result; a task Ray gave up on (its process died every retry, or dlopt
    itself failed there) becomes a ``failed`` result, stored like any other."""
    kind = payload["kind"]
    try:
        return from_jsonable(ray.get(ref), FleetResult)
    except Exception as exc:
        now = time.time()
        result = FleetResult(
            spec=payload["spec"],
            job=payload["job"],
            kind=kind,
            status="failed",
            node_id=None,
            host="",
            pid=0,
            started_at=now,
            ended_at=now,
            time_to_decision_s=0.0,
            error=f"the race's Ray task failed: {type(exc).__name__}: {_first_line(exc)}",
            attempt=max(1, store.attempts(payload["spec"], payload["job"], kind, payload["run"])),
        )
        store.write_result(result, None)
        return result


def _stop(
    ray: Any,
    pending: dict[Any, dict[str, Any]],
    finished: list[FleetResult],
    store: ResultStore,
    echo: Callable[[str], None],
    *,
    interrupted: bool,
) -> FleetRun:
    """Cancel every race not finished; say what finished and where it is."""
    for ref in pending:
        with contextlib.suppress(Exception):  # already finished or gone
            ray.cancel(ref, recursive=True)
    cancelled = tuple((p["job"], p["kind"]) for p in pending.values())
    done = ", ".join(f"{r.job}@{r.kind}" for r in finished) or "none"
    echo(f"dlopt fleet: finished: {done}; cancelled: {len(cancelled)}")
    echo(f"dlopt fleet: results of the finished races are in {store.location}")
    return FleetRun(tuple(finished), cancelled, interrupted)


def progress_line(result: FleetResult) -> str:
    """``demo@cpu_amx: native_channels_last 1.31x [1.12, 1.52] in 14.2 s on node 1a2b3c``."""
    from dlopt.reporting.tables import interval_text

    where = f"{result.job}@{result.kind}"
    node = f" on node {result.node_id[:8]}" if result.node_id else ""
    if result.attempt > 1:
        node += f" (attempt {result.attempt}: Ray retried it)"
    if result.status == "lost":
        return f"{where}: {result.error}"
    if result.status != "done":
        return f"{where}: failed{node}: {result.error}"
    speedup = interval_text(result.speedup) if result.speedup is not None else "(reference)"
    reused = " (cached plan, revalidated)" if result.cache_hit else ""
    line = (
        f"{where}: {result.selected_plan} {speedup}{reused} in "
        f"{result.time_to_decision_s:.1f} s{node}"
    )
    faults = [f"{f.plan} {f.fault}" for f in result.failures if f.fault]
    if faults:
        line += f"; {', '.join(faults)}"
    return line


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else ""
