"""``dlopt serve``: a decision served over HTTP by a Ray Serve application (docs/deploy.md).

::

    dlopt serve mypkg.models:build --case b1=1x3x224x224@70 --case b8=8x3x224x224@30 \\
        --port 8000 --replicas 2

Checks the factory and the inputs here first (a mistake is one line, before Ray starts),
then starts or joins Ray (``--address``), starts Serve's HTTP proxy on ``--host:--port``
and deploys ``--replicas`` replicas (:mod:`dlopt.cli.serve_app`). It prints the address
once every replica is ready and serves until SIGTERM or Ctrl-C, which stop the
application, and the Ray instance when this command started it: nothing is left running.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import threading
from pathlib import Path
from typing import Any

from dlopt.cli.cmd_cache import cache_dir_of, check_cache_dir
from dlopt.cli.cmd_select import budget_of, parse_time_budget
from dlopt.cli.console import Output
from dlopt.cli.serve_app import APP_NAME, ServeOptions, model_and_workload
from dlopt.errors import ConfigurationError

DEFAULT_CACHE = "~/.cache/dlopt/serve-plans"


def add_serve_command(sub: Any) -> None:
    """Register ``dlopt serve``."""
    p = sub.add_parser(
        "serve",
        help="serve a model's decision over HTTP with Ray Serve",
        description=(
            "Serve the plan dlopt picks for a model over HTTP: POST /v1/predict (.npz in and "
            "out), GET /healthz, GET /metrics. Replicas take the plan from the plan cache, "
            "deciding once per machine where there is none."
        ),
    )
    p.add_argument("model", help="MODULE:FACTORY returning the model, or (model, WorkloadProfile)")
    p.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="NAME=SHAPE[:DTYPE]@WEIGHT",
        help="a workload case of random inputs (repeat), e.g. b8=8x3x224x224@30",
    )
    p.add_argument("--inputs", help="an .npz or .safetensors file: one case per entry")
    p.add_argument(
        "--cache-dir",
        default=None,
        help=f"the plan cache replicas share (default: $DLOPT_CACHE_DIR, else {DEFAULT_CACHE})",
    )
    p.add_argument(
        "--time-budget",
        type=parse_time_budget,
        default=None,
        metavar="SECONDS",
        help="seconds for a decision where no record exists (default auto; 'none': no budget)",
    )
    p.add_argument("--port", type=int, required=True, help="the HTTP port")
    p.add_argument("--host", default="127.0.0.1", help="the HTTP address (default 127.0.0.1)")
    p.add_argument("--replicas", type=int, default=1, help="replicas of the model (default 1)")
    p.add_argument(
        "--address",
        default="local",
        help="local (start Ray here, the default), auto (this machine's cluster) or ray://HOST:PORT",
    )
    p.add_argument("--device", default="cpu", help="where plans compute (default cpu)")
    p.add_argument(
        "--max-batch-size", type=int, default=None, help="the largest merged call (default: raced)"
    )
    p.add_argument(
        "--max-delay-ms", type=float, default=2.0, help="the longest wait to merge (default 2)"
    )
    p.set_defaults(handler=run)


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    """The replicas' options, each checked (a ConfigurationError says which and why)."""
    if not 0 < args.port < 65536:
        raise ConfigurationError(f"--port must be 1-65535, got {args.port}")
    if args.replicas < 1:
        raise ConfigurationError(f"--replicas must be at least 1, got {args.replicas}")
    if args.max_batch_size is not None and args.max_batch_size < 1:
        raise ConfigurationError(f"--max-batch-size must be at least 1, got {args.max_batch_size}")
    if not (math.isfinite(args.max_delay_ms) and args.max_delay_ms >= 0):
        raise ConfigurationError(f"--max-delay-ms must be >= 0, got {args.max_delay_ms}")
    check_cache_dir(args, writable=True)
    cache = cache_dir_of(args, required=False)
    if cache is None:
        default = Path(DEFAULT_CACHE).expanduser()
        try:
            default.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(
                f"the default plan cache {default} cannot be made ({exc.strerror or exc}): "
                "pass --cache-dir DIR"
            ) from None
        cache = str(default)
    return ServeOptions(
        factory=args.model,
        cases=tuple(args.case),
        inputs=str(Path(args.inputs).resolve()) if args.inputs else None,
        cache_dir=str(Path(cache).resolve()),
        time_budget=budget_of(args.time_budget),
        device=args.device,
        max_batch_size=args.max_batch_size,
        max_delay_ms=float(args.max_delay_ms),
        replicas=args.replicas,
    )


def run(args: argparse.Namespace, out: Output | None = None) -> int:
    """Serve until SIGTERM or Ctrl-C; 0 once everything is stopped."""
    out = out or Output(plain=True)
    options = options_from_args(args)
    # The factory and the inputs, here first: a mistake is one line, not a replica's crash.
    model_and_workload(options)
    from dlopt.cli.serve_app import ServeReplica, import_serve, start_health_store

    serve = import_serve()
    from dlopt.fleet.runner import connect_ray

    ray = connect_ray(args.address)
    # After Ray's start, which installs handlers of its own: SIGTERM and Ctrl-C stop the
    # application cleanly.
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        # Held while serving: the replicas push their health records to it.
        store = start_health_store()  # noqa: F841
        actor_options: dict[str, Any] = {"num_cpus": 0}
        if args.address == "local":
            # Replicas import the factory's module as this process does: from here too.
            path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), os.getcwd()) if p)
            actor_options["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
        deployment = serve.deployment(
            ServeReplica,
            name="model",
            num_replicas=options.replicas,
            # Deep enough for a replica to merge what its batcher can take at once.
            max_ongoing_requests=max(64, 4 * (options.max_batch_size or 16)),
            ray_actor_options=actor_options,
        )
        out.line(f"dlopt serve: {options.replicas} replica(s) deciding or loading their plan...")
        serve.run(deployment.bind(options.to_json()), name=APP_NAME, route_prefix="/")
        url = f"http://{args.host}:{args.port}"
        out.line(f"dlopt serve: ready on {url}/v1/predict ({url}/healthz, {url}/metrics)")
        while not stop.wait(0.5):
            pass
        out.line("dlopt serve: stopping")
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return 0
