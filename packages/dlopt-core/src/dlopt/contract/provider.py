"""The provider contract: what a plugin implements and what it hands back.

One :class:`ProviderProtocol` instance is one candidate plan. A plugin registers one
instance per plan variant it offers (TorchAO registers one per quantization scheme).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import attrs
from attrs import define, field, frozen

from dlopt.contract.priors import OperatorMix, Prior
from dlopt.errors import ProviderBuildError
from dlopt.platform.retired import retired_names
from dlopt.precision import Precision, Quantization
from dlopt.settings.target import ExecutionTarget
from dlopt.vocabulary import Concurrency, GradMode, TextEnum

if TYPE_CHECKING:
    import torch

    from dlopt.settings.policy import OptimizationPolicy
    from dlopt.settings.workload import WorkloadCase, WorkloadProfile

log = logging.getLogger(__name__)

#: The plugin API this core implements, as "MAJOR.MINOR". A plugin declares the version
#: it was written for; it is compatible when the majors match and its minor is not newer.
#: dlopt-core 0.1.x implements 1.0; 0.2.0 implements 2.0; 0.2.1 implements 2.1, which adds
#: ``BuiltPlan.serving``, ``BuiltPlan.thread_runner`` and ``prior`` (dlopt-core README).
PLUGIN_API_VERSION = "2.1"


class Role(TextEnum):
    """What a plan is to the selection; a plan's name carries no meaning.

    ``reference``: eager fp32, the ground truth and the first baseline (one per race).
    ``native``: PyTorch's own optimized path; may replace the reference as the baseline
    only by clearing the confidence gate against it. ``challenger``: everything else.
    """

    REFERENCE = "reference"
    NATIVE = "native"
    CHALLENGER = "challenger"

    @classmethod
    def of(cls, provider: object) -> Role:
        """The role ``provider`` declares (``challenger`` when it declares none)."""
        return _declared(cls, provider, "role", getattr(provider, "role", cls.CHALLENGER))


class Reload(TextEnum):
    """How a saved plan (a bundle, a cache record) is served again by its provider.

    ``load``: ``provider.load(directory, metadata, context)`` reads the plan's saved
    artifacts (an ONNX model, a TensorRT engine); no model is needed. ``rebuild``:
    ``provider.build(model, context)`` again from the caller's model (cheap plans:
    eager, native, fx rewrites, TorchAO). ``rebuild_with_compile_cache``: ``build`` again
    after torch's own compile caches, saved beside the plan, are restored, so the first
    calls do not compile from scratch (``torch.compile`` plans).
    """

    LOAD = "load"
    REBUILD = "rebuild"
    REBUILD_WITH_COMPILE_CACHE = "rebuild_with_compile_cache"

    @classmethod
    def of(cls, provider: object) -> Reload:
        """What ``provider`` declares in ``reloads_by``; undeclared: ``load`` when it has a
        ``load`` method, else ``rebuild``. (``comes_back``, the name before plugin API 2.1,
        is read too, with a ``DeprecationWarning``.)"""
        declared = getattr(provider, "reloads_by", None)
        if declared is None and getattr(provider, "comes_back", None) is not None:
            warnings.warn(
                f"provider {getattr(provider, 'name', provider)!r} declares comes_back, which "
                "is deprecated: declare reloads_by (same values)",
                DeprecationWarning,
                stacklevel=2,
            )
            declared = provider.comes_back  # type: ignore[attr-defined]
            return _declared(cls, provider, "comes_back", declared)
        if declared is None:
            return cls.LOAD if callable(getattr(provider, "load", None)) else cls.REBUILD
        return _declared(cls, provider, "reloads_by", declared)


_E = TypeVar("_E", bound=TextEnum)


def _declared(kind: type[_E], provider: object, attribute: str, declared: object) -> _E:
    """``declared`` (a member or its value) as a member of ``kind``; a ``TypeError`` that
    names the provider, the attribute and the choices when it is none of them."""
    name = getattr(provider, "name", provider)
    return kind.coerce(declared, f"provider {name!r} declares {attribute}", error=TypeError)


def api_version_problem(declared: object) -> str | None:
    """Why a plugin's declared API version cannot be used with this core, or ``None``."""
    if declared is None:
        return (
            "declares no DLOPT_PLUGIN_API_VERSION; set it to the dlopt plugin API "
            f"version the plugin was written for (this core implements {PLUGIN_API_VERSION})"
        )
    try:
        major, minor = (int(part) for part in str(declared).split("."))
        core_major, core_minor = (int(part) for part in PLUGIN_API_VERSION.split("."))
    except ValueError:
        return f"declares a malformed plugin API version {declared!r}; expected 'MAJOR.MINOR'"
    if major != core_major or minor > core_minor:
        return (
            f"written for plugin API {declared}, but this dlopt-core implements "
            f"{PLUGIN_API_VERSION}; install a dlopt-core / plugin pair with the same major "
            "version (upgrade whichever is older)"
        )
    return None


def _precision(value: str | Precision) -> Precision:
    return Precision.parse(value)


@frozen
class ProviderAvailability:
    """Whether a provider can build on the target, and if not, why and how to fix it.

    ``sdk_versions`` maps distribution names to the versions seen (``None`` when absent);
    ``details`` carries capabilities a probe found (execution providers, compiler...) as
    JSON values (text, preferably). The loader normalises whatever a probe returns
    (``dlopt.plugins.boundary.normalize_availability``) before anyone reads it.
    """

    available: bool
    reason: str | None = None
    install_hint: str | None = None
    sdk_versions: dict[str, str | None] = field(factory=dict)
    details: dict[str, Any] = field(factory=dict)

    @classmethod
    def ok(cls, reason: str | None = None, **kwargs: Any) -> ProviderAvailability:
        return cls(True, reason, **kwargs)

    @classmethod
    def unavailable(
        cls, reason: str, install_hint: str | None = None, **kwargs: Any
    ) -> ProviderAvailability:
        return cls(False, reason, install_hint, **kwargs)


@define(eq=False)
class PreparedCase:
    """One workload case as a build sees it: inputs on the device where plans are called
    (ordinary tensors; :meth:`ProviderContext.call_inputs` gives them as the race calls
    plans), and the eager fp32 reference outputs (detached CPU copies) they must
    reproduce."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    reference: Any
    weight: float = 1.0


def _case_tuple(cases: Iterable[PreparedCase]) -> tuple[PreparedCase, ...]:
    return tuple(cases)


@define
class ProviderContext:
    """What a provider gets to probe and build.

    Always set: ``target`` (where plans compute and where they are called), ``policy``,
    ``artifact_dir``, and ``options``: this plan's options (an instance of the provider's
    ``options_type``, defaults filled in; ``None`` for a provider without options).

    Set during a race: ``workload`` (the user's cases as given), and at build time
    ``cases`` (every case's inputs already prepared on ``target.input_device`` plus the
    reference outputs: compile for, trace with and calibrate on these) and
    ``availability`` (this provider's probe result from the same race: no need to probe
    again). A plain probe (``dlopt providers``) has no workload and no cases.

    ``saved_plan_dir``: when a plan that comes back by rebuilding (a bundle, a plan cache
    record) is built again, the directory holding the files it saved (its
    ``BuiltPlan.artifacts``, by file name): a build may read what it recorded there (a
    static quantizer's calibration) instead of what it can no longer see. ``None`` in a
    race.

    ``operator_mix``: where one reference call of the model spends its time (set from
    the ground truth on in a race; ``None`` otherwise), what a provider's optional
    ``prior(context)`` reads.
    """

    target: ExecutionTarget = field(factory=ExecutionTarget)
    policy: OptimizationPolicy | None = None
    workload: WorkloadProfile | None = None
    artifact_dir: Path = field(factory=lambda: Path("dlopt-artifacts"), converter=Path)
    options: Any = None
    cases: tuple[PreparedCase, ...] = field(default=(), converter=_case_tuple)
    availability: ProviderAvailability | None = None
    saved_plan_dir: Path | None = None
    operator_mix: OperatorMix | None = None

    def build_cases(self) -> tuple[PreparedCase, ...] | tuple[WorkloadCase, ...]:
        """The cases a build traces, compiles and calibrates for: the race's prepared
        ``cases`` (on the device plans are called with); a direct ``build`` call outside a
        race, without them, falls back to the workload's cases as given."""
        if self.cases:
            return self.cases
        return self.workload.cases if self.workload is not None else ()

    @property
    def grad_mode(self) -> GradMode:
        """The calling context plans are judged in (the workload's; ``inference_mode``
        outside a race)."""
        return self.workload.grad_mode if self.workload is not None else GradMode.INFERENCE_MODE

    def calling_context(self) -> contextlib.AbstractContextManager[None]:
        """Enter it to call a built plan the way the race will (a compile at build then
        serves the race): ``with context.calling_context(): runner(*args, **kwargs)``,
        with ``args, kwargs = context.call_inputs(case)``."""
        from dlopt.contract.calling import grad_mode_scope

        return grad_mode_scope(self.grad_mode)

    def call_inputs(self, case: PreparedCase) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``case``'s inputs as the race calls plans with them: made in the calling
        context (inference tensors under ``inference_mode``). ``case.args`` themselves
        are ordinary tensors, what exporters and quantizers trace with."""
        from dlopt.contract.calling import inputs_of_kind

        return inputs_of_kind(self.grad_mode, case.args, case.kwargs)

    def example_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The first prepared case's ``(args, kwargs)`` (for tracing and export)."""
        if not self.cases:
            raise ValueError("no prepared cases: example inputs exist only at build time")
        return self.cases[0].args, self.cases[0].kwargs

    def plan_dir(self, plan_name: str) -> Path:
        """A directory owned by one plan inside the artifact directory (created).

        ``plan_name`` must be a plain name (never a path), and the directory must resolve
        inside ``artifact_dir`` (a link pointing elsewhere is refused): ConfigurationError.
        """
        from dlopt.errors import ConfigurationError
        from dlopt.platform.names import check_plan_name, is_inside

        path = self.artifact_dir / check_plan_name(plan_name)
        if not is_inside(path, self.artifact_dir):
            raise ConfigurationError(
                f"the directory of plan {plan_name!r}, {str(path)!r}, resolves outside the "
                f"artifact directory {str(self.artifact_dir)!r} (a link?); remove it or "
                "choose another artifact directory"
            )
        path.mkdir(parents=True, exist_ok=True)
        return path


def _concurrency(value: str | Concurrency) -> Concurrency:
    return Concurrency.coerce(value, "ServingTraits.concurrency")


@frozen
class ServingTraits:
    """What a built plan promises about being served; every default is the safe choice.

    ``concurrency``: ``serialized`` (default: the decision lets one thread call the plan
    at a time), ``concurrent`` (its runtime may be called from many threads at once:
    eager torch, an ONNX Runtime session) or ``per_thread`` (each calling thread gets its
    own runner from ``BuiltPlan.thread_runner``).

    ``any_grad_mode``: the plan computes the same under ``inference_mode``, ``no_grad`` or
    autograd on, on inference or ordinary input tensors (eager torch, a runtime of its
    own), so the decision calls it in the caller's own context. ``False`` (default): it
    serves only in the context it was judged in (a compiled graph guards on it), and the
    decision enters that context around every call.

    ``differentiable``: its outputs carry gradients back to inputs that require them
    (eager autograd); a caller that needs gradients through a plan without them gets a
    clear error. ``dynamic_shapes``: it serves input shapes it was never called with; the
    decision checks that on a held-out batch size before it routes such calls to it
    (otherwise they fall back to eager fp32 or raise, as the policy says).
    """

    concurrency: Concurrency = field(default=Concurrency.SERIALIZED, converter=_concurrency)
    any_grad_mode: bool = False
    differentiable: bool = False
    dynamic_shapes: bool = False


#: The traits of an eager torch plan: thread-safe, any context, autograd, any shape.
EAGER_SERVING = ServingTraits(
    concurrency=Concurrency.CONCURRENT,
    any_grad_mode=True,
    differentiable=True,
    dynamic_shapes=True,
)


@define(eq=False)
class BuiltPlan:
    """An executable plan: a runner callable plus what it computes in and what it made.

    ``runner`` takes the same ``*args, **kwargs`` as the model and returns the same
    structure. ``output_dtype`` declares that floating outputs come back in a lower
    precision dtype (validation upcasts them); ``None`` means they match the reference.
    ``artifacts`` names files the plan owns (engine, .onnx), all inside
    ``context.plan_dir(name)``; ``metadata`` is JSON-able evidence for the report.
    ``close()`` releases sessions, engines and threads.

    ``synchronize``: waits until work the runner queued has finished; called before every
    timer stop (an asynchronous NPU runner would otherwise be timed at enqueue). Without
    it dlopt synchronizes the target's torch device (CUDA). ``device_memory_mb``: the
    peak device memory the plan's runtime used, in MiB, as its SDK reports it (an NPU's
    memory, an arena torch cannot see); reported beside the CPU/CUDA figures and held to
    ``max_peak_memory_mb`` too.

    ``serving``: what the plan promises about threads, grad modes, gradients and shapes
    (:class:`ServingTraits`; the defaults are safe). ``thread_runner``: a new runner for
    one calling thread, required by ``per_thread`` concurrency.
    """

    runner: Callable[..., Any]
    precision: Precision = field(default=Precision.FP32, converter=_precision)
    artifacts: dict[str, Path] = field(factory=dict)
    metadata: dict[str, Any] = field(factory=dict)
    output_dtype: torch.dtype | None = None
    on_close: Callable[[], None] | None = None
    synchronize: Callable[[], None] | None = None
    device_memory_mb: Callable[[], float | None] | None = None
    serving: ServingTraits = field(factory=ServingTraits)
    thread_runner: Callable[[], Callable[..., Any]] | None = None
    closed: bool = field(default=False, init=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.runner(*args, **kwargs)

    def close(self) -> None:
        """Release resources once; errors while closing are logged, never raised."""
        if self.closed:
            return
        self.closed = True
        if self.on_close is not None:
            try:
                self.on_close()
            except Exception:  # closing must never take down a race
                log.warning("closing plan failed", exc_info=True)
        self.runner = _closed_runner

    def __enter__(self) -> BuiltPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _closed_runner(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this plan was closed; build it again to run it")


@runtime_checkable
class ProviderProtocol(Protocol):
    """One candidate plan offered by a plugin.

    Implementations keep ``__init__`` and ``probe`` cheap and import their SDK inside
    ``probe``/``build`` only. ``build`` must not modify ``model`` (copy what you change);
    dlopt hashes the weights before and after to check.

    Optional attributes: ``role`` (a :class:`Role`; default ``challenger``),
    ``options_type`` (an attrs class of the plan's options, each field with a default
    and ``metadata={"help": ...}``; users pass values per plan in
    ``OptimizationPolicy(plan_options=...)``), and ``load(directory, metadata, context)
    -> BuiltPlan`` for a provider that can serve a saved plan again without rebuilding it
    from the model (``directory`` holds the files of ``BuiltPlan.artifacts`` under their
    file names, ``metadata`` is the plan's recorded metadata), and ``reloads_by`` (a
    :class:`Reload`: how a bundle or cache record serves the plan again; default
    ``load`` with a ``load`` method, else ``rebuild``). A provider that rebuilds may also
    implement ``save_program(plan, directory, context) -> dict | None`` and
    ``load_program(directory, metadata, context) -> BuiltPlan``: the selected plan saved
    as a program that serves without the model or a compile (an AOTInductor package),
    loaded first on a cache hit (docs/writing-a-provider.md). ``prior(context) ->
    Prior | None`` (plugin API 2.1) says what the plan is expected to do before it is
    built, for ``context.operator_mix`` on ``context.target``: the selection builds in
    order of expected gain per second and skips a plan whose prior cannot win
    (docs/selection.md, "Decision time"); ``None`` leaves it to dlopt's own priors.
    """

    @property
    def name(self) -> str:
        """Unique plan name, e.g. ``"onnxruntime_cpu"``; used in reports and include/exclude."""
        ...

    @property
    def precision(self) -> Precision:
        """The precision the plan will declare when built (shown before building)."""
        ...

    def probe(self, context: ProviderContext) -> ProviderAvailability:
        """Say whether this plan can be built on ``context.target``; never raise."""
        ...

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        """Build the executable plan for ``model``; raise with a clear message on failure."""
        ...


@frozen
class ProviderInfo:
    """A registered provider and where it came from (plugin, distribution, version)."""

    provider: ProviderProtocol
    plugin: str
    distribution: str | None = None
    version: str | None = None

    @property
    def name(self) -> str:
        return self.provider.name


class Register(Protocol):
    """The ``register`` callback a ``dlopt_register_providers`` hook receives.

    Call it once per plan: ``register(provider)``. It takes no other argument in plugin
    API 2.0; an unknown keyword is an error naming the plugin.
    """

    def __call__(self, provider: ProviderProtocol, /) -> None: ...


class Provider:
    """A base class with the common plumbing; implementing the protocol directly is fine.

    Subclasses set ``name``, ``precision`` (and ``role``, ``options_type`` when needed)
    and implement :meth:`availability` (what the probe answers; it may raise) and
    ``build``. :meth:`probe` guards ``availability`` (an exception becomes "unavailable"
    with its message) and caches the answer per target and options, so repeated probes
    cost nothing.
    """

    name: str
    precision: Precision = Precision.FP32
    #: For an integer precision: how the plan scales activations (optional, ``None``
    #: when not declared). Plans declaring ``STATIC`` int8 share their rounding on a model:
    #: one that fails validation far over its limits spares the builds of the others.
    quantization: Quantization | None = None
    role: Role = Role.CHALLENGER
    options_type: type | None = None
    #: The install hint used when ``availability`` raises.
    install_hint: str | None = None

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        """Whether this plan can be built on ``context.target``; may raise."""
        retired = getattr(self, "check", None)
        if callable(retired):
            # A provider written before plugin API 2.1 names it ``check``.
            warnings.warn(
                f"provider {self.name!r} implements check(), which is deprecated: rename it "
                "availability() (same arguments and answer)",
                DeprecationWarning,
                stacklevel=2,
            )
            return retired(context)
        raise NotImplementedError(f"provider {self.name!r} implements no availability()")

    def prior(self, context: ProviderContext) -> Prior | None:
        """What this plan is expected to do for ``context.operator_mix`` on
        ``context.target`` before it is built; ``None`` (default): dlopt's own priors."""
        return None

    def probe(self, context: ProviderContext) -> ProviderAvailability:
        """The guarded, cached :meth:`availability`: never raises.

        Answers are cached in this process per target, options and workload, and kept
        across processes per target, options and environment
        (:mod:`dlopt.contract.probe_cache`): ``availability`` must not judge the workload
        (an override of ``probe`` may, after calling this one)."""
        key = (context.target, repr(context.options), id(context.workload))
        cache: dict[Any, ProviderAvailability] = self.__dict__.setdefault("_probe_cache", {})
        if key not in cache:
            cache[key] = self._kept_or_probed(context)
        return cache[key]

    def _kept_or_probed(self, context: ProviderContext) -> ProviderAvailability:
        from dlopt.contract import probe_cache
        from dlopt.platform.serialization import NotJsonableError, strict_jsonable

        stored = probe_cache.entry_key(self, context.target, context.options)
        kept = probe_cache.read(stored)
        if kept is not None:
            try:
                return ProviderAvailability(**kept)
            except TypeError:
                pass  # another layout: probe again
        try:
            answer = self.availability(context)
        except Exception as exc:  # not kept: the next process may not fail
            return ProviderAvailability.unavailable(
                f"{self.name}: probe failed: {type(exc).__name__}: {exc}", self.install_hint
            )
        if isinstance(answer, ProviderAvailability):
            with contextlib.suppress(NotJsonableError):
                probe_cache.write(stored, strict_jsonable(attrs.asdict(answer)))
        return answer

    def plan_dir(self, context: ProviderContext) -> Path:
        """This plan's own directory for artifacts (created)."""
        return context.plan_dir(self.name)

    def plan_options(self, context: ProviderContext) -> Any:
        """This plan's options: ``context.options``, or an ``options_type()`` of defaults
        when none were given (a ``build`` or ``load`` called outside a race).

        Options of another type raise :class:`~dlopt.errors.ProviderBuildError` saying how
        to pass them; a provider without ``options_type`` gets ``context.options`` as is.
        """
        options = context.options
        kind = self.options_type
        if kind is None:
            return options
        if options is None:
            return kind()
        if not isinstance(options, kind):
            raise ProviderBuildError(
                f"{self.name}: its options must be a {kind.__name__}, got "
                f"{type(options).__name__}; pass them as OptimizationPolicy(plan_options="
                f"{{{self.name!r}: {{...}}}})"
            )
        return options

    def require_available(self, context: ProviderContext) -> ProviderAvailability:
        """The probe's answer for this build: the race's (``context.availability``), or a
        probe now for a ``build`` called outside a race. Raises
        :class:`~dlopt.errors.ProviderBuildError` with the probe's reason when the plan
        cannot be built here."""
        availability = context.availability or self.probe(context)
        if not availability.available:
            raise ProviderBuildError(f"{self.name} is unavailable: {availability.reason}")
        return availability

    def refuse_training_mode(self, model: torch.nn.Module) -> None:
        """Raise :class:`~dlopt.errors.ProviderBuildError` when a module of ``model`` that
        computes differently in training mode (dropout, batch or instance normalization)
        is in it.

        For plans that trace, export or convert the model into a graph of their own: that
        graph computes as in eval mode, so it would not reproduce the model as it is. A
        plan that calls the model itself needs no such check.
        """
        import torch

        sensitive = (
            torch.nn.modules.dropout._DropoutNd,
            torch.nn.modules.batchnorm._BatchNorm,
            torch.nn.modules.instancenorm._InstanceNorm,
        )
        training = [
            name or "the model"
            for name, module in model.named_modules()
            if module.training and isinstance(module, sensitive)
        ]
        if training:
            raise ProviderBuildError(
                f"{self.name}: {', '.join(training[:3])} is in training mode (dropout or "
                "batch statistics); the plan computes as in eval mode, so it would differ "
                "from the model. Call model.eval() first"
            )

    def cases_with_reference(
        self, model: torch.nn.Module, context: ProviderContext
    ) -> tuple[PreparedCase, ...]:
        """The cases a build traces, exports, compiles or calibrates for
        (``context.build_cases()``), each with its eager outputs as ``reference``, for a
        build that takes the output structure and shapes from them.

        A race hands its prepared cases over with their reference; a ``build`` called
        directly with only a workload runs ``model`` once per case here (under
        ``torch.no_grad()``). Raises :class:`~dlopt.errors.ProviderBuildError` when the
        context has neither.
        """
        cases = context.build_cases()
        if not cases:
            raise ProviderBuildError(
                f"{self.name} builds the model for the inputs it will be called with; build "
                "needs context.cases (a race hands them over) or a workload"
            )
        import torch

        prepared = []
        for case in cases:
            if not isinstance(case, PreparedCase):
                with torch.no_grad():
                    outputs = model(*case.args, **case.kwargs)
                case = PreparedCase(case.name, case.args, case.kwargs, outputs, case.weight)
            prepared.append(case)
        return tuple(prepared)


#: Names this module had before the glossary gave each concept one word.
__getattr__ = retired_names(
    __name__, {"ExecutionProvider": "ProviderProtocol", "Comeback": "Reload"}, globals()
)
