"""``dlopt fleet run``: one Ray task per (job, machine kind), on a node of that kind.

- **Placement**: a kind's resources are the task's resource request; a kind's labels are
  its ``label_selector``. Every race also asks for one unit of ``dlopt_race``, which each
  node advertises exactly once: at most one race per node at a time.
- **Failures**: a task whose process dies (node lost, worker killed) is retried by Ray
  (``max_retries``); an exception is never retried (``retry_exceptions=False``), and a
  provider's crash never reaches Ray at all (the isolated selection inside the task
  reports it as evidence).
- **Progress**: a line per (job, kind) as it finishes; Ctrl-C cancels what has not
  finished and says what has, and where it is.

Ray is imported here, inside functions only: ``import dlopt`` and the CLI never load it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attrs import frozen

from dlopt.errors import ConfigurationError
from dlopt.fleet.result_store import FleetResult, ResultStore
from dlopt.fleet.spec import RACE_RESOURCE, FleetSpec, MachineKind, ResolvedJob
from dlopt.platform.serialization import from_jsonable

INSTALL_HINT = "pip install 'dlopt-core[fleet]'"
#: Retries of a task whose process died (not of a failed race: that is evidence).
DEFAULT_MAX_RETRIES = 3
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


def connect(address: str, spec: FleetSpec) -> Any:
    """Join or start Ray: ``local`` starts a small local instance standing in for the
    spec's machine kinds (reused when this process already runs one), ``auto`` joins the
    cluster this machine is part of, ``ray://HOST:PORT`` a remote one."""
    ray = import_ray()
    if address == "local":
        if ray.is_initialized():
            return ray
        resources, labels = local_node_settings(spec)
        ray.init(
            address="local",
            num_cpus=max(1, min(2, os.cpu_count() or 1)),
            resources=resources,
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
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:
            raise ConfigurationError(
                f"cannot reach a Ray cluster at {address}: {exc}. Start one with `ray start "
                "--head` (docs/fleet.md) or use --address local"
            ) from None
    return ray


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


def _warn_about_missing_nodes(
    ray: Any, spec: FleetSpec, kinds: Sequence[str], echo: Callable[[str], None]
) -> None:
    try:
        nodes = ray.nodes()
    except Exception:  # the check is advice; the races are scheduled either way
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
    echo: Callable[[str], None] = print,
) -> FleetRun:
    """Qualify every (job, machine kind) of ``spec``; see the module docstring."""
    from dlopt.fleet.task import qualify

    ray = connect(address, spec)
    store = ResultStore.open(spec.store)
    remote = ray.remote(max_retries=max_retries, retry_exceptions=False)(qualify)
    pending: dict[Any, dict[str, Any]] = {}
    for payload in payloads(spec, jobs, allow_imports=allow_imports):
        options = task_options(spec.kinds[payload["kind"]])
        options["name"] = f"dlopt-fleet:{payload['job']}@{payload['kind']}"
        pending[remote.options(**options).remote(payload)] = payload
    total = len(pending)
    echo(f"dlopt fleet: {total} races ({len(jobs)} jobs) scheduled; results in {store.location}")
    used = list(dict.fromkeys(p["kind"] for p in pending.values()))
    _warn_about_missing_nodes(ray, spec, used, echo)
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
    except KeyboardInterrupt:
        echo("dlopt fleet: interrupted")
        return _stop(ray, pending, finished, store, echo, interrupted=True)
    return FleetRun(tuple(finished))


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
