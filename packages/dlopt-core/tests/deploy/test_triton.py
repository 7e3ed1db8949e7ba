"""A decision bound to a real PyTriton server and called with ``tritonclient``
(``nox -s tests-deploy``)."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

from dlopt import InferenceOptimizer, OptimizationPolicy, WorkloadCase, WorkloadProfile
from dlopt.cli.demo import DemoMLP
from dlopt.serving.triton import bind, python_library_env

pytestmark = pytest.mark.deploy
pytest.importorskip("pytriton")
httpclient = pytest.importorskip("tritonclient.http")


def _ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def test_a_decision_served_by_triton_answers_as_eager(monkeypatch, assert_answers_as_validated):
    from pytriton.triton import Triton, TritonConfig

    for name, value in python_library_env().items():
        monkeypatch.setenv(name, value)
    torch.manual_seed(0)
    model = DemoMLP().eval()
    gen = torch.Generator().manual_seed(1)
    workload = WorkloadProfile(
        cases=(
            WorkloadCase("b1", args=(torch.randn(1, 64, generator=gen),), weight=80),
            WorkloadCase("b8", args=(torch.randn(8, 64, generator=gen),), weight=20),
        )
    )
    decision = InferenceOptimizer("cpu", OptimizationPolicy(time_budget_s=10)).select(
        model, workload
    )
    http, grpc, metrics = _ports(3)
    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_secs=5)
    with Triton(config=config) as triton:
        used = bind(triton, decision, model_name="mlp", max_delay_ms=1.0)
        assert used.max_batch_size == 8 and used.preferred_batch_sizes == (1, 8)
        assert [(s.name, s.dtype, s.shape) for s in used.inputs] == [("arg0", "float32", (64,))]
        assert [(s.name, s.shape) for s in used.outputs] == [("out0", (10,))]
        triton.run()
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        for batch in (1, 3, 8):
            x = np.random.default_rng(batch).standard_normal((batch, 64)).astype(np.float32)
            request = httpclient.InferInput("arg0", list(x.shape), "FP32")
            request.set_data_from_numpy(x)
            result = client.infer("mlp", [request]).as_numpy("out0")
            with torch.inference_mode():
                expected = model(torch.from_numpy(x)).numpy()
            assert_answers_as_validated(result, expected, decision.plan.precision)
        client.close()
    assert decision.health().calls >= 3
    decision.close()
