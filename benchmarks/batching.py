"""Dynamic batching: 8 concurrent clients sending batch-1 requests (docs/deploy.md).

For the demo conv net and a transformer encoder layer stack, dlopt selects a plan on
batch-1 and batch-8 cases, then 8 client threads call, in interleaved rounds of a few
seconds each:

- ``direct``: the decision itself, each client one batch-1 request at a time;
- ``batched``: ``decision.batched(max_delay_ms=...)``, the same batch-1 requests;
- ``batched async``: the same through ``await batched.acall(...)`` from 8 coroutines on
  one event loop (an asyncio server's shape: one thread wakes for every answer);
- ``ceiling``: the decision with batch-8 requests (items counted), what the plan can do
  when every call is full.

Printed per workload: requests (items) per second and p50/p99 latency per request, the
ratio batched/direct, batched/ceiling, and the p99 bound ``max_delay_ms + 2 x`` the
ceiling's p50 call. Targets: batched >= 1.6x direct and >= 85% of the ceiling, p99 within
the bound.

``--http PORT`` also starts ``dlopt serve`` (2 replicas, the demo conv net) on that port
and drives it with 8 HTTP clients (one kept-alive connection each) sending batch-1 ``.npz``
requests, beside a trivial Ray Serve deployment that echoes its request (what Ray Serve's
HTTP path costs by itself on this machine). Target: at least half the in-process batched
throughput.

    python benchmarks/batching.py [--seconds 3] [--rounds 3] [--max-delay-ms 2] [--http 8311]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from dlopt import InferenceOptimizer, OptimizationPolicy, WorkloadCase, WorkloadProfile
from dlopt.cli.demo import build_demo_model
from dlopt.platform.machine import cpu_model_and_flags

CLIENTS = 8


class EncoderStack(nn.Module):
    """Two post-norm transformer encoder layers (d_model 256, 4 heads, MLP 1024)."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


def workloads() -> list[tuple[str, nn.Module, Callable[[int, int], torch.Tensor]]]:
    torch.manual_seed(0)

    def image(batch: int, seed: int) -> torch.Tensor:
        return torch.randn(batch, 3, 64, 64, generator=torch.Generator().manual_seed(seed))

    def tokens(batch: int, seed: int) -> torch.Tensor:
        return torch.randn(batch, 32, 256, generator=torch.Generator().manual_seed(seed))

    return [
        ("demo conv net", build_demo_model(), image),
        ("transformer encoder x2", EncoderStack().eval(), tokens),
    ]


def drive(call: Callable[[torch.Tensor], object], inputs: list[torch.Tensor], seconds: float):
    """``CLIENTS`` threads calling ``call`` for ``seconds``, each with its own input: every
    request's latency, and the wall time."""
    latencies: list[list[float]] = [[] for _ in range(CLIENTS)]
    stop = time.perf_counter() + seconds
    start = threading.Barrier(CLIENTS + 1)

    def client(index: int) -> None:
        x = inputs[index]
        start.wait()
        with torch.inference_mode():
            while time.perf_counter() < stop:
                begin = time.perf_counter()
                call(x)
                latencies[index].append(time.perf_counter() - begin)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    return [t for per in latencies for t in per], time.perf_counter() - began


def drive_async(batched: Any, inputs: list[torch.Tensor], seconds: float):
    """``CLIENTS`` coroutines on one event loop awaiting ``batched.acall`` for ``seconds``."""
    latencies: list[float] = []

    async def client(x: torch.Tensor, stop: float) -> None:
        while time.perf_counter() < stop:
            begin = time.perf_counter()
            await batched.acall(x)
            latencies.append(time.perf_counter() - begin)

    async def run() -> float:
        began = time.perf_counter()
        with torch.inference_mode():
            await asyncio.gather(*(client(x, began + seconds) for x in inputs))
        return time.perf_counter() - began

    wall = asyncio.run(run())
    return latencies, wall


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-delay-ms", type=float, default=2.0)
    parser.add_argument("--http", type=int, default=None, metavar="PORT")
    args = parser.parse_args()
    name, flags = cpu_model_and_flags()
    isa = ", ".join(
        f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile") if f in flags
    )
    print(
        f"CPU: {name} ({isa}); {os.cpu_count()} CPUs; load average before "
        f"{os.getloadavg()[0]:.2f}; torch {torch.__version__}"
    )
    for label, model, make in workloads():
        workload = WorkloadProfile(
            cases=(
                WorkloadCase("batch-1", args=(make(1, 1),), weight=70),
                WorkloadCase("batch-8", args=(make(8, 2),), weight=30),
            )
        )
        decision = InferenceOptimizer("cpu", OptimizationPolicy()).select(model, workload)
        batched = decision.batched(max_delay_ms=args.max_delay_ms)
        singles = [make(1, 10 + i) for i in range(CLIENTS)]
        eights = [make(8, 20 + i) for i in range(CLIENTS)]
        modes = {
            "direct": (decision, singles, 1),
            "batched": (batched, singles, 1),
            "batched async": (batched, singles, 1),
            "ceiling": (decision, eights, 8),
        }
        rates: dict[str, list[float]] = {m: [] for m in modes}
        samples: dict[str, list[float]] = {m: [] for m in modes}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(args.rounds):
                for mode, (call, inputs, items) in modes.items():
                    if mode == "batched async":
                        latencies, wall = drive_async(call, inputs, args.seconds)
                    else:
                        latencies, wall = drive(call, inputs, args.seconds)
                    rates[mode].append(items * len(latencies) / wall)
                    samples[mode].extend(latencies)
        print(
            f"\n{label}: selected {decision.selected_plan}; {CLIENTS} clients, "
            f"{args.rounds} rounds of {args.seconds:g} s each"
        )
        for mode in modes:
            rate = statistics.median(rates[mode])
            unit = "items/s" if mode == "ceiling" else "requests/s"
            print(
                f"  {mode:13s} {rate:8.0f} {unit:10s} p50 {quantile(samples[mode], 0.5) * 1e3:7.2f} ms"
                f"  p99 {quantile(samples[mode], 0.99) * 1e3:7.2f} ms"
            )
        direct, ceiling = (statistics.median(rates[m]) for m in ("direct", "ceiling"))
        bound = args.max_delay_ms + 2 * quantile(samples["ceiling"], 0.5) * 1e3
        for mode in ("batched", "batched async"):
            batch = statistics.median(rates[mode])
            p99 = quantile(samples[mode], 0.99) * 1e3
            print(
                f"  {mode}: {batch / direct:.2f}x direct (target >= 1.6), {batch / ceiling:.0%} "
                f"of the ceiling (target >= 85%), p99 {p99:.2f} ms (bound {bound:.2f} ms: "
                f"{'met' if p99 <= bound else 'missed'})"
            )
        stats = batched.stats()
        print(
            f"  batches: {stats.batches}, mean {stats.mean_batch or 0:.1f} requests, "
            f"{stats.padded_rows} pad rows, {stats.alone} served alone"
        )
        decision.close()
    if args.http:
        http_rates(args.http, args.seconds)
    print(f"\nload average after {os.getloadavg()[0]:.2f}")


def http_clients(port: int, path: str, body: bytes, seconds: float) -> tuple[float, float]:
    """``CLIENTS`` threads POSTing ``body`` for ``seconds``: requests/s and p50 (ms)."""
    import http.client

    latencies: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            begin = time.perf_counter()
            connection.request("POST", path, body=body)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status} from {path}")
            with lock:
                latencies.append(time.perf_counter() - begin)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.perf_counter() - began), quantile(latencies, 0.5) * 1e3


def http_rates(port: int, seconds: float) -> None:
    """``dlopt serve`` (2 replicas) and a trivial echo deployment, each under 8 clients."""
    import io
    import signal
    import subprocess
    import sys
    import tempfile

    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, arg0=np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype("f4"))
    body = buffer.getvalue()
    with tempfile.TemporaryDirectory() as cache:
        server = subprocess.Popen(
            [sys.executable, "-m", "dlopt", "serve", "dlopt.cli.demo:demo_convnet",
             "--port", str(port), "--replicas", "2", "--cache-dir", cache],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert server.stdout is not None
        for line in server.stdout:
            if "ready on" in line:
                break
        try:
            http_clients(port, "/v1/predict", body, 1.0)  # warm
            rate, p50 = http_clients(port, "/v1/predict", body, seconds)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(120)
    print(
        f"\ndlopt serve, 2 replicas, {CLIENTS} HTTP clients: {rate:.0f} requests/s, p50 "
        f"{p50:.1f} ms"
    )
    echo = subprocess.run(
        [sys.executable, "-c", ECHO, str(port), str(seconds)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    print(f"a Ray Serve deployment that echoes, 2 replicas: {echo.stdout.strip()}")


#: A trivial Ray Serve application: what its HTTP path costs by itself.
ECHO = """
import sys, ray
from ray import serve
sys.path.insert(0, "benchmarks")
from batching import http_clients

port, seconds = int(sys.argv[1]), float(sys.argv[2])
ray.init(include_dashboard=False, log_to_driver=False)
serve.start(http_options={"host": "127.0.0.1", "port": port})

@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64, num_replicas=2)
class Echo:
    async def __call__(self, request):
        from starlette.responses import Response
        return Response((await request.body())[:16])

serve.run(Echo.bind(), name="echo", route_prefix="/")
http_clients(port, "/", b"x" * 49000, 1.0)
rate, p50 = http_clients(port, "/", b"x" * 49000, seconds)
print(f"{rate:.0f} requests/s, p50 {p50:.1f} ms")
serve.shutdown()
ray.shutdown()
"""


if __name__ == "__main__":
    main()
