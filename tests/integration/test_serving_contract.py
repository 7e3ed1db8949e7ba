"""The serving contract, end to end, for every first-party plan family that can win on a CPU.

Each plan is selected (``include=`` one challenger, ``min_speedup=0.01``: the model's eager
calls sleep 10 ms on contiguous inputs, but not while traced, exported or compiled, nor on
channels-last inputs, so the plan wins: ``dlopt.testing.models.SlowEagerNet``), then served as production code calls it: fresh
inputs made inside ``torch.inference_mode()``, under ``torch.no_grad()`` and in plain grad
mode, from 4 threads at once, at a batch size it never raced and on inputs holding NaN and
infinity (eager fp32's answer, counted); every output is held to
the plan's own validation limits against eager fp32 on the same inputs. The same again in
a fresh process after a plan cache hit, and from the record's bundle through
``load_bundle``.

Each selection compiles or exports a model, so these tests run in their own session
(``pytest -m serving``; ``python3 -m nox -s tests-serving``), not in the default run.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from dlopt.testing.fresh_process import printed_result, run_script

pytestmark = pytest.mark.serving

WORKER = textwrap.dedent(
    """
    import json, sys, threading, warnings
    import torch
    from dlopt import (
        DeploymentConstraints, InferenceOptimizer, OptimizationPolicy, ServingContextError,
        WorkloadCase, WorkloadProfile,
    )
    from dlopt.api.bundles import load_bundle
    from dlopt.cache.record_store import PlanCache
    from dlopt.measurement import MeasurementPolicy
    from dlopt.testing.models import SlowEagerNet
    from dlopt.validation import validate_outputs

    phase, plan, cache_dir, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    model = SlowEagerNet(channels=16, convs=2, sleep_s=0.01)

    def image(batch, seed):
        return torch.randn(batch, 3, 8, 8, generator=torch.Generator().manual_seed(seed))

    def eager(x):
        with torch.inference_mode():
            return model(x.clone())

    def within_limits(decision, out, x, what):
        got = validate_outputs(
            out.detach() if out.requires_grad else out,
            eager(x),
            precision=decision.plan.precision,
            output_dtype=decision.plan.output_dtype,
            case_name=what,
        )
        return True if got.passed else f"{what}: {got.reason}"

    def serve(decision):
        found = {}
        with torch.inference_mode():
            x = image(4, 10)  # an inference tensor, made as serving code makes it
            out = decision(x)
        found["inference_mode"] = within_limits(decision, out, x, "inference_mode")
        with torch.no_grad():
            x = image(4, 11)
            out = decision(x)
        found["no_grad"] = within_limits(decision, out, x, "no_grad")
        x = image(4, 12)
        out = decision(x)
        found["enabled"] = within_limits(decision, out, x, "plain grad mode")
        # A caller that needs gradients: served by a differentiable plan, refused otherwise.
        x = image(4, 13).requires_grad_()
        try:
            decision(x).sum().backward()
            found["gradients"] = "served" if x.grad is not None else "no gradient"
        except ServingContextError as exc:
            found["gradients"] = "refused" if plan in str(exc) else str(exc)
        results = {}

        def caller(index):
            with torch.inference_mode():
                xs = image(4, 100 + index)
                results[index] = [within_limits(decision, decision(xs), xs, f"thread {index}")
                                  for _ in range(3)]

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        found["threads"] = sorted({r for rs in results.values() for r in rs}, key=str)
        before = decision.fallback_calls
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.inference_mode():
                x = image(3, 14)  # batch 3: never raced
                out = decision(x)
        found["unseen"] = within_limits(decision, out, x, "unseen batch 3")
        found["unseen_fell_back"] = decision.fallback_calls - before
        # Inputs no race held: NaN in one element, infinity in a whole image. Eager fp32
        # serves them (the default on_nonfinite_input), whatever the plan would answer.
        before = decision.health().fallbacks["nonfinite_input"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.inference_mode():
                x = image(4, 15)
                x[1, 0, 2, 3] = float("nan")
                x[2] = float("inf")
                out = decision(x)
        try:
            torch.testing.assert_close(out, eager(x), equal_nan=True, rtol=0, atol=0)
            found["nonfinite"] = True
        except AssertionError as exc:
            found["nonfinite"] = str(exc)[:300]
        found["nonfinite_fell_back"] = decision.health().fallbacks["nonfinite_input"] - before
        found["families"] = list(decision.report.serving.served_families)
        found["concurrency"] = str(decision.report.serving.concurrency)
        return found

    policy = OptimizationPolicy(
        include=(plan,),
        constraints=DeploymentConstraints(min_speedup=0.01),
        measurement=MeasurementPolicy(max_time_s=10.0, seed=3, bootstrap_resamples=0),
        plan_options={plan: options} if options else {},
        plan_cache_dir=cache_dir,
        exhaustive=True,  # the family under test is built and raced, whatever its prior
    )
    workload = WorkloadProfile(
        cases=(WorkloadCase("b2", args=(image(2, 1),)), WorkloadCase("b4", args=(image(4, 2),)))
    )
    result = {}
    decision = InferenceOptimizer("cpu", policy).select(model, workload)
    result["selected"] = decision.selected_plan
    result["cache_hit"] = decision.report.cache.cache_hit
    result["cache_reason"] = decision.report.cache.reason
    result["key"] = decision.report.cache.key
    result["grad_mode"] = str(decision.report.serving.grad_mode)
    result["status"] = {c.name: str(c.status) for c in decision.report.candidates}
    result["problems"] = {
        c.name: c.error.message if c.error else c.availability_reason
        for c in decision.report.candidates
        if c.error or c.availability_reason
    }
    if decision.selected_plan == plan:
        result["served"] = serve(decision)
    if phase == "again":
        bundle = PlanCache(cache_dir).record_path(result["key"]) / "bundle"
        with load_bundle(bundle, model=model) as loaded:
            result["bundle_selected"] = loaded.selected_plan
            result["bundle_served"] = serve(loaded)
    print("RESULT " + json.dumps(result))
    """
)

#: Every first-party plan family that can win on a CPU: eager variants, fx, every
#: Inductor variant, TorchAO compiled plans, PT2E static int8, every ONNX Runtime and
#: every OpenVINO CPU plan.
PLANS = (
    "native_channels_last",
    "native_bf16",
    "native_bf16_channels_last",
    "fx",
    "fx_inductor",
    "inductor",
    "inductor_freezing",
    "inductor_channels_last_freezing",
    "inductor_max_autotune",
    "inductor_bf16",
    "inductor_bf16_freezing",
    "inductor_bf16_channels_last",
    "inductor_bf16_channels_last_freezing",
    "torchao_int8_dynamic_inductor",
    "torchao_int8_weight_only_inductor",
    "torchao_pt2e_int8_static",
    "onnxruntime_cpu",
    "onnxruntime_cpu_int8",
    "onnxruntime_cpu_int8_static",
    "openvino_cpu",
    "openvino_cpu_bf16",
    "openvino_cpu_int8",
)

#: Plans whose outputs carry gradients (eager torch): a caller that needs them is served.
DIFFERENTIABLE = {"native_channels_last", "native_bf16", "native_bf16_channels_last", "fx"}


def _run(tmp_path: Path, phase: str, plan: str, cache: Path) -> dict[str, Any]:
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{phase}"),
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }
    proc = run_script(
        WORKER, phase, plan, str(cache), "{}", directory=tmp_path, env=env, timeout=900
    )
    return printed_result(proc)


def _check_served(plan: str, served: dict[str, Any]) -> None:
    for context in ("inference_mode", "no_grad", "enabled"):
        assert served[context] is True, (context, served)
    assert served["threads"] == [True], served
    assert served["unseen"] is True, served
    # An unseen batch size is served by the plan only when its dynamic shapes passed the
    # held-out check; otherwise eager fp32 serves it.
    assert served["unseen_fell_back"] == (0 if served["families"] else 1), served
    # NaN and infinite inputs: eager fp32's answer, counted.
    assert served["nonfinite"] is True and served["nonfinite_fell_back"] == 1, served
    expected = "served" if plan in DIFFERENTIABLE else "refused"
    assert served["gradients"] == expected, served


@pytest.mark.parametrize("plan", PLANS)
def test_the_plan_serves_every_caller_after_the_race_a_cache_hit_and_a_bundle_load(tmp_path, plan):
    pytest.importorskip("dlopt_fx" if "inductor" in plan or plan == "fx" else "dlopt")
    if plan.startswith("onnxruntime"):
        pytest.importorskip("dlopt_onnxruntime")
    if plan.startswith("torchao"):
        pytest.importorskip("torchao")
    if plan.startswith("openvino"):
        pytest.importorskip("dlopt_openvino")
    cache = tmp_path / "cache"
    first = _run(tmp_path, "race", plan, cache)
    if first["status"].get(plan) == "lost":
        # Only timing can make a plan 10 ms a call faster lose (a machine too loaded for
        # the race to resolve within its budget): race once more, on a cache of its own
        # (the first stored the baseline's decision), before judging.
        cache = tmp_path / "cache-retry"
        first = _run(tmp_path, "race", plan, cache)
    if first["selected"] != plan:
        reason = first["problems"].get(plan)
        if first["status"].get(plan) not in ("unavailable", "not_applicable"):
            pytest.fail(f"{plan} was not selected ({first['status'].get(plan)}): {reason}")
        pytest.skip(f"{plan} does not run on this machine: {reason}")
    assert first["grad_mode"] == "inference_mode" and first["cache_hit"] is False
    _check_served(plan, first["served"])
    again = _run(tmp_path, "again", plan, cache)
    assert again["cache_hit"] is True and again["selected"] == plan, again
    _check_served(plan, again["served"])
    assert again["bundle_selected"] == plan
    _check_served(plan, again["bundle_served"])
