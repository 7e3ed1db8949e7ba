"""What one Ray task runs on its node: the isolated selection of one (job, machine kind).

The selection runs with ``OptimizationPolicy(isolation="process")``: a provider that
segfaults or hangs is caught by the supervisor inside this task and reported as evidence
(a rejected plan with its fault), so the task itself ends normally and is never retried
for it. Only this task's own process dying (the node lost, the worker killed) is an
infrastructure failure, which Ray retries. A job that fails for a user's reason (the
model factory raised, a bad plan option) is a ``failed`` result with the error.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dlopt.errors import ConfigurationError, WorkloadError
from dlopt.fleet.result_store import Failure, FleetResult, ResultStore
from dlopt.vocabulary import Status

#: The environment variable Ray sets in its workers to the task's CPU count. torch reads
#: it, and torch's thread count is part of the cache key: a serving process, which does
#: not run under Ray, must find the record, so the race runs without Ray's setting.
_RAY_THREADS_ENV = "OMP_NUM_THREADS"


def workload_from_shapes(cases: Sequence[Mapping[str, Any]], device: str) -> Any:
    """The workload a job's ``[[jobs.workload]]`` cases describe: seeded random inputs,
    the same in every process (so the cache key matches a serving process that builds it
    the same way)."""
    import torch

    from dlopt.platform.sizes import memory_fault
    from dlopt.settings.workload import WorkloadCase, WorkloadProfile

    # The spec check refused shapes no machine can index; what fits depends on the node.
    fault = memory_fault([(str(c["name"]), tuple(c["shape"]), str(c["dtype"])) for c in cases])
    if fault is not None:
        raise WorkloadError(f"on this node, {fault}")
    generator = torch.Generator().manual_seed(0)
    built = []
    for case in cases:
        dtype = getattr(torch, str(case["dtype"]))
        shape = tuple(case["shape"])
        if dtype.is_floating_point:
            tensor = torch.randn(shape, generator=generator).to(dtype)
        elif dtype is torch.bool:
            tensor = torch.randint(0, 2, shape, generator=generator).bool()
        else:
            tensor = torch.randint(0, 100, shape, generator=generator).to(dtype)
        built.append(
            WorkloadCase(str(case["name"]), args=(tensor.to(device),), weight=float(case["weight"]))
        )
    return WorkloadProfile(cases=tuple(built))


def qualify(payload: dict[str, Any]) -> dict[str, Any]:
    """Race one (job, kind) and store its record and evidence; return the result as JSON.

    ``payload`` is plain data the driver built from the checked spec: ``spec``, ``job``,
    ``kind``, ``run`` (the run's id: attempts are counted per run), ``store``,
    ``factory``, ``policy`` (the job's table), ``device``,
    ``threads``, ``workload`` (cases, possibly empty), ``providers`` and ``import_path``
    (entries added to ``sys.path`` only when the user allowed spec imports).
    """
    from dlopt.platform.serialization import to_jsonable

    started = time.time()
    clock = time.perf_counter()
    for entry in reversed(payload.get("import_path", ())):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if payload.get("threads") is None:
        os.environ.pop(_RAY_THREADS_ENV, None)
    store = ResultStore.open(payload["store"])
    node_id, host = _node_id(), socket.gethostname()
    attempt = store.begin_attempt(
        payload["spec"],
        payload["job"],
        payload["kind"],
        payload["run"],
        node_id=node_id,
        host=host,
        started_at=started,
    )
    base: dict[str, Any] = {
        "spec": payload["spec"],
        "job": payload["job"],
        "kind": payload["kind"],
        "node_id": node_id,
        "host": host,
        "pid": os.getpid(),
        "started_at": started,
        "attempt": attempt,
    }
    report = None
    try:
        report = _select(payload, store)
    except Exception as exc:  # the job failed; the evidence says why, the fleet goes on
        message = (
            str(exc)
            if isinstance(exc, (ConfigurationError, WorkloadError))
            else f"{type(exc).__name__}: {exc}"
        )
        result = FleetResult(
            **base,
            status="failed",
            ended_at=time.time(),
            time_to_decision_s=time.perf_counter() - clock,
            error=message,
        )
    else:
        result = _result(base, report, time.perf_counter() - clock)
    store.write_result(result, report)
    return dict(to_jsonable(result))


def _select(payload: dict[str, Any], store: ResultStore) -> Any:
    from dlopt.api.optimizer import InferenceOptimizer
    from dlopt.fleet.spec import job_policy
    from dlopt.isolation.transfer import resolve_reference
    from dlopt.settings.target import ExecutionTarget

    cache_dir, temporary = store.race_cache_dir()
    try:
        policy = job_policy(payload.get("policy", {}), cache_dir)
        providers = [resolve_reference(ref)() for ref in payload.get("providers", ())]
        target = ExecutionTarget(payload["device"], threads=payload.get("threads"))
        workload = (
            workload_from_shapes(payload["workload"], target.input_device)
            if payload.get("workload")
            else None
        )
        optimizer = InferenceOptimizer(target, policy, providers)
        with optimizer.select(payload["factory"], workload) as decision:
            report = decision.report
        if temporary and report.cache is not None and report.cache.record_written:
            store.publish(cache_dir, report.cache.key)
        return report
    finally:
        if temporary:
            import shutil

            shutil.rmtree(cache_dir, ignore_errors=True)


def _result(base: dict[str, Any], report: Any, seconds: float) -> FleetResult:
    selected = report.candidate(report.selected_plan)
    failures = tuple(
        Failure(
            plan=c.name,
            stage=None if c.error is None else str(c.error.stage),
            message=c.error.message if c.error is not None else "",
            fault=None if c.fault is None else _fault_text(c.fault),
        )
        for c in report.candidates
        if c.status is Status.REJECTED or c.fault is not None
    )
    return FleetResult(
        **base,
        status="done",
        ended_at=time.time(),
        time_to_decision_s=seconds,
        key=None if report.cache is None else report.cache.key,
        selected_plan=report.selected_plan,
        baseline=report.baseline,
        speedup=selected.race.speedup_vs_reference,
        regret_bound=None if report.measurement is None else report.measurement.regret_bound,
        cache_hit=None if report.cache is None else report.cache.cache_hit,
        failures=failures,
    )


def _fault_text(fault: Any) -> str:
    how = fault.signal or (
        f"exit status {fault.exit_code}" if fault.exit_code is not None else None
    )
    if fault.kind == "hung" and fault.elapsed_s is not None:
        how = f"after {fault.elapsed_s:.1f} s"
    return f"{fault.kind} at {fault.stage}" + (f" ({how})" if how else "")


def _node_id() -> str | None:
    """The Ray node this runs on (``None`` outside Ray)."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        return str(ray.get_runtime_context().get_node_id())
    except Exception:
        return None
