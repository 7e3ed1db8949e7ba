"""``dlopt serve``'s Ray Serve application: replicas that serve a decision over HTTP.

Each replica builds the model and its workload from the factory (as ``dlopt select``
does), takes the plan for its machine from the plan cache, deciding where no record
exists (under a file lock in the cache directory, so replicas on one machine race once
and the others reuse the record after its recheck), and serves it batched
(:meth:`~dlopt.engine.decision.OptimizationDecision.batched`):

- ``POST /v1/predict``: an ``.npz`` body (positional inputs ``arg0``, ``arg1``...;
  keyword inputs by name) answered with the ``.npz`` of the outputs (``out0``... or their
  names); a request that does not fit gets a 4xx and a one-line reason;
- ``GET /healthz``: 200 once every replica of the application is running, else 503;
- ``GET /metrics``: the Prometheus text of every replica's production guard (each
  replica pushes its health record to a named actor every second and before answering).

Ray is imported inside functions only: the module loads without the ``serve`` extra.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attrs import asdict, frozen

from dlopt.platform.serialization import dumps

#: The application's name in Ray Serve and the health store's actor name prefix.
APP_NAME = "dlopt"
#: The largest request body read (bytes); a larger one is refused with 413.
MAX_BODY_BYTES = 256 * 2**20
#: How often a replica pushes its health record to the store (seconds).
HEALTH_PUSH_S = 1.0
NPZ_TYPE = "application/octet-stream"


@frozen
class ServeOptions:
    """What every replica needs to build its decision (plain JSON values)."""

    factory: str
    cases: tuple[str, ...] = ()
    inputs: str | None = None
    cache_dir: str = ""
    time_budget: float | str | None = "auto"
    device: str = "cpu"
    max_batch_size: int | None = None
    max_delay_ms: float = 2.0
    replicas: int = 1

    def to_json(self) -> str:
        return dumps(asdict(self), indent=None)

    @classmethod
    def from_json(cls, text: str) -> ServeOptions:
        data = json.loads(text)
        data["cases"] = tuple(data.get("cases") or ())
        return cls(**data)


def model_and_workload(options: ServeOptions) -> tuple[Any, Any]:
    """The model and the inputs it races on, from the factory and the case options."""
    from dlopt.cli.cmd_select import workload_from_args

    args = argparse.Namespace(
        model=options.factory, case=list(options.cases), input=None, inputs=options.inputs
    )
    return workload_from_args(args)


@contextlib.contextmanager
def decide_once(cache_dir: str) -> Iterator[None]:
    """Hold the cache directory's serve lock: replicas on one machine decide one at a
    time, so the first races and the others find its record."""
    path = Path(cache_dir)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / ".dlopt-serve.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def decide(options: ServeOptions) -> Any:
    """The decision a replica serves: from the plan cache, or raced once per machine."""
    from dlopt.api.optimizer import InferenceOptimizer
    from dlopt.settings.policy import OptimizationPolicy
    from dlopt.settings.target import ExecutionTarget

    model, workload = model_and_workload(options)
    policy = OptimizationPolicy(plan_cache_dir=options.cache_dir, time_budget_s=options.time_budget)
    with decide_once(options.cache_dir):
        return InferenceOptimizer(ExecutionTarget(options.device), policy).select(model, workload)


class HealthStore:
    """A named actor holding each replica's latest health record (as JSON values)."""

    def __init__(self) -> None:
        self.records: dict[str, Any] = {}

    def put(self, replica: str, record: Any) -> None:
        self.records[replica] = record

    def all(self) -> dict[str, Any]:
        return dict(self.records)


STORE_NAME = f"{APP_NAME}-health"


def start_health_store() -> Any:
    """The application's health store, owned by the process that runs ``dlopt serve`` (it
    ends with that process, whatever becomes of the replicas)."""
    import ray

    return ray.remote(num_cpus=0)(HealthStore).options(name=STORE_NAME).remote()


def health_store() -> Any:
    """The application's health store, from a replica."""
    import ray

    return ray.get_actor(STORE_NAME)


class ServeReplica:
    """One replica of the application (see the module docstring)."""

    def __init__(self, options_json: str) -> None:
        from ray import serve

        self.options = ServeOptions.from_json(options_json)
        self.decision = decide(self.options)
        serving = self.decision.report.serving
        interface = serving.interface if serving is not None else None
        if interface is None or not interface.usable:
            why = interface.note if interface is not None else "none recorded"
            raise RuntimeError(f"this model has no wire interface to serve over HTTP: {why}")
        self.interface = interface
        self.batched = self.decision.batched(
            max_batch_size=self.options.max_batch_size, max_delay_ms=self.options.max_delay_ms
        )
        context = serve.get_replica_context()
        self.replica = str(getattr(context, "replica_tag", None) or os.getpid())
        self.store = health_store()
        self._stop = threading.Event()
        threading.Thread(target=self._push_health, name="dlopt-health", daemon=True).start()

    def _push_health(self) -> None:
        while not self._stop.wait(HEALTH_PUSH_S):
            self._push()

    def _push(self) -> None:
        with contextlib.suppress(Exception):  # the store gone: the application is ending
            self.store.put.remote(self.replica, self.decision.health().to_jsonable())

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import PlainTextResponse, Response

        path, method = request.url.path.rstrip("/") or "/", request.method
        if path == "/v1/predict":
            if method != "POST":
                return PlainTextResponse("POST an .npz body to /v1/predict\n", status_code=405)
            return await self._predict(request)
        if path == "/healthz" and method == "GET":
            ready, text = replicas_ready(self.options.replicas)
            return PlainTextResponse(text + "\n", status_code=200 if ready else 503)
        if path == "/metrics" and method == "GET":
            return await self._metrics()
        return Response(
            f"no route {method} {path}: POST /v1/predict, GET /healthz, GET /metrics\n",
            status_code=404,
            media_type="text/plain",
        )

    async def _predict(self, request: Any) -> Any:
        from starlette.responses import PlainTextResponse, Response

        from dlopt.errors import ServingError
        from dlopt.serving.interface import BadRequest

        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return PlainTextResponse(
                f"the body holds {declared} bytes, more than {MAX_BODY_BYTES}\n", status_code=413
            )
        body = await request.body()
        try:
            args, kwargs = self.interface.read_request(body)
            outputs = await self.batched.acall(*args, **kwargs)
        except BadRequest as exc:
            return PlainTextResponse(f"{_line(exc)}\n", status_code=400)
        except ServingError as exc:  # refused by the policy (unseen shapes, NaN under raise)
            return PlainTextResponse(f"{_line(exc)}\n", status_code=422)
        except Exception as exc:  # the model itself failed on these inputs
            return PlainTextResponse(
                f"the model failed on this request: {type(exc).__name__}: {_line(exc)}\n",
                status_code=500,
            )
        return Response(self.interface.write_response(outputs), media_type=NPZ_TYPE)

    async def _metrics(self) -> Any:
        from starlette.responses import PlainTextResponse, Response

        try:
            from prometheus_client import CollectorRegistry, generate_latest
        except ImportError:
            return PlainTextResponse(
                'metrics need prometheus-client: pip install "dlopt-core[metrics]"\n',
                status_code=501,
            )
        from dlopt.platform.serialization import from_jsonable
        from dlopt.serving.health import HealthRecord
        from dlopt.serving.metrics import RecordsCollector

        self._push()
        records = await self.store.all.remote()
        labelled = [
            ({"decision": APP_NAME, "replica": replica}, from_jsonable(data, HealthRecord))
            for replica, data in sorted(records.items())
        ]
        registry = CollectorRegistry()
        registry.register(RecordsCollector(lambda: labelled))
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()


def _line(exc: BaseException) -> str:
    """An exception's message on one line (no traceback ever reaches a client)."""
    return " ".join(str(exc).split())[:1000] or type(exc).__name__


def import_serve() -> Any:
    """Ray Serve, or a clear error saying how to install it."""
    from dlopt.errors import ConfigurationError

    try:
        from ray import serve
    except ImportError:
        raise ConfigurationError(
            "dlopt serve runs on Ray Serve, which is not installed: pip install 'dlopt-core[serve]'"
        ) from None
    return serve


def replicas_ready(expected: int) -> tuple[bool, str]:
    """Whether every replica of the application is running, and how many are."""
    from ray import serve

    try:
        app = serve.status().applications[APP_NAME]
    except Exception as exc:  # the controller cannot be asked
        return False, f"not ready: {type(exc).__name__}: {exc}"
    running = 0
    for deployment in app.deployments.values():
        for state, count in deployment.replica_states.items():
            if getattr(state, "value", state) == "RUNNING":
                running += int(count)
    status = getattr(app.status, "value", app.status)
    ready = status == "RUNNING" and running >= expected
    return ready, f"{'ready' if ready else 'not ready'}: {running} of {expected} replicas running"
