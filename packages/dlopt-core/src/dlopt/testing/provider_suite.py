"""The provider contract suite: subclass :class:`ProviderContractSuite` in your tests.

This module needs pytest (``pip install pytest``); the rest of :mod:`dlopt.testing`
(fakes, the fake race, in-process plugin modules) does not. A provider distribution
runs the same checks as dlopt's own plans::

    from dlopt.testing import ProviderContractSuite

    class TestMyNpuContract(ProviderContractSuite):
        distribution = "dlopt-mynpu"        # the distribution that ships the provider
        entry_point = "mynpu"               # its name in the ``dlopt.providers`` group
        heavy_modules = ("mynpu_sdk",)      # SDK modules the plugin must not import on load
        supports_keyword_inputs = True      # declared capabilities switch checks on
        supports_nested_outputs = True

        def make_provider(self):
            return MyNpuProvider()

pytest collects every ``test_*`` method of the subclass. **Override points** (methods,
the way fsspec's and SQLAlchemy's suites do it): :meth:`~ProviderContractSuite.make_provider`
(required), :meth:`~ProviderContractSuite.make_model` and
:meth:`~ProviderContractSuite.make_workload` (the main case: a small conv net on batch 1
and 4), ``make_keyword_model``/``make_keyword_workload``, ``make_nested_model``/
``make_nested_workload``, ``make_unseen_workload`` (shapes the build never saw),
:meth:`~ProviderContractSuite.make_options` (the plan's options; default: its defaults),
and the class attribute ``target`` (an :class:`~dlopt.settings.target.ExecutionTarget`).

**Declared capabilities** (class attributes) switch checks on: ``supports_dynamic_shapes``,
``supports_keyword_inputs``, ``supports_nested_outputs``, ``captures_graph`` (a plan made
by tracing or export must refuse a model that branches on its input values; default off) and
``supports_save_load`` (default: on when the provider has a ``load`` method); ``device``
is where inputs live and outputs must come back (default: the target's input device).

**Unavailable providers** skip their build checks with the probe's reason, so one suite
runs everywhere. On the machine where the provider must work (the vendor's CI with the
SDK and the device), set ``DLOPT_CONTRACT_REQUIRE_AVAILABLE=1``: "unavailable" is then
a failure, so a probe that can never succeed (a misspelled SDK module) cannot pass as
skipped.

Every build check goes through the race's own gate: the provider gets the context the
race gives it (prepared cases with the eager fp32 reference, the probe's answer, its
options, an artifact directory), the plan passes the plugin boundary
(:func:`~dlopt.plugins.boundary.check_built_plan`), and its outputs are held to
:func:`~dlopt.validation.validate_outputs` with the plan's declared precision and
``output_dtype`` and the default limits.

**What a built plan declares** (``BuiltPlan.serving``) is checked too: a plan declaring
``concurrent`` or ``per_thread`` concurrency is called from 4 threads at once, and one
declaring ``any_grad_mode`` under ``no_grad`` and with autograd on (docs/serving.md).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import attrs
import pytest
import torch

from dlopt.contract.provider import (
    BuiltPlan,
    ProviderAvailability,
    ProviderContext,
    ProviderProtocol,
    Role,
    api_version_problem,
)
from dlopt.errors import ProviderBuildError, ValueDependentGraph
from dlopt.pipeline.prepare import prepared_cases
from dlopt.platform.probing import distribution_version, importlib_metadata
from dlopt.platform.serialization import to_jsonable
from dlopt.platform.tree import iter_tensors, map_tensors
from dlopt.plugins.boundary import check_built_plan, is_plain_name, normalize_availability
from dlopt.plugins.discovery import ENTRY_POINT_GROUP
from dlopt.precision import Precision, Quantization
from dlopt.settings.policy import OptimizationPolicy, structure_options
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.testing.contexts import plan_gate
from dlopt.testing.models import VALUE_BRANCH_LINE, SmallConvNet, StructuredMLP, ValueBranchNet
from dlopt.validation import (
    InputFingerprint,
    ModelGuard,
    QualityPolicy,
    ReferenceOutputs,
    capture_reference,
    copy_inputs,
)
from dlopt.vocabulary import Concurrency

#: Modules no plugin may import at load time (each provider's SDK).
ALL_HEAVY_SDKS = (
    "torch_tensorrt",
    "tensorrt",
    "onnxruntime",
    "torchao",
    "onnx",
    "onnxscript",
    "openvino",
    "nncf",
)

#: Set to ``1`` where the provider must work: "unavailable" then fails instead of skipping.
REQUIRE_AVAILABLE_ENV = "DLOPT_CONTRACT_REQUIRE_AVAILABLE"


def _fail(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)


def require_available_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`REQUIRE_AVAILABLE_ENV` asks for an available provider."""
    value = (os.environ if environ is None else environ).get(REQUIRE_AVAILABLE_ENV, "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


def check_entry_point_claims(name: str, distribution: str, entry_points: Iterable[Any]) -> Any:
    """The one ``dlopt.providers`` entry point named ``name``, shipped by ``distribution``.

    Fails (naming every claimant) when no distribution, another distribution, or more
    than one distribution claims the name: which one the loader would load then depends
    on install order. Returns the entry point.
    """
    found = [ep for ep in entry_points if ep.name == name]
    if not found:
        _fail(
            f"no {ENTRY_POINT_GROUP!r} entry point named {name!r} is installed; declare "
            f'[project.entry-points."{ENTRY_POINT_GROUP}"] {name} = "<your_package>.plugin" in '
            f"{distribution}'s pyproject.toml and reinstall it (pip install -e .)"
        )
    # One distribution seen twice (an editable install beside stale metadata) is one claim.
    claimants = sorted({_dist_name(ep) for ep in found}, key=_canonical)
    claimants = list({_canonical(c): c for c in claimants}.values())
    if len(claimants) > 1:
        _fail(
            f"the {ENTRY_POINT_GROUP!r} entry point name {name!r} is claimed by "
            f"{len(claimants)} distributions: {', '.join(claimants)}; each plugin needs a "
            "name of its own: rename the entry point in one of them (or uninstall the other)"
        )
    if _canonical(claimants[0]) != _canonical(distribution):
        _fail(
            f"the {ENTRY_POINT_GROUP!r} entry point {name!r} comes from {claimants[0]}, not "
            f"from {distribution}; set the suite's distribution/entry_point to match"
        )
    return found[0]


#: The core modules a plugin package may import: the plugin API, and the contract suite
#: (in its tests).
PLUGIN_SURFACE = ("dlopt.plugin", "dlopt.testing")


def deep_core_imports(package: str) -> list[str]:
    """``"file.py:12 imports dlopt.contract.provider"`` for each import of a core module
    outside :data:`PLUGIN_SURFACE` in the sources of ``package`` (read, never run)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        origin = spec.origin if spec is not None else None
        files = [Path(origin)] if origin else []
    else:
        files = [f for d in spec.submodule_search_locations for f in Path(d).rglob("*.py")]
    problems = []
    for path in sorted(files):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
                if node.module == "dlopt":
                    modules = [f"dlopt.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                inside = module == "dlopt" or module.startswith("dlopt.")
                allowed = any(module == ok or module.startswith(ok + ".") for ok in PLUGIN_SURFACE)
                if inside and not allowed:
                    problems.append(f"{path.name}:{node.lineno} imports {module}")
    return problems


def _canonical(distribution: str) -> str:
    """A distribution name as pip compares them (``Dlopt_Core`` is ``dlopt-core``)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    name = dist.metadata["Name"] if dist is not None else None
    return str(name) if name else f"an unknown distribution ({getattr(ep, 'value', '?')})"


def _same_device(tensor: torch.Tensor, device: torch.device) -> bool:
    if tensor.device.type != device.type:
        return False
    return device.index is None or tensor.device.index in (None, device.index)


@attrs.define(eq=False)
class BuildSetup:
    """Everything one contract build uses, made the way the race makes it.

    ``reference`` holds the eager fp32 outputs (run twice) and the inputs plans are
    called with; ``context`` is the build context (its ``cases`` are private copies);
    ``guard`` fingerprints the model before anything is built.
    """

    provider: Any
    model: torch.nn.Module
    workload: WorkloadProfile
    reference: ReferenceOutputs
    guard: ModelGuard
    context: ProviderContext


def _batches(
    name: str, seed: int, case: Callable[[int, torch.Generator], WorkloadCase]
) -> WorkloadProfile:
    """A batch-1 and a batch-4 case, ``case(rows, generator)`` each, drawn in that order
    from one generator seeded with ``seed`` (the same tensors on every run)."""
    generator = torch.Generator().manual_seed(seed)
    return WorkloadProfile(cases=tuple(case(n, generator) for n in (1, 4)), name=name)


class ProviderContractSuite:
    """Checks every dlopt provider must pass. Set the class attributes, implement
    :meth:`make_provider`, declare what the provider supports, and override the other
    ``make_*`` methods where the defaults do not fit (see the module docstring).
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
    #: Where plans compute (and, unless it says otherwise, where inputs live).
    target: ClassVar[ExecutionTarget] = ExecutionTarget("cpu")

    # -- declared capabilities --------------------------------------------------------
    #: Where the plan's inputs live and its outputs must come back (``None``: the
    #: target's input device, e.g. ``"cpu"`` for a CPU target).
    device: ClassVar[str | None] = None
    #: A plan built on the workload's shapes serves other batch sizes too.
    supports_dynamic_shapes: ClassVar[bool] = False
    #: The model may take tensors by keyword (``model(x, mask=m)``).
    supports_keyword_inputs: ClassVar[bool] = False
    #: The model may return nested structures (a dict holding a list of tensors).
    supports_nested_outputs: ClassVar[bool] = False
    #: A built plan's artifacts reload with ``provider.load(directory, metadata, context)``
    #: (``None``: whether the provider has a ``load`` method).
    supports_save_load: ClassVar[bool | None] = None
    #: The plan is made by tracing or exporting the model's Python code (a TorchScript
    #: trace, an exporter, a vendor tracer): its build must refuse a graph that depends on
    #: input values (``dlopt.plugin.refuse_value_dependence`` around the trace).
    captures_graph: ClassVar[bool] = False
    #: Whether "unavailable" fails instead of skipping (``None``: read
    #: ``DLOPT_CONTRACT_REQUIRE_AVAILABLE`` from the environment).
    require_available: ClassVar[bool | None] = None

    # -- override points ------------------------------------------------------------
    def make_provider(self) -> ProviderProtocol:
        """One provider instance to check (required)."""
        raise NotImplementedError("return one provider instance to check")

    def make_model(self) -> torch.nn.Module:
        """A small conv net (Conv-BN-ReLU, pooling, Linear) on the input device."""
        torch.manual_seed(0)
        return SmallConvNet().eval().to(self.input_device())

    def make_workload(self) -> WorkloadProfile:
        """Batch 1 and batch 4 images on the input device."""
        device = self.input_device()
        return _batches(
            "contract",
            1,
            lambda n, gen: WorkloadCase(
                f"batch-{n}",
                args=(torch.randn(n, 3, 16, 16, generator=gen).to(device),),
                weight=3 if n == 1 else 1,
            ),
        )

    def make_value_dependent_model(self) -> torch.nn.Module:
        """A small conv net that branches on its input's values (used when
        ``captures_graph``): :class:`~dlopt.testing.models.ValueBranchNet`."""
        torch.manual_seed(0)
        return ValueBranchNet().eval().to(self.input_device())

    def make_value_dependent_workload(self) -> WorkloadProfile:
        """Batch 1 and 4 images of positive values: every case takes the same branch."""
        device = self.input_device()
        return _batches(
            "contract-value-branch",
            4,
            lambda n, gen: WorkloadCase(
                f"batch-{n}", args=(torch.rand(n, 3, 16, 16, generator=gen).to(device),)
            ),
        )

    def make_options(self, provider: ProviderProtocol) -> Any:
        """The plan's options for every build: its ``options_type``'s defaults, built the
        way the race builds them (``None`` for a provider without options)."""
        options_type = getattr(provider, "options_type", None)
        if options_type is None:
            return None
        return structure_options(options_type, {}, plan=provider.name)

    def make_keyword_model(self) -> torch.nn.Module:
        """An MLP taking ``x`` and a boolean ``mask`` keyword (used when
        ``supports_keyword_inputs``)."""
        return StructuredMLP(output="tensor").to(self.input_device())

    def make_keyword_workload(self) -> WorkloadProfile:
        """Batch 1 and 4 with a ``mask`` keyword hiding about half of the outputs."""
        return self._mlp_workload("contract-keywords", 2, with_mask=True)

    def make_nested_model(self) -> torch.nn.Module:
        """An MLP returning ``{"logits": t, "pooled": [t, t]}`` (used when
        ``supports_nested_outputs``)."""
        return StructuredMLP(output="dict").to(self.input_device())

    def make_nested_workload(self) -> WorkloadProfile:
        """Batch 1 and 4 inputs of :meth:`make_nested_model`."""
        return self._mlp_workload("contract-nested", 3, with_mask=False)

    def _mlp_workload(self, name: str, seed: int, *, with_mask: bool) -> WorkloadProfile:
        """Batch 1 and 4 rows of 16 features for the MLPs, with a boolean ``mask`` keyword
        over the 8 outputs when ``with_mask``."""
        device = self.input_device()

        def case(n: int, gen: torch.Generator) -> WorkloadCase:
            args = (torch.randn(n, 16, generator=gen).to(device),)
            mask = (torch.rand(n, 8, generator=gen) > 0.5).to(device) if with_mask else None
            return WorkloadCase(
                f"batch-{n}", args=args, kwargs={} if mask is None else {"mask": mask}
            )

        return _batches(name, seed, case)

    def make_unseen_workload(self, workload: WorkloadProfile) -> WorkloadProfile:
        """Inputs of a batch size the build never saw (used when ``supports_dynamic_shapes``):
        the case with the most rows, with one more row on dimension 0 of every tensor
        (override when dimension 0 is not the batch)."""
        largest = max(workload.cases, key=_rows)

        def grow(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                return torch.cat([value, value[:1]])
            return value

        case = WorkloadCase(
            f"unseen-batch-{_rows(largest) + 1}",
            args=tuple(grow(a) for a in largest.args),
            kwargs={k: grow(v) for k, v in largest.kwargs.items()},
        )
        return WorkloadProfile(cases=(case,), name="contract-unseen")

    def _forget_probe_caches(self) -> None:
        """Override when the provider caches probe results between calls (outside the
        provider instance)."""

    # -- machinery a subclass may reuse in its own tests ------------------------------
    def input_device(self) -> torch.device:
        """Where inputs live and outputs must come back (see :attr:`device`)."""
        if self.device is not None:
            return torch.device(self.device)
        return torch.device(getattr(self.target, "input_device", None) or self.target.device)

    def requires_available(self) -> bool:
        """Whether an unavailable provider fails (see :attr:`require_available`)."""
        if self.require_available is not None:
            return self.require_available
        return require_available_from_env()

    @property
    def plugin_name(self) -> str:
        """The name the plugin boundary reports this provider under."""
        return self.entry_point or self.distribution

    def probe_context(self, tmp_path: Path) -> ProviderContext:
        """The context of a plain probe (``dlopt providers``): no workload, no cases."""
        return ProviderContext(target=self.target, artifact_dir=Path(tmp_path) / "artifacts")

    def available_or_skip(
        self, provider: ProviderProtocol, context: ProviderContext
    ) -> ProviderAvailability:
        """The probe's answer; skips (or fails, when availability is required) if the
        provider is unavailable."""
        availability = provider.probe(context)
        if not isinstance(availability, ProviderAvailability):
            _fail(
                f"{provider.name}.probe() returned {type(availability).__name__}, expected "
                "ProviderAvailability"
            )
        if availability.available:
            return availability
        self._unavailable(provider, availability)

    def _unavailable(
        self, provider: ProviderProtocol, availability: ProviderAvailability
    ) -> NoReturn:
        message = f"{provider.name} is unavailable here: {availability.reason}"
        if availability.install_hint:
            message += f" (install hint: {availability.install_hint})"
        if self.requires_available():
            _fail(
                f"{message}; {REQUIRE_AVAILABLE_ENV}=1 (or require_available = True) says it "
                "must be available on this machine: fix the probe or the installation"
            )
        pytest.skip(message)

    def prepare(
        self,
        tmp_path: Path,
        *,
        make_model: Callable[[], torch.nn.Module] | None = None,
        make_workload: Callable[[], WorkloadProfile] | None = None,
    ) -> BuildSetup:
        """Probe (skip with its reason), then make the model and inputs on the input
        device, capture the eager fp32 reference (run twice, as the race does) and the
        build context: prepared cases, the probe's answer, options, an artifact dir.

        The order matters: the model and workload live on a device that may not exist on
        this machine when the provider is unavailable.
        """
        provider = self.make_provider()
        self.available_or_skip(provider, self.probe_context(tmp_path))
        model = (make_model or self.make_model)()
        workload = (make_workload or self.make_workload)()
        artifact_dir = Path(tmp_path) / "artifacts"
        artifact_dir.mkdir(parents=True, exist_ok=True)
        race = {
            "target": self.target,
            "policy": OptimizationPolicy(),
            "workload": workload,
            "artifact_dir": artifact_dir,
            "options": self.make_options(provider),
        }
        probed = self.available_or_skip(provider, ProviderContext(**race))
        guard = ModelGuard(model, snapshot=False)
        reference = capture_reference(
            model, workload, QualityPolicy(), target=self.input_device(), guard=guard
        )
        context = ProviderContext(
            **race,
            cases=prepared_cases(reference),
            availability=normalize_availability(probed),
        )
        return BuildSetup(provider, model, workload, reference, guard, context)

    def build(self, setup: BuildSetup) -> BuiltPlan:
        """Build a plan and check it as the race does right after ``build``: the model is
        unchanged, the plan passes the plugin boundary (metadata strict JSON, artifacts
        inside ``context.plan_dir(name)``) and declares the provider's precision."""
        provider = setup.provider
        plan = provider.build(setup.model, setup.context)
        try:
            self.check_model_unchanged(setup, "build")
            if isinstance(plan, BuiltPlan) and isinstance(plan.metadata, dict):
                try:
                    json.dumps(plan.metadata, allow_nan=False)
                except (TypeError, ValueError) as exc:
                    _fail(
                        f"plan {provider.name!r}: metadata is not strict JSON ({exc}); use "
                        "str, finite numbers, bools, None, lists and dicts with str keys"
                    )
            try:
                check_built_plan(
                    plan, setup.context, plan_name=provider.name, plugin=self.plugin_name
                )
            except ProviderBuildError as exc:
                _fail(str(exc))
            declared = Precision.parse(provider.precision)
            if plan.precision is not declared:
                _fail(
                    f"plan {provider.name!r} computes in {plan.precision.value} but the provider "
                    f"declares {declared.value}: the race shows and judges the declared "
                    "precision, so BuiltPlan.precision must equal provider.precision"
                )
            for name, path in plan.artifacts.items():
                if not path.exists():
                    _fail(f"plan {provider.name!r}: artifact {name!r} at {path} does not exist")
        except BaseException:
            if isinstance(plan, BuiltPlan):
                plan.close()
            raise
        return plan

    def check_model_unchanged(self, setup: BuildSetup, stage: str) -> None:
        """Fail when the plan changed the caller's weights, buffers or training flags."""
        problem = setup.guard.check(setup.model, stage=stage, plan=setup.provider.name)
        if problem is not None:
            _fail(f"{problem}; copy what you change (copy.deepcopy(model)) before changing it")

    def serve(
        self, setup: BuildSetup, plan: BuiltPlan, reference: ReferenceOutputs | None = None
    ) -> list[Any]:
        """Call ``plan`` on every case as the race's first calls do (a private copy of the
        inputs, inference mode), checking each call: the inputs are unchanged and every
        output tensor is on the inputs' device. Then the model must be unchanged, and every
        case's outputs must pass :func:`validate_outputs` with the plan's precision and
        ``output_dtype`` and the default limits. Returns the outputs."""
        name = setup.provider.name
        cases = (reference or setup.reference).cases
        outputs = []
        for case in cases:
            args, kwargs = copy_inputs(case.args, case.kwargs)
            before = InputFingerprint.of(args, kwargs)
            with torch.inference_mode():
                out = plan(*args, **kwargs)
                if plan.synchronize is not None:
                    plan.synchronize()  # an asynchronous runner's outputs are ready after it
            changed = before.changed_paths(args, kwargs)
            if changed:
                _fail(
                    f"plan {name!r} wrote into its inputs on case {case.name!r} "
                    f"({', '.join(changed)} changed): treat inputs as read-only, copy before "
                    "writing"
                )
            inputs = iter_tensors((case.args, case.kwargs))
            device = inputs[0].device if inputs else self.input_device()
            for index, tensor in enumerate(iter_tensors(out)):
                if not _same_device(tensor, device):
                    _fail(
                        f"plan {name!r} returned output tensor {index} on {tensor.device} for "
                        f"inputs on {device} (case {case.name!r}): plans return their outputs "
                        "on the device of their inputs"
                    )
            outputs.append(out)
        # As in the race: a changed model explains wrong outputs, so it is reported first.
        self.check_model_unchanged(setup, "first_call")
        for case, out in zip(cases, outputs):
            self.check_outputs(plan, out, case, name)
        self.check_device_memory(plan, name)
        return outputs

    def check_device_memory(self, plan: BuiltPlan, name: str) -> None:
        """A plan's own device-memory reading is ``None`` or a finite number of MiB >= 0."""
        if plan.device_memory_mb is None:
            return
        value = plan.device_memory_mb()
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            _fail(
                f"plan {name!r}: device_memory_mb() returned {value!r}; return the peak device "
                "memory in MiB as a finite number >= 0, or None when it is not known"
            )

    def check_outputs(self, plan: BuiltPlan, out: Any, case: Any, name: str) -> None:
        """Fail unless ``out`` passes the race's gate against ``case``'s reference outputs."""
        result = plan_gate(plan, out, case.outputs, case.name)
        if result.passed:
            return
        hint = ""
        if result.structure and plan.output_dtype is None:
            hint = (
                " (a plan whose floating outputs come back in a lower precision dtype "
                "declares it: BuiltPlan(output_dtype=torch.bfloat16))"
            )
        _fail(
            f"plan {name!r} ({plan.precision.value}) failed the validation gate: "
            f"{result.reason}{hint}"
        )

    def check_close(self, plan: BuiltPlan, name: str = "the plan") -> None:
        """``close()`` twice: it never raises, ``on_close`` runs exactly once and raises
        nothing (``BuiltPlan.close`` would only log that), and the plan is closed."""
        release = plan.on_close
        calls: list[BaseException | None] = []
        if release is not None:

            def counted() -> None:
                try:
                    release()
                except BaseException as exc:
                    calls.append(exc)
                    raise
                calls.append(None)

            plan.on_close = counted
        for attempt in (1, 2):
            try:
                plan.close()
            except Exception as exc:
                _fail(
                    f"{name}: close() call {attempt} raised {type(exc).__name__}: {exc}; "
                    "close() must release without raising and may be called again"
                )
        errors = [exc for exc in calls if exc is not None]
        if errors:
            _fail(
                f"{name}: on_close raised {type(errors[0]).__name__}: {errors[0]}; release "
                "what can be released and log the rest: closing must never raise"
            )
        if release is not None and len(calls) != 1:
            _fail(
                f"{name}: on_close ran {len(calls)} times over two close() calls; it must run "
                "exactly once (close() is idempotent)"
            )
        if not plan.closed:
            _fail(f"{name}: plan.closed is False after close()")

    def reload(self, setup: BuildSetup, plan: BuiltPlan, tmp_path: Path) -> BuiltPlan:
        """Copy ``plan``'s artifacts the way a bundle holds them, close it, delete its
        plan directory, and load it back with ``provider.load(directory, metadata,
        context)`` (the recorded metadata, a context without cases or model)."""
        from dlopt.bundle.store import copy_artifacts

        provider = setup.provider
        load = getattr(provider, "load", None)
        if not callable(load):
            _fail(
                f"{type(self).__name__} declares supports_save_load, but provider "
                f"{provider.name!r} has no load(directory, metadata, context) method"
            )
        staging = Path(tmp_path) / "saved"
        saved = staging / provider.name
        saved.mkdir(parents=True)
        copy_artifacts(plan.artifacts, staging, saved)
        # The metadata as the report records it: strict JSON, read back.
        metadata = json.loads(json.dumps(plan.metadata, allow_nan=False))
        self.check_close(plan, f"plan {provider.name!r}")
        shutil.rmtree(setup.context.artifact_dir / provider.name, ignore_errors=True)
        load_dir = Path(tmp_path) / "load-artifacts"
        load_dir.mkdir()
        # What dlopt.load_bundle gives: no policy, workload, cases or model.
        context = ProviderContext(
            target=self.target,
            artifact_dir=load_dir,
            options=setup.context.options,
            availability=setup.context.availability,
        )
        loaded = load(saved, metadata, context)
        if not isinstance(loaded, BuiltPlan):
            _fail(f"{provider.name}.load() returned {type(loaded).__name__}, expected BuiltPlan")
        if loaded.precision is not plan.precision:
            loaded.close()
            _fail(
                f"plan {provider.name!r} reloaded in {loaded.precision.value}, built in "
                f"{plan.precision.value}"
            )
        return loaded

    # -- discovery and loading --------------------------------------------------------
    def claimed_entry_point(self, skip_reason: str) -> Any:
        """The plugin's entry point, checked to be the distribution's (skip with
        ``skip_reason`` for an in-process provider, which has none)."""
        if self.entry_point is None:
            pytest.skip(f"in-process provider: {skip_reason}")
        return check_entry_point_claims(
            self.entry_point,
            self.distribution,
            importlib_metadata.entry_points(group=ENTRY_POINT_GROUP, name=self.entry_point),
        )

    def test_distribution_installed_and_registers_entry_point(self) -> None:
        if self.entry_point is not None:
            assert distribution_version(self.distribution), f"{self.distribution} is not installed"
        self.claimed_entry_point("no entry point to resolve")

    def test_plugin_declares_compatible_api_version(self) -> None:
        ep = self.claimed_entry_point("no plugin module")
        plugin = ep.load()
        problem = api_version_problem(getattr(plugin, "DLOPT_PLUGIN_API_VERSION", None))
        assert problem is None, problem

    def test_loading_the_plugin_imports_no_heavy_sdk(self) -> None:
        if self.entry_point is None:
            pytest.skip("in-process provider: nothing is loaded through entry points")
        # A fresh interpreter: this test process may have imported SDKs already.
        code = (
            "import json, sys\n"
            "from dlopt.plugins.discovery import load_providers, PluginSettings\n"
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

    def test_plugin_imports_only_dlopt_plugin(self) -> None:
        ep = self.claimed_entry_point("no plugin package to read")
        problems = deep_core_imports(ep.value.partition(":")[0].split(".")[0])
        assert not problems, (
            "a plugin imports from dlopt.plugin only (the API that stays stable); found: "
            + "; ".join(problems)
        )

    # -- declarations -----------------------------------------------------------------
    def test_declares_name_role_and_precision(self) -> None:
        provider = self.make_provider()
        if not is_plain_name(provider.name):
            _fail(
                f"plan name {provider.name!r} is not a plain name (names become directory "
                "names): use letters, digits, '_', '.' and '-'"
            )
        try:
            precision = Precision.parse(provider.precision)
        except (ValueError, TypeError) as exc:
            _fail(f"provider {provider.name!r} declares an unknown precision: {exc}")
        quantization = getattr(provider, "quantization", None)
        if quantization is not None:
            if not isinstance(quantization, Quantization):
                _fail(
                    f"provider {provider.name!r} declares quantization {quantization!r}: use "
                    f"dlopt.plugin.Quantization ({', '.join(q.value for q in Quantization)})"
                )
            if precision in (Precision.FP32, Precision.TF32):
                _fail(
                    f"provider {provider.name!r} declares quantization {quantization.value!r} "
                    f"but computes in {precision.value}: declare the precision it quantizes to"
                )
        try:
            Role.of(provider)
        except TypeError as exc:
            _fail(str(exc))

    def test_options_are_attrs_with_defaults_and_help(self) -> None:
        provider = self.make_provider()
        options_type = getattr(provider, "options_type", None)
        if options_type is None:
            return
        where = f"provider {provider.name!r}: options_type {getattr(options_type, '__name__', options_type)!r}"
        if not (isinstance(options_type, type) and attrs.has(options_type)):
            _fail(f"{where} must be an attrs class (@attrs.frozen)")
        for a in attrs.fields(options_type):
            if a.default is attrs.NOTHING:
                _fail(f"{where}: option {a.name!r} has no default; every option needs one")
            help_text = a.metadata.get("help")
            if not isinstance(help_text, str) or not help_text.strip():
                _fail(
                    f"{where}: option {a.name!r} has no help; add "
                    'metadata={"help": "what it does"} (dlopt providers --options shows it)'
                )
        options = self.make_options(provider)
        fields = attrs.fields(options_type)
        if fields:
            try:
                setattr(options, fields[0].name, getattr(options, fields[0].name))
            except attrs.exceptions.FrozenInstanceError:
                pass
            else:
                _fail(f"{where} must be frozen (@attrs.frozen): options identify a plan")
        try:
            json.dumps(to_jsonable(options), allow_nan=False)
        except (TypeError, ValueError) as exc:
            _fail(f"{where}: the default options cannot be recorded as strict JSON: {exc}")

    # -- probe ------------------------------------------------------------------------
    def test_probe_is_typed_and_fast(self, tmp_path: Path) -> None:
        provider = self.make_provider()
        assert isinstance(provider.name, str) and provider.name
        assert isinstance(Precision.parse(provider.precision), Precision)
        start = time.perf_counter()
        availability = provider.probe(self.probe_context(tmp_path))
        elapsed = time.perf_counter() - start
        assert isinstance(availability, ProviderAvailability)
        assert elapsed < self.max_probe_seconds, f"probe took {elapsed:.2f}s"
        if not availability.available:
            assert availability.reason, "an unavailable provider must say why"
            if self.requires_available():
                self._unavailable(provider, availability)

    def test_missing_sdk_gives_reason_and_install_hint(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
            availability = self.make_provider().probe(self.probe_context(tmp_path))
        finally:
            self._forget_probe_caches()
        assert not availability.available, "the probe says available with its SDK missing"
        assert availability.reason
        assert availability.install_hint, "tell the user how to install what is missing"

    # -- build ------------------------------------------------------------------------
    def serve_or_close(self, setup: BuildSetup, plan: BuiltPlan) -> None:
        """:meth:`serve` ``plan``, closing it when a check fails (the failure propagates)."""
        try:
            self.serve(setup, plan)
        except BaseException:
            plan.close()
            raise

    def serve_declared(
        self,
        tmp_path: Path,
        capability: str,
        make_model: Callable[[], torch.nn.Module],
        make_workload: Callable[[], WorkloadProfile],
    ) -> None:
        """Build and serve the model of a declared ``supports_*`` capability (else skip)."""
        if not getattr(self, capability):
            pytest.skip(f"{capability} is not declared")
        setup = self.prepare(tmp_path, make_model=make_model, make_workload=make_workload)
        with self.build(setup) as plan:
            self.serve(setup, plan)

    def test_build_serves_every_case_through_the_gate(self, tmp_path: Path) -> None:
        setup = self.prepare(tmp_path)
        plan = self.build(setup)
        self.serve_or_close(setup, plan)
        self.check_close(plan, f"plan {setup.provider.name!r}")

    def test_build_and_close_twice(self, tmp_path: Path) -> None:
        """A process races more than once: the provider builds again after a close."""
        setup = self.prepare(tmp_path)
        for attempt in (1, 2):
            plan = self.build(setup)
            self.serve_or_close(setup, plan)
            self.check_close(plan, f"plan {setup.provider.name!r} (build {attempt} of 2)")

    def test_dynamic_shapes(self, tmp_path: Path) -> None:
        if not self.supports_dynamic_shapes:
            pytest.skip("supports_dynamic_shapes is not declared")
        setup = self.prepare(tmp_path)
        unseen = capture_reference(
            setup.model,
            self.make_unseen_workload(setup.workload),
            QualityPolicy(),
            target=self.input_device(),
            guard=setup.guard,
        )
        with self.build(setup) as plan:
            self.serve(setup, plan)
            self.serve(setup, plan, unseen)

    def test_value_dependent_graph_is_refused(self, tmp_path: Path) -> None:
        """A plan that captures a graph refuses a model branching on its input values,
        with :class:`~dlopt.errors.ValueDependentGraph` quoting the model's line: the race's
        inputs all take one branch, so validation alone would pass the plan."""
        if not self.captures_graph:
            pytest.skip("captures_graph is not declared")
        setup = self.prepare(
            tmp_path,
            make_model=self.make_value_dependent_model,
            make_workload=self.make_value_dependent_workload,
        )
        name = setup.provider.name
        try:
            plan = setup.provider.build(setup.model, setup.context)
        except ValueDependentGraph as exc:
            if VALUE_BRANCH_LINE not in str(exc):
                _fail(
                    f"plan {name!r} refused the value-dependent model, but its reason does not "
                    f"quote the model's line {VALUE_BRANCH_LINE!r}: {exc}"
                )
            return
        except ProviderBuildError as exc:
            _fail(
                f"plan {name!r} failed to build a model that branches on its input values "
                f"with {type(exc).__name__}: {exc}; refuse such a graph with "
                "ValueDependentGraph (wrap the trace in dlopt.plugin.refuse_value_dependence)"
            )
        plan.close()
        _fail(
            f"plan {name!r} declares captures_graph but built a model that branches on its "
            "input values (`if x.sum() > 0`): its graph serves the branch the example took to "
            "every input. Wrap the trace in dlopt.plugin.refuse_value_dependence(model, ...)"
        )

    def test_keyword_inputs(self, tmp_path: Path) -> None:
        self.serve_declared(
            tmp_path, "supports_keyword_inputs", self.make_keyword_model, self.make_keyword_workload
        )

    def test_nested_outputs(self, tmp_path: Path) -> None:
        self.serve_declared(
            tmp_path, "supports_nested_outputs", self.make_nested_model, self.make_nested_workload
        )

    def test_declared_concurrency_holds(self, tmp_path: Path) -> None:
        """A plan declaring ``concurrent`` (or ``per_thread``) is called from 4 threads at
        once, every case three times each, and every output passes the gate."""
        setup = self.prepare(tmp_path)
        with self.build(setup) as plan:
            concurrency = plan.serving.concurrency
            if concurrency is Concurrency.SERIALIZED:
                pytest.skip("the plan declares serialized: the decision calls it one at a time")
            self.serve(setup, plan)  # first calls (and compiles) before the threads
            name = setup.provider.name
            failures: list[str] = []
            # The threads start their calls together: on a busy machine a thread started
            # late could otherwise find the others done, and nothing would overlap. Each
            # walks the cases from its own starting case: threads in lockstep on one case
            # would compute the same outputs, and state they share would go unseen.
            start = threading.Barrier(4)
            cases = setup.reference.cases

            def caller(first: int) -> None:
                runner: Callable[..., Any] = plan
                if concurrency is Concurrency.PER_THREAD and plan.thread_runner is not None:
                    runner = plan.thread_runner()
                try:
                    start.wait(timeout=60)
                    for _ in range(3):
                        for case in (*cases[first:], *cases[:first]):
                            args, kwargs = copy_inputs(case.args, case.kwargs)
                            with torch.inference_mode():
                                out = runner(*args, **kwargs)
                                if plan.synchronize is not None:
                                    plan.synchronize()
                            result = plan_gate(plan, out, case.outputs, case.name)
                            if not result.passed:
                                failures.append(str(result.reason))
                except Exception as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")

            threads = [threading.Thread(target=caller, args=(i % len(cases),)) for i in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if failures:
                _fail(
                    f"plan {name!r} declares {concurrency.value} concurrency, but called from "
                    f"4 threads at once: {failures[0]} ({len(failures)} failure(s)); declare "
                    "serialized (the default) unless its runtime is safe to call concurrently"
                )

    def test_declared_any_grad_mode_holds(self, tmp_path: Path) -> None:
        """A plan declaring ``any_grad_mode`` passes the gate when called under ``no_grad``
        and with autograd on (ordinary tensors), as well as in inference mode."""
        setup = self.prepare(tmp_path)
        with self.build(setup) as plan:
            if not plan.serving.any_grad_mode:
                pytest.skip("the plan does not declare any_grad_mode: it serves in one mode")
            self.serve(setup, plan)
            for mode in (torch.no_grad, torch.enable_grad):
                for case in setup.reference.cases:
                    args, kwargs = map_tensors(
                        lambda t: t.clone(), (case.args, case.kwargs)
                    )  # ordinary tensors, made outside inference mode
                    try:
                        with mode():
                            out = plan(*args, **kwargs)
                            if plan.synchronize is not None:
                                plan.synchronize()
                    except Exception as exc:
                        _fail(
                            f"plan {setup.provider.name!r} declares any_grad_mode but raised "
                            f"under {mode.__name__} on case {case.name!r}: "
                            f"{type(exc).__name__}: {exc}"
                        )
                    self.check_outputs(
                        plan, map_tensors(lambda t: t.detach(), out), case, setup.provider.name
                    )

    def test_saved_plan_reloads(self, tmp_path: Path) -> None:
        declared = self.supports_save_load
        if declared is None:
            declared = callable(getattr(self.make_provider(), "load", None))
        if not declared:
            pytest.skip("supports_save_load is not declared (the provider has no load method)")
        setup = self.prepare(tmp_path)
        plan = self.build(setup)
        self.serve_or_close(setup, plan)
        loaded = self.reload(setup, plan, tmp_path)
        self.serve_or_close(setup, loaded)
        self.check_close(loaded, f"reloaded plan {setup.provider.name!r}")


def _rows(case: WorkloadCase) -> int:
    """Dimension 0 of the case's first tensor with one (0 when none has)."""
    return next((int(t.shape[0]) for t in iter_tensors((case.args, case.kwargs)) if t.dim()), 0)
