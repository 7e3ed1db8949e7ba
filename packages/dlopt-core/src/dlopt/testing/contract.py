"""The provider contract suite: subclass :class:`ProviderContractSuite` in your tests.

pytest collects every ``test_*`` method of the subclass. Checks that need a build skip
with the probe's reason when the provider is unavailable on this machine, so one suite
runs everywhere: on a laptop without the SDK and on the GPU box with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any, ClassVar

import pytest
import torch

from dlopt.precision import Precision
from dlopt.probing import distribution_version, importlib_metadata
from dlopt.providers.contract import (
    BuiltPlan,
    ExecutionProvider,
    ProviderAvailability,
    ProviderContext,
    api_version_problem,
)
from dlopt.providers.loader import ENTRY_POINT_GROUP
from dlopt.target import ExecutionTarget
from dlopt.workload import WorkloadCase, WorkloadProfile

#: Modules no plugin may import at load time (each provider's SDK).
ALL_HEAVY_SDKS = ("torch_tensorrt", "tensorrt", "onnxruntime", "torchao", "onnx", "onnxscript")


class _ContractModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return self.head(y.mean(dim=(2, 3)))


class ProviderContractSuite:
    """Checks every dlopt provider must pass. Set the class attributes, implement
    :meth:`make_provider`, and optionally override :meth:`make_model` / :meth:`make_workload`.
    """

    #: Distribution that ships the provider, e.g. ``"dlopt-onnxruntime"``.
    distribution: ClassVar[str]
    #: Entry-point name in the ``dlopt.providers`` group (``None`` for in-process providers).
    entry_point: ClassVar[str | None] = None
    #: SDK modules that must not be imported by loading the plugin, and whose absence is
    #: simulated to check the probe's reason.
    heavy_modules: ClassVar[tuple[str, ...]] = ()
    #: Seconds a probe may take (a probe runs for every ``dlopt providers`` call).
    max_probe_seconds: ClassVar[float] = 5.0
    #: Device the build checks run on.
    target: ClassVar[ExecutionTarget] = ExecutionTarget("cpu")

    # -- hooks for subclasses ------------------------------------------------------
    def make_provider(self) -> ExecutionProvider:
        raise NotImplementedError("return one provider instance to check")

    def make_model(self) -> torch.nn.Module:
        """A small conv net (Conv-BN-ReLU, pooling, Linear) on the suite's target device."""
        torch.manual_seed(0)
        return _ContractModel().eval().to(self.target.device)

    def make_workload(self) -> WorkloadProfile:
        """Batch 1 and batch 4 images on the suite's target device."""
        gen = torch.Generator().manual_seed(1)
        device = self.target.device
        return WorkloadProfile(
            cases=(
                WorkloadCase(
                    "batch-1", args=(torch.randn(1, 3, 16, 16, generator=gen).to(device),), weight=3
                ),
                WorkloadCase(
                    "batch-4", args=(torch.randn(4, 3, 16, 16, generator=gen).to(device),), weight=1
                ),
            ),
            name="contract",
        )

    def make_context(
        self, tmp_path: Any, workload: WorkloadProfile | None = None
    ) -> ProviderContext:
        return ProviderContext(target=self.target, workload=workload, artifact_dir=tmp_path)

    # -- helpers -------------------------------------------------------------------
    def _available_or_skip(self, provider: ExecutionProvider, context: ProviderContext) -> None:
        availability = provider.probe(context)
        if not availability.available:
            pytest.skip(f"{provider.name} unavailable here: {availability.reason}")

    def _prepare_build(
        self, tmp_path: Any
    ) -> tuple[ExecutionProvider, WorkloadProfile, ProviderContext, torch.nn.Module]:
        """Probe first (skip with its reason), then make inputs and model on the target.

        The order matters: the workload and model live on ``target.device``, which may
        not exist on this machine when the provider is unavailable.
        """
        provider = self.make_provider()
        self._available_or_skip(provider, self.make_context(tmp_path))
        workload = self.make_workload()
        context = self.make_context(tmp_path, workload)
        self._available_or_skip(provider, context)
        return provider, workload, context, self.make_model()

    # -- discovery and loading -----------------------------------------------------
    def test_distribution_installed_and_registers_entry_point(self) -> None:
        if self.entry_point is None:
            pytest.skip("in-process provider: no entry point to resolve")
        assert distribution_version(self.distribution), f"{self.distribution} is not installed"
        eps = importlib_metadata.entry_points(group=ENTRY_POINT_GROUP, name=self.entry_point)
        assert eps, f"no {ENTRY_POINT_GROUP!r} entry point named {self.entry_point!r}"
        dists = {ep.dist.metadata["Name"] for ep in eps if ep.dist is not None}
        assert self.distribution in dists

    def test_plugin_declares_compatible_api_version(self) -> None:
        if self.entry_point is None:
            pytest.skip("in-process provider: no plugin module")
        (ep,) = importlib_metadata.entry_points(group=ENTRY_POINT_GROUP, name=self.entry_point)
        plugin = ep.load()
        problem = api_version_problem(getattr(plugin, "DLOPT_PLUGIN_API_VERSION", None))
        assert problem is None, problem

    def test_loading_the_plugin_imports_no_heavy_sdk(self) -> None:
        if self.entry_point is None:
            pytest.skip("in-process provider: nothing is loaded through entry points")
        # A fresh interpreter: this test process may have imported SDKs already.
        code = (
            "import json, sys\n"
            "from dlopt.providers.loader import load_providers, PluginSettings\n"
            f"registry = load_providers(PluginSettings(allow=frozenset({{{self.entry_point!r}}})))\n"
            f"heavy = {list(ALL_HEAVY_SDKS + self.heavy_modules)!r}\n"
            "print(json.dumps({'loaded': [m for m in heavy if m in sys.modules],\n"
            "  'providers': [p.name for p in registry.providers],\n"
            "  'failures': [f.error for f in registry.failures]}))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["failures"] == [], result["failures"]
        assert result["loaded"] == [], f"loading the plugin imported {result['loaded']}"

    # -- probe ---------------------------------------------------------------------
    def test_probe_is_typed_and_fast(self, tmp_path: Any) -> None:
        provider = self.make_provider()
        assert isinstance(provider.name, str) and provider.name
        assert isinstance(Precision.parse(provider.precision), Precision)
        start = time.perf_counter()
        availability = provider.probe(self.make_context(tmp_path))
        elapsed = time.perf_counter() - start
        assert isinstance(availability, ProviderAvailability)
        assert elapsed < self.max_probe_seconds, f"probe took {elapsed:.2f}s"
        if not availability.available:
            assert availability.reason, "an unavailable provider must say why"

    def test_missing_sdk_gives_reason_and_install_hint(
        self, tmp_path: Any, monkeypatch: Any
    ) -> None:
        if not self.heavy_modules:
            pytest.skip("provider declares no SDK module")
        for module in self.heavy_modules:
            # ``sys.modules[name] = None`` makes ``import name`` raise ImportError.
            for loaded in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
                monkeypatch.delitem(sys.modules, loaded)
            monkeypatch.setitem(sys.modules, module, None)
        self._forget_probe_caches()
        try:
            availability = self.make_provider().probe(self.make_context(tmp_path))
        finally:
            self._forget_probe_caches()
        assert not availability.available
        assert availability.reason
        assert availability.install_hint, "tell the user how to install what is missing"

    def _forget_probe_caches(self) -> None:
        """Override when the provider caches probe results between calls."""

    # -- build ---------------------------------------------------------------------
    def test_build_runs_every_case_and_keeps_structure(self, tmp_path: Any) -> None:
        provider, workload, context, model = self._prepare_build(tmp_path)
        plan = provider.build(model, context)
        try:
            assert isinstance(plan, BuiltPlan)
            assert isinstance(plan.precision, Precision)
            with torch.inference_mode():
                for case in workload.cases:
                    expected = model(*case.args, **case.kwargs)
                    got = plan(*case.args, **case.kwargs)
                    assert type(got) is type(expected)
                    if isinstance(expected, torch.Tensor):
                        assert got.shape == expected.shape
                        tol = 1e-4 if plan.precision is Precision.FP32 else 0.25
                        torch.testing.assert_close(
                            got.float().cpu(), expected.float().cpu(), rtol=tol, atol=tol
                        )
        finally:
            plan.close()
        assert plan.closed

    def test_build_does_not_mutate_the_model(self, tmp_path: Any) -> None:
        provider, workload, context, model = self._prepare_build(tmp_path)
        before = {k: v.detach().clone() for k, v in model.state_dict().items()}
        plan = provider.build(model, context)
        try:
            with torch.inference_mode():
                plan(*workload.cases[0].args, **workload.cases[0].kwargs)
        finally:
            plan.close()
        after = model.state_dict()
        assert before.keys() == after.keys()
        for key, value in before.items():
            assert torch.equal(value, after[key]), f"build changed the model's {key}"
        assert not model.training, "build switched the caller's model to training mode"

    def test_metadata_is_json(self, tmp_path: Any) -> None:
        provider, _, context, model = self._prepare_build(tmp_path)
        plan = provider.build(model, context)
        try:
            json.dumps(plan.metadata, allow_nan=False)
            for name, path in plan.artifacts.items():
                assert path.exists(), f"artifact {name} at {path} does not exist"
        finally:
            plan.close()
