"""The plans: ``fx``, ``fx_inductor`` and the ``inductor`` variants.

Every plan works on a deep copy of the caller's model. The fx rewrites fold in float64
and keep fp32 results, and Inductor computes in the model's dtype (results differ by
reduction order and fused kernels, within fp32 tolerances), except in the bf16 plans,
which run the model under bf16 autocast inside the compiled region and declare bf16.

Builds trace, check and mark dynamic dims on ``context.cases``: the inputs as the race
prepared them, on the device plans are called with.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from attrs import field, frozen

from dlopt.plugin import (
    EAGER_SERVING,
    BuiltPlan,
    PlanNotApplicable,
    Precision,
    Provider,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Reload,
    Role,
)
from dlopt_fx import probes
from dlopt_fx.compiled import (
    CHANNELS_LAST_BY_RANK,
    COMPILED_SERVING,
    channels_last_rank,
    equals_reference_bit_for_bit,
    with_autocast_and_layout,
)
from dlopt_fx.rewrites import (
    REWRITES,
    FxTraceError,
    constant_arguments,
    record_output_ranks,
    simplify,
    trace,
)

#: ``torch.compile`` modes a plan may use. The modes with CUDA graphs ("reduce-overhead",
#: "max-autotune") are not offered: a CUDA-graph plan's outputs are overwritten by its
#: next call, so a caller that keeps one output while making another call reads garbage.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
#: How a compiled plan treats input shapes (see :func:`dlopt_fx.compiled.varying_dims`).
DYNAMIC_POLICIES = ("auto", "static", "automatic")
#: The autocast dtypes a compiled plan may run under, and the precision each declares.
AUTOCAST_PRECISION: dict[torch.dtype | None, Precision] = {
    None: Precision.FP32,
    torch.bfloat16: Precision.BF16,
}


def build_fx_graph(
    model: torch.nn.Module, context: ProviderContext, rewrites: tuple[str, ...], plan: str
) -> tuple[torch.fx.GraphModule, dict[str, Any]]:
    """Trace a copy of ``model`` and apply ``rewrites``; returns the graph and evidence.

    The prepared cases (``context.build_cases()``) run once through the traced graph: that
    records the activation ranks the BatchNorm1d folds need, and proves the trace runs on
    the inputs plans are called with.
    """
    cases = [(c.args, c.kwargs) for c in context.build_cases()]
    specialized = constant_arguments(model, cases) if cases else {}
    try:
        gm = trace(model, specialized)
    except FxTraceError as exc:
        raise ProviderBuildError(f"{plan}: {exc}") from exc
    ranks = None
    if cases:
        try:
            ranks = record_output_ranks(gm, cases)
        except Exception as exc:
            raise ProviderBuildError(
                f"{plan}: the fx-traced graph fails on the workload ({type(exc).__name__}: "
                f"{exc}); the model's forward probably depends on Python state that "
                "symbolic tracing froze, so this plan cannot serve it"
            ) from exc
    report = simplify(gm, ranks=ranks, rewrites=rewrites)
    return gm, {**report.as_metadata(), "traced_as_constants": sorted(specialized)}


def _one_of(name: str, value: str | None, choices: tuple[str, ...], why: str = "") -> None:
    if value is not None and value not in choices:
        raise ValueError(
            f"{name} must be one of {', '.join(map(repr, choices))} or None, got {value!r}{why}"
        )


@frozen
class InductorOptions:
    """What a user may set per Inductor plan (``OptimizationPolicy(plan_options=...)``).

    ``None`` keeps the plan's own choice, so each variant stays what its name says
    unless an option refines it.
    """

    mode: str | None = field(
        default=None,
        metadata={
            "help": "torch.compile mode: 'default' (no autotuning) or "
            "'max-autotune-no-cudagraphs' (benchmark kernel choices while compiling: long "
            "compiles); None keeps the plan's own (autotuning for inductor_max_autotune "
            "only). Modes with CUDA graphs are not offered: their outputs are overwritten "
            "by the next call"
        },
    )
    freezing: bool | None = field(
        default=None,
        metadata={
            "help": "fold the weights into the compiled graph as constants; None keeps the "
            "plan's own choice (on for inductor_freezing, and on CPU with autotuning)"
        },
    )
    dynamic: str | None = field(
        default=None,
        metadata={
            "help": "input shapes: 'auto' marks only the dims that vary across the "
            "workload's cases dynamic, 'static' compiles every shape on its own, "
            "'automatic' leaves it to Dynamo; None keeps the plan's own ('auto')"
        },
    )
    aot_package: bool = field(
        default=True,
        metadata={
            "help": "when this plan is selected with the plan cache on, also save it as an "
            "AOTInductor package (torch.export, compiled ahead of time: about as long as "
            "the plan's own compile), so a cache hit loads it instead of "
            "compiling again; False skips it"
        },
    )

    def __attrs_post_init__(self) -> None:
        _one_of(
            "mode",
            self.mode,
            COMPILE_MODES,
            " ('reduce-overhead' and 'max-autotune' use CUDA graphs, whose outputs the "
            "next call overwrites)"
            if self.mode in ("reduce-overhead", "max-autotune")
            else "",
        )
        _one_of("dynamic", self.dynamic, DYNAMIC_POLICIES)


@frozen
class FxProvider(Provider):
    """``torch.fx`` trace plus fp32-preserving rewrites, run as a plain GraphModule."""

    name: str = "fx"
    rewrites: tuple[str, ...] = REWRITES
    precision: Precision = Precision.FP32
    role = Role.CHALLENGER

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        return probes.probe_fx()

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        gm, evidence = build_fx_graph(model, context, self.rewrites, self.name)
        return BuiltPlan(
            runner=gm,
            precision=self.precision,
            metadata={"plan": self.name, "graph": "fx", **evidence},
            # A GraphModule runs eagerly: any thread, grad mode and shape (checked).
            serving=EAGER_SERVING,
        )


@frozen
class InductorProvider(Provider):
    """``torch.compile`` with TorchInductor, of the model or of its ``fx`` rewrite.

    ``graph``: ``"model"`` compiles a copy of the model, ``"fx"`` the rewritten fx graph.
    ``freezing``: constant-fold the weights into the compiled graph (Inductor's
    ``freezing``, scoped to this plan's compile through ``torch.compile(options=...)``).
    ``max_autotune``: benchmark kernel/GEMM choices while compiling (slow compiles; on
    CPU the C++ GEMM templates need frozen weights, so freezing is switched on with it;
    CUDA graphs stay off because their outputs are overwritten by the next call).
    ``dynamic``: ``"auto"`` marks only the dims that vary across the prepared cases,
    ``"static"`` compiles each shape separately, ``"automatic"`` leaves it to Dynamo.
    These three are the plan's own choices; :class:`InductorOptions` in
    ``context.options`` refine them per race.
    ``min_expected_calls``: when the workload says fewer calls are expected, the probe
    declines the plan (its compile cannot be repaid).
    ``cache_in_plan_dir``: keep Inductor's caches under the plan's artifact directory
    (see :func:`dlopt_fx.compiled.plan_cache_dir`); off by default.
    ``extra_options``: more ``torch._inductor.config`` options, as ``(key, value)`` pairs.
    ``autocast_dtype``: run the model under ``torch.autocast`` in this dtype *inside* the
    compiled region (bf16: offered only where the device computes bf16 natively); the
    plan's precision follows it, and a build whose outputs equal fp32 eager bit for bit is
    rejected (autocast did not reach the model's ops).
    ``channels_last``: the copy's weights and the 4-D/5-D floating inputs in channels-last
    memory format (inputs converted inside the compiled region); a workload without such
    inputs rejects the plan (it would equal the plan without channels-last).
    """

    name: str
    graph: str = "model"
    freezing: bool = False
    max_autotune: bool = False
    dynamic: str = "auto"
    min_expected_calls: int | None = None
    cache_in_plan_dir: bool = False
    rewrites: tuple[str, ...] = REWRITES
    extra_options: tuple[tuple[str, Any], ...] = field(default=())
    autocast_dtype: torch.dtype | None = None
    channels_last: bool = False
    precision: Precision = field()
    role = Role.CHALLENGER
    options_type = InductorOptions
    #: A saved plan is compiled again with torch's compile caches restored (a cache hit
    #: then reuses Inductor's generated code instead of generating it again).
    reloads_by = Reload.REBUILD_WITH_COMPILE_CACHE

    @precision.default
    def _precision_of_autocast(self) -> Precision:
        # An unknown dtype is refused by __attrs_post_init__, which runs after defaults.
        return AUTOCAST_PRECISION.get(self.autocast_dtype, Precision.FP32)

    def __attrs_post_init__(self) -> None:
        if self.autocast_dtype not in AUTOCAST_PRECISION:
            raise ValueError(
                f"{self.name}: autocast_dtype must be one of "
                f"{', '.join(map(str, AUTOCAST_PRECISION))}, got {self.autocast_dtype!r}"
            )

    def options_for(
        self, device_type: str, options: InductorOptions | None = None
    ) -> dict[str, Any]:
        """The Inductor config options this plan compiles with on ``device_type``."""
        options = options or InductorOptions()
        max_autotune = self.max_autotune if options.mode is None else options.mode != "default"
        freezing = self.freezing if options.freezing is None else options.freezing
        compile_options: dict[str, Any] = {}
        if max_autotune:
            compile_options["max_autotune"] = True
            if device_type == "cpu":
                # The C++ GEMM templates need frozen weights, unless the user said no.
                freezing = freezing or options.freezing is None
            else:
                compile_options["coordinate_descent_tuning"] = True
        if freezing:
            compile_options["freezing"] = True
        compile_options.update(dict(self.extra_options))
        return compile_options

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        availability = probes.probe_inductor(context.target.device_type)
        if availability.available and self.autocast_dtype is torch.bfloat16:
            return probes.probe_native_bf16(context.target, availability)
        return availability

    def probe(self, context: ProviderContext) -> ProviderAvailability:
        # The device check is cached by the base class; the workload check is not (the
        # same plan is probed for workloads that expect different call counts).
        availability = super().probe(context)
        workload = context.workload
        if (
            availability.available
            and self.min_expected_calls is not None
            and workload is not None
            and workload.expected_calls is not None
            and workload.expected_calls < self.min_expected_calls
        ):
            return ProviderAvailability.unavailable(
                f"the workload expects {workload.expected_calls} calls, fewer than the "
                f"{self.min_expected_calls} this plan needs to repay its compile time",
                "raise WorkloadProfile.expected_calls if the deployment serves more calls",
                sdk_versions=availability.sdk_versions,
                details=availability.details,
            )
        return availability

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        options: InductorOptions = context.options or InductorOptions()
        device_type = context.target.device_type
        metadata: dict[str, Any] = {"plan": self.name, "graph": self.graph}
        module: torch.nn.Module
        if self.graph == "fx":
            module, evidence = build_fx_graph(model, context, self.rewrites, self.name)
            metadata.update(evidence)
        elif self.graph == "model":
            try:
                module = copy.deepcopy(model)
            except Exception as exc:
                raise ProviderBuildError(
                    f"{self.name}: the model cannot be deep-copied ({type(exc).__name__}: "
                    f"{exc}); dlopt compiles a copy so the caller's model stays untouched"
                ) from exc
        else:
            raise ProviderBuildError(
                f"{self.name}: graph must be 'model' or 'fx', not {self.graph!r}"
            )
        cases = context.build_cases()
        if self.channels_last:
            rank = channels_last_rank(cases)
            if rank is None and cases:
                raise PlanNotApplicable(
                    f"{self.name}: channels-last needs 4-D or 5-D floating inputs (images, "
                    "volumes) and this workload has none, so the plan would equal the same "
                    "plan without channels-last"
                )
            # to(memory_format=...) converts in place: ``module`` is already a private copy.
            module = module.to(memory_format=CHANNELS_LAST_BY_RANK[rank or 4])  # type: ignore[call-overload]
            metadata["channels_last"] = True
        if self.autocast_dtype is not None:
            metadata["autocast_dtype"] = str(self.autocast_dtype).removeprefix("torch.")
        entry = with_autocast_and_layout(
            module,
            device_type=device_type,
            autocast_dtype=self.autocast_dtype,
            channels_last=self.channels_last,
        )
        cache_dir = None
        if self.cache_in_plan_dir:
            from dlopt_fx.compiled import plan_cache_dir

            cache_dir = plan_cache_dir(context, self.name)
        from dlopt_fx.compiled import compile_lazily

        try:
            runner, compile_metadata = compile_lazily(
                entry,
                tag=self.name,
                options=self.options_for(device_type, options),
                cases=cases,
                dynamic_policy=options.dynamic or self.dynamic,
                cache_dir=cache_dir,
            )
        except Exception as exc:
            raise ProviderBuildError(
                f"{self.name}: torch.compile rejected the setup: {exc}"
            ) from exc
        metadata.update(compile_metadata)
        runner.source = (module, entry)
        if self.autocast_dtype is not None:
            try:
                metadata["reduced_precision_check"] = self._check_reduced_precision(
                    runner, context, metadata
                )
            except BaseException:
                runner.close()
                raise
        return BuiltPlan(
            runner=runner,
            precision=self.precision,
            # Autocast returns low-precision leaves where the last op ran in it.
            output_dtype=self.autocast_dtype,
            metadata=metadata,
            on_close=runner.close,
            serving=COMPILED_SERVING,
        )

    def save_program(
        self, plan: BuiltPlan, directory: Path, context: ProviderContext
    ) -> dict[str, Any] | None:
        """Save ``plan`` as an AOTInductor package in ``directory`` (see
        :mod:`dlopt_fx.package`); its metadata, or ``None`` when the options say not to.
        Raises with the reason when the plan cannot be packaged."""
        options: InductorOptions = context.options or InductorOptions()
        if not options.aot_package:
            return None
        from dlopt_fx.package import save_plan_package

        inductor_options = self.options_for(context.target.device_type, options)
        return save_plan_package(
            self.name, plan.runner, context.build_cases(), inductor_options, directory
        )

    def load_program(
        self, directory: Path, metadata: dict[str, Any], context: ProviderContext
    ) -> BuiltPlan:
        """The plan served from the package :meth:`save_program` wrote: no model, no
        compile."""
        from dlopt_fx.package import load_package_plan

        return load_package_plan(
            directory,
            metadata,
            context,
            plan=self.name,
            precision=self.precision,
            output_dtype=self.autocast_dtype,
        )

    def _check_reduced_precision(
        self, runner: Any, context: ProviderContext, metadata: dict[str, Any]
    ) -> str:
        """Call the plan on the first prepared case (this compiles it, so the compile
        lands in setup rather than the first call) and refuse it if its outputs equal the
        fp32 reference bit for bit: autocast did not reach the model's ops, and the plan
        would race as bf16 while computing what the fp32 plans compute."""
        if not context.cases:
            return "not checked: no reference outputs (build called outside a race)"
        case = context.cases[0]
        dtype = self.precision.value
        try:
            # In the race's calling context, on its kind of inputs: the guards then match
            # and this compile serves the race.
            args, kwargs = context.call_inputs(case)
            with context.calling_context():
                outputs = runner(*args, **kwargs)
        except Exception as exc:
            raise ProviderBuildError(
                f"{self.name}: the compiled plan fails on case {case.name!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        metadata["compiled_at_build_for_case"] = case.name
        same = equals_reference_bit_for_bit(outputs, case.reference)
        if same is None:
            return f"not checked: case {case.name!r} has no floating outputs to compare"
        if same:
            raise ProviderBuildError(
                f"{self.name}: {dtype} was not applied: outputs equal fp32 eager bit for bit "
                f"(case {case.name!r}); autocast did not reach this model's ops inside the "
                f"compiled region, so this plan would race as {dtype} while computing in "
                "fp32. The fp32 Inductor plans cover this model"
            )
        return f"outputs differ from fp32 eager on case {case.name!r}: {dtype} applied"


def default_providers() -> list[FxProvider | InductorProvider]:
    """The plans this distribution registers; probes and the race pick among them."""
    bf16 = torch.bfloat16
    return [
        FxProvider(),
        InductorProvider("fx_inductor", graph="fx"),
        InductorProvider("inductor"),
        InductorProvider("inductor_freezing", freezing=True),
        InductorProvider("inductor_channels_last_freezing", freezing=True, channels_last=True),
        # bf16 autocast inside the compiled region, offered where bf16 is native. With
        # channels-last and freezing it is the fastest conv-net plan on AMX/AVX512-BF16 CPUs.
        InductorProvider("inductor_bf16", autocast_dtype=bf16),
        InductorProvider("inductor_bf16_freezing", autocast_dtype=bf16, freezing=True),
        InductorProvider("inductor_bf16_channels_last", autocast_dtype=bf16, channels_last=True),
        InductorProvider(
            "inductor_bf16_channels_last_freezing",
            autocast_dtype=bf16,
            channels_last=True,
            freezing=True,
        ),
        # Autotuning compiles take minutes on CPU: only worth it for long deployments.
        InductorProvider("inductor_max_autotune", max_autotune=True, min_expected_calls=100_000),
    ]
