"""Saved OpenVINO plans in a fresh process: a plan cache hit and ``load_bundle`` serve
the winner from its IR and compiled-model cache, without converting or compiling again.

The model (``dlopt.testing.models.SlowEagerNet``) sleeps 3 ms per eager call on
contiguous inputs, but not while it is traced (OpenVINO's conversion traces it), so the
OpenVINO plan wins its race whatever the machine.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from dlopt.testing.fresh_process import printed_result, run_script

pytestmark = pytest.mark.slow

WORKER = textwrap.dedent(
    """
    import json, sys
    import openvino
    import torch
    from dlopt import DeploymentConstraints, InferenceOptimizer, OptimizationPolicy
    from dlopt import WorkloadCase, WorkloadProfile
    from dlopt import load_bundle
    from dlopt.cache.record_store import PlanCache
    from dlopt.measurement import MeasurementPolicy
    from dlopt.testing.models import SlowEagerNet

    mode, cache_dir = sys.argv[1], sys.argv[2]
    conversions = []
    convert_model = openvino.convert_model

    def counted(*args, **kwargs):
        conversions.append(mode)
        return convert_model(*args, **kwargs)

    openvino.convert_model = counted
    model = SlowEagerNet(output="dict")
    gen = torch.Generator().manual_seed(1)
    workload = WorkloadProfile(cases=tuple(
        WorkloadCase(f"b{n}", args=(torch.randn(n, 3, 8, 8, generator=gen),)) for n in (1, 4)
    ))
    x = torch.randn(3, 3, 8, 8, generator=gen)
    expected = model(x)["logits"]
    policy = OptimizationPolicy(
        include=("openvino_cpu",),
        constraints=DeploymentConstraints(min_speedup=0.01),
        measurement=MeasurementPolicy(max_time_s=3.0, seed=3, bootstrap_resamples=0),
        plan_cache_dir=cache_dir,
        exhaustive=True,
    )
    decision = InferenceOptimizer("cpu", policy).select(model, workload)
    cache = decision.report.cache
    result = {
        "selected": decision.selected_plan,
        "hit": cache.cache_hit,
        "written": cache.record_written,
        "from_model_cache": decision.plan.metadata.get("loaded_from_model_cache"),
        "close": bool(torch.allclose(decision(x)["logits"], expected, atol=1e-4)),
        "reason": decision.report.selection_reason,
        "problems": {
            c.name: c.error.message if c.error else c.availability_reason
            for c in decision.report.candidates
            if c.error or c.availability_reason
        },
    }
    if mode == "hit":
        bundle = PlanCache(cache_dir).record_path(cache.key) / "bundle"
        loaded = load_bundle(bundle)  # no model: the saved IR serves
        with torch.inference_mode():
            out = loaded(x)
        result["bundle"] = {
            "from_model_cache": loaded.plan.metadata.get("loaded_from_model_cache"),
            "close": bool(torch.allclose(out["logits"], expected, atol=1e-4)),
            "keys": sorted(out),
        }
    result["conversions"] = len(conversions)
    print("RESULT " + json.dumps(result))
    """
)


def _run(tmp_path: Path, mode: str) -> dict[str, Any]:
    proc = run_script(WORKER, mode, str(tmp_path / "cache"), directory=tmp_path, timeout=300)
    return printed_result(proc)


def test_a_cache_hit_and_load_bundle_serve_without_converting_or_compiling(
    tmp_path: Path,
) -> None:
    first = _run(tmp_path, "select")
    assert first["selected"] == "openvino_cpu", first
    assert first["hit"] is False and first["written"] is True, first
    assert first["conversions"] == 1 and first["close"], first
    second = _run(tmp_path, "hit")
    assert second["selected"] == "openvino_cpu" and second["hit"] is True, second
    assert second["conversions"] == 0, second  # neither the hit nor the bundle converted
    # OpenVINO imported its compiled model from the saved cache: no compile.
    assert second["from_model_cache"] is True and second["close"], second
    assert second["bundle"] == {"from_model_cache": True, "close": True, "keys": ["logits"]}
