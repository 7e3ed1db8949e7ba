"""The plan cache across processes: a selection stores its decision, a fresh process with
the same model, workload and machine gets a revalidated hit, and the record's bundle
serves again through ``load_bundle`` (loaded, or rebuilt from the model), for each kind
of first-party plan. An Inductor winner comes back from its AOTInductor package (the
default) or, with ``aot_package=False``, rebuilt with torch's compile caches restored.

The model (``dlopt.testing.models.SlowEagerNet``) sleeps 3 ms per eager call on
contiguous inputs, but not while it is traced, exported or compiled, nor on channels-last
inputs, so a traced, exported, compiled or
channels-last plan wins by a wide margin whatever the machine; eager TorchAO races with
``min_speedup=0.01`` so the gate is its to clear. ``include=`` forces each race to one
challenger.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dlopt.testing.fresh_process import printed_result, run_script

pytestmark = pytest.mark.slow

#: TorchAO's static int8 plan (PT2E), offered where the CPU has VNNI or AMX-INT8.
PT2E = "torchao_pt2e_int8_static"

WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch
    from dlopt import InferenceOptimizer, OptimizationPolicy, DeploymentConstraints, WorkloadProfile
    from dlopt.api.bundles import load_bundle
    from dlopt.cache.record_store import PlanCache
    from dlopt.measurement import MeasurementPolicy
    from dlopt.plugin import Precision
    from dlopt.testing.models import SlowEagerNet
    from dlopt.validation import validate_outputs

    from torch._inductor.cpp_builder import CppBuilder

    # Every C++ build this process runs (Inductor compiles in process: one compile thread).
    kernels_built = []
    _build = CppBuilder.build

    def build_and_note(self, *args, **kwargs):
        kernels_built.append(os.path.basename(self.get_target_file_path()))
        return _build(self, *args, **kwargs)

    CppBuilder.build = build_and_note
    mode, plan, cache_dir, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    model = SlowEagerNet(sleep_s=0.003)
    torch.manual_seed(1)
    x = torch.randn(2, 3, 8, 8)
    expected = model(x)


    def close(decision, out):
        # Within the plan's limits of eager: an int8 plan's as the race gates it, else 1e-2.
        if decision.plan.precision is Precision.INT8:
            return validate_outputs(
                out, expected, precision=Precision.INT8, case_name="x"
            ).passed
        return bool(torch.allclose(out, expected, rtol=1e-2, atol=1e-2))


    policy = OptimizationPolicy(
        include=(plan,),
        constraints=DeploymentConstraints(min_speedup=0.01),
        measurement=MeasurementPolicy(max_time_s=3.0, seed=3, bootstrap_resamples=0),
        plan_options={plan: options} if options else {},
        plan_cache_dir=cache_dir,
        exhaustive=True,  # the plan under test races, whatever its prior
    )
    result = {}
    if mode == "select":
        decision = InferenceOptimizer("cpu", policy).select(model, WorkloadProfile.single(x))
        cache = decision.report.cache
        result.update(
            selected=decision.selected_plan,
            cache_hit=cache.cache_hit,
            reason=cache.reason,
            record_written=cache.record_written,
            key=cache.key,
            restored=decision.plan.metadata.get("compile_cache_restored"),
            served_as=decision.plan.metadata.get("served_as"),
            saved_program=cache.saved_program,
            revalidation_s=cache.revalidation_time_s,
            close=close(decision, decision(x)),
            problems={
                c.name: c.error.message if c.error else c.availability_reason
                for c in decision.report.candidates
                if c.error or c.availability_reason
            },
        )
    else:  # load the record's bundle as a deployment would
        key = sys.argv[5]
        bundle = PlanCache(cache_dir).record_path(key) / "bundle"
        try:
            load_bundle(bundle)
            result["without_model"] = "loaded"
        except Exception as exc:
            result["without_model"] = f"{type(exc).__name__}: {exc}"
        try:
            served = load_bundle(bundle, load_compiled_program=True)
            result["program_without_model"] = close(served, served(x))
            result["program_served_as"] = served.plan.metadata.get("served_as")
        except Exception as exc:
            result["program_without_model"] = f"{type(exc).__name__}: {exc}"
        decision = load_bundle(bundle, model=model, restore_compile_cache=True)
        result.update(
            selected=decision.selected_plan,
            close=close(decision, decision(x)),
        )
    result["kernels_built"] = kernels_built
    print("RESULT " + json.dumps(result))
    """
)


def run_worker(tmp_path: Path, *args: str, inductor_cache: str) -> dict[str, Any]:
    # A fresh Inductor cache per process: a hit must not lean on the previous process's
    # on-disk caches, only on what the record restores.
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / inductor_cache),
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }
    return printed_result(run_script(WORKER, *args, directory=tmp_path, name="worker.py", env=env))


def miss_then_hit(tmp_path: Path, plan: str, options: dict[str, Any] | None = None) -> tuple:
    pytest.importorskip("dlopt_fx" if "inductor" in plan or plan in ("fx", PT2E) else "dlopt")
    cache = str(tmp_path / "cache")
    opts = json.dumps(options or {})
    first = run_worker(tmp_path, "select", plan, cache, opts, inductor_cache="inductor-1")
    assert first["selected"] == plan, first
    assert first["cache_hit"] is False and first["record_written"] is True, first
    second = run_worker(tmp_path, "select", plan, cache, opts, inductor_cache="inductor-2")
    assert second["cache_hit"] is True, second
    assert second["selected"] == plan and second["key"] == first["key"] and second["close"]
    loaded = run_worker(
        tmp_path, "load", plan, cache, opts, first["key"], inductor_cache="inductor-3"
    )
    assert loaded["selected"] == plan and loaded["close"], loaded
    return first, second, loaded


def test_onnxruntime_winner_hits_in_a_fresh_process_and_loads_without_the_model(tmp_path):
    pytest.importorskip("dlopt_onnxruntime")
    _, _, loaded = miss_then_hit(tmp_path, "onnxruntime_cpu")
    assert loaded["without_model"] == "loaded"


def test_native_winner_hits_in_a_fresh_process_and_is_rebuilt_from_the_model(tmp_path):
    _, _, loaded = miss_then_hit(tmp_path, "native_channels_last")
    assert "load_bundle(path, model=model)" in loaded["without_model"]


def test_fx_winner_comes_back_from_the_model(tmp_path):
    pytest.importorskip("dlopt_fx")
    _, _, loaded = miss_then_hit(tmp_path, "fx")
    assert "load_bundle(path, model=model)" in loaded["without_model"]


def test_torchao_winner_comes_back_from_the_model(tmp_path):
    pytest.importorskip("dlopt_torchao")
    pytest.importorskip("torchao")
    _, _, loaded = miss_then_hit(tmp_path, "torchao_int8_weight_only", {"offer_everywhere": True})
    assert "load_bundle(path, model=model)" in loaded["without_model"]


def test_inductor_winner_hits_from_its_aotinductor_package(tmp_path):
    pytest.importorskip("dlopt_fx")
    first, second, loaded = miss_then_hit(tmp_path, "inductor")
    assert first["saved_program"].startswith("saved in"), first
    # The hit loads the package: nothing is compiled, not even from restored caches.
    assert second["served_as"] == "aotinductor_package", second
    assert second["kernels_built"] == [], second["kernels_built"]
    # The record's bundle serves without the model when asked to run its program.
    assert loaded["program_without_model"] is True, loaded
    assert "load_compiled_program=True" in loaded["without_model"], loaded


def test_inductor_winner_hits_with_torchs_compile_caches_restored(tmp_path):
    pytest.importorskip("dlopt_fx")
    first, second, loaded = miss_then_hit(tmp_path, "inductor", {"aot_package": False})
    assert first["saved_program"] == "not saved: the plan's options turn it off", first
    assert second["served_as"] is None
    assert first["restored"] is None  # built from scratch in the race
    assert second["restored"] is True  # the hit handed torch the record's compile caches
    # ...and the C++ kernels the race compiled: the hit compiles none of them again.
    race_kernels = {name for name in first["kernels_built"] if ".main." in name}
    assert race_kernels, first["kernels_built"]
    assert not race_kernels & set(second["kernels_built"]), second["kernels_built"]
    # Nor the library Inductor compiles to check the CPU's vector ISA (about 2 s): of what
    # the race built, only the precompiled header's preprocessing (a fraction of a
    # second, kept outside the kernel layout) is redone.
    rebuilt = set(first["kernels_built"]) & set(second["kernels_built"])
    assert rebuilt <= {"header.i"}, (first["kernels_built"], second["kernels_built"])
    assert "load_bundle(path, model=model)" in loaded["without_model"]
    assert "load_compiled_program" not in loaded["without_model"]  # it holds no program


def test_pt2e_static_int8_winner_hits_from_its_aotinductor_package(tmp_path):
    """The converted int8 graph is saved as an AOTInductor package with the record; the
    hit loads it (no calibration, no Dynamo, no C++ compile) and revalidates it."""
    pytest.importorskip("dlopt_torchao")
    pytest.importorskip("torchao")
    pytest.importorskip("dlopt_fx")
    from dlopt.plugin import ProviderContext
    from dlopt_torchao.pt2e import PT2EStaticInt8Provider

    availability = PT2EStaticInt8Provider().probe(ProviderContext())
    if not availability.available:
        pytest.skip(f"{PT2E} is not offered here: {availability.reason}")
    first, second, loaded = miss_then_hit(tmp_path, PT2E)
    assert first["saved_program"].startswith("saved in"), first
    assert first["kernels_built"], "the race compiled nothing: the test proves nothing"
    assert second["served_as"] == "aotinductor_package", second
    assert second["kernels_built"] == [], second["kernels_built"]
    assert loaded["program_without_model"] is True, loaded
    assert loaded["program_served_as"] == "aotinductor_package", loaded
    assert "load_compiled_program=True" in loaded["without_model"], loaded
