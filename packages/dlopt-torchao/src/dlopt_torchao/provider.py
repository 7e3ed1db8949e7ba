"""TorchAO quantization plans: one provider instance per scheme.

Probe layers: metadata (torchao installed, >= 0.10, paired with this torch per torchao's
published table; no import) -> import (torchao imports; which of its C++ extensions
loaded) -> device (the scheme's kernels exist for this device and GPU generation).

Build: deep-copy the model, ``torchao.quantization.quantize_(copy, <Config>)``, run the
copy. The caller's model is never touched. In a race, build trusts the probe's answer
(``context.availability``) and only resolves the scheme's config; quantizing weights needs
no inputs, so the prepared cases are left to the race's validation.
"""

from __future__ import annotations

import copy
import logging
import sys
from collections import Counter
from typing import Any

import torch
from attrs import field, frozen

from dlopt.plugin import (
    BuiltPlan,
    Concurrency,
    PlanNotApplicable,
    Precision,
    Provider,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Quantization,
    Reload,
    Role,
    ServingTraits,
    check_distribution,
    cpu_info,
    distribution_version,
    map_tensors,
    try_import,
)
from dlopt_torchao.compat import check_torch_pairing, recommended_torchao
from dlopt_torchao.cpu import int8_dot_flags
from dlopt_torchao.schemes import (
    INT4_GROUP_SIZES,
    Recipe,
    Scheme,
    Unavailable,
    choose_group_size,
    resolve_recipe,
)

log = logging.getLogger(__name__)

MIN_TORCHAO = ">=0.10"
DISTRIBUTION = "torchao"


def install_hint() -> str:
    """The pip command that installs a torchao paired with the installed torch."""
    requirement = recommended_torchao(torch.__version__) or f"torchao{MIN_TORCHAO}"
    return f'pip install "{requirement}" (or reinstall "dlopt-torchao", which depends on it)'


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


#: What the first import in this process said about torchao's C++ extensions. torchao
#: only logs it while importing, so it is kept for later probes.
_EXTENSION_REPORT: dict[str, str] = {}


def import_torchao() -> tuple[Any | None, str | None, dict[str, str]]:
    """Import layer: ``(torchao.quantization, None, extension report)`` or ``(None, error, {})``."""
    # A ``None`` entry (an import blocked on purpose) counts as imported: nothing to capture.
    first_import = "torchao" not in sys.modules
    collector = _Collect()
    ao_logger = logging.getLogger("torchao")
    if first_import:
        ao_logger.addHandler(collector)
    try:
        # The top-level package first: its error is the one that names the cause.
        quantization, error = try_import("torchao")
        if quantization is not None:
            quantization, error = try_import("torchao.quantization")
    finally:
        ao_logger.removeHandler(collector)
    if quantization is None:
        return None, error, {}
    if first_import:
        _EXTENSION_REPORT.clear()
        _EXTENSION_REPORT.update(_summarize_extensions(sys.modules["torchao"], collector.messages))
    return (
        quantization,
        None,
        dict(_EXTENSION_REPORT)
        or {"cpp_extensions": "not inspected (torchao was imported before the first probe)"},
    )


def _summarize_extensions(torchao: Any, messages: list[str]) -> dict[str, str]:
    skip_reason = getattr(torchao, "_skip_reason", None)
    if getattr(torchao, "skip_loading_so_files", False) or skip_reason:
        return {"cpp_extensions": f"skipped: {skip_reason or 'torch version mismatch'}"}
    # "Failed to load /.../_C_mxfp8.cpython-310-x86_64-linux-gnu.so: <why>" -> "_C_mxfp8"
    failed = [
        m.split(":")[0].rsplit("/", 1)[-1].split(".")[0]
        for m in messages
        if m.startswith("Failed to load")
    ]
    if failed:
        return {
            "cpp_extensions": "some failed to load: "
            + ", ".join(failed)
            + " (their kernels are unavailable; the schemes offered here do not use them)"
        }
    return {"cpp_extensions": "loaded"}


def _is_quantized(weight: object) -> bool:
    # quantize_ swaps a Linear's weight for a tensor subclass (Int8Tensor, Int4OpaqueTensor...).
    return isinstance(weight, torch.Tensor) and type(weight) not in (
        torch.Tensor,
        torch.nn.Parameter,
    )


#: Layers that carry a model's multiply-accumulate work: the denominator of the fraction a
#: scheme quantized, whether or not torchao handles their kind (it quantizes Linear only).
_COMPUTE_LAYERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.Linear,
    torch.nn.Bilinear,
    torch.nn.modules.conv._ConvNd,
    torch.nn.RNNBase,
    torch.nn.MultiheadAttention,  # its own input projection (out_proj is a Linear)
)


def _kind(module: torch.nn.Module) -> str:
    """The torch.nn class a layer is (a user's subclass of Linear counts as Linear)."""
    for cls in type(module).__mro__:
        if cls.__module__.startswith("torch.nn.") and not cls.__name__.startswith("_"):
            return cls.__name__
    return type(module).__name__


def compute_layers(model: torch.nn.Module) -> dict[str, str]:
    """``{qualified name: layer kind}`` of every compute layer of ``model``."""
    return {
        name: _kind(module)
        for name, module in model.named_modules()
        if isinstance(module, _COMPUTE_LAYERS)
    }


def layer_coverage(layers: dict[str, str], quantized: list[str]) -> dict[str, Any]:
    """The plan metadata that says how much of the model a scheme quantized."""
    done = set(quantized)
    return {
        "quantized_layers": len(done),
        "quantizable_layers": len(layers),
        "quantized_fraction": round(len(done) / len(layers), 4) if layers else 0.0,
        "quantized_layer_types": dict(sorted(Counter(layers[n] for n in done).items())),
        "quantizable_layer_types": dict(sorted(Counter(layers.values()).items())),
        "quantized_layer_names": [n for n in layers if n in done][:50],
    }


def refuse_unquantized(plan: str, layers: dict[str, str], why: str) -> ProviderBuildError:
    """The one rule for every scheme: a plan that quantizes nothing equals eager."""
    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(Counter(layers.values()).items()))
    return ProviderBuildError(
        f"{plan}: quantized 0 of {len(layers)} compute layers ({kinds or 'none'}): {why}; "
        "this plan would compute what eager computes, so it is not raced as a quantized "
        "plan. Exclude it for this model"
    )


def _only(eligible: set[str]) -> Any:
    def filter_fn(module: torch.nn.Module, fqn: str) -> bool:
        # A weight shared by two Linear modules is quantized once, through the first.
        return fqn in eligible and not _is_quantized(getattr(module, "weight", None))

    return filter_fn


def probe_torchao(
    details: dict[str, str],
) -> tuple[Any | None, ProviderAvailability | None, dict[str, str]]:
    """The probe layers every torchao plan shares: metadata (installed, >= 0.10, paired
    with this torch; no import), then import. ``(torchao.quantization, None, details)``
    when usable, else ``(None, unavailable availability, details)``."""
    versions: dict[str, str | None] = {"torch": torch.__version__, DISTRIBUTION: None}

    def unavailable(reason: str, hint: str | None) -> ProviderAvailability:
        return ProviderAvailability.unavailable(
            reason, hint, sdk_versions=versions, details=details
        )

    version, problem = check_distribution(DISTRIBUTION, MIN_TORCHAO, install_hint())
    versions[DISTRIBUTION] = version
    if problem is not None:
        return None, unavailable(problem, install_hint()), details
    assert version is not None
    verdict = check_torch_pairing(version, torch.__version__)
    details["torch_pairing"] = verdict.status.value
    if not verdict.usable:
        return None, unavailable(verdict.message, verdict.fix), details
    if verdict.status.value != "supported":
        details["torch_pairing_note"] = verdict.message

    quantization, error, extensions = import_torchao()
    details.update(extensions)
    if quantization is None:
        reason = f"torchao {version} is installed but does not import: {error}"
        fix = f'pip install --force-reinstall "torchao=={version}"'
        return (
            None,
            unavailable(reason, fix + (f" or {verdict.fix}" if verdict.fix else "")),
            details,
        )
    return quantization, None, details


INDUCTOR_HINT = (
    'pip install "dlopt-torchao[inductor]" (brings dlopt-fx, whose TorchInductor '
    "plumbing the compiled plans use)"
)


def probe_inductor(device_type: str) -> ProviderAvailability:
    """The compiled plans' layer: dlopt-fx installed, and its TorchInductor probe (C++
    compiler with OpenMP on CPU; Triton and a capable GPU on CUDA)."""
    probes, error = try_import("dlopt_fx.probes")
    if probes is None:
        return ProviderAvailability.unavailable(
            f"the compiled torchao plans compile through dlopt-fx, which does not import: {error}",
            INDUCTOR_HINT,
        )
    availability: ProviderAvailability = probes.probe_inductor(device_type)
    return availability


@frozen
class TorchAOOptions:
    """What a user may set for every torchao plan (``OptimizationPolicy(plan_options=...)``)."""

    exclude_layers: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "qualified names of torch.nn.Linear layers (as model.named_modules() "
            "names them, e.g. 'head' or 'blocks.0.proj') to keep in full precision, such as "
            "a classifier head that quantizes badly"
        },
    )
    offer_everywhere: bool = field(
        default=False,
        metadata={
            "help": "race this plan also where dlopt does not offer it by default because "
            "another variant is the fast path or its kernel is far slower than fp32 (eager "
            "torchao on CPU, eager int8 dynamic and fp8 on CUDA, int4 weight-only on CPU, "
            "int8 dynamic on a CPU without VNNI or AMX-INT8; "
            "the probe says why), e.g. to measure it"
        },
    )


@frozen
class TorchAOInt4Options(TorchAOOptions):
    """The int4 weight-only plan's options: those of every scheme plus the group size."""

    group_size: int | None = field(
        default=None,
        metadata={
            "help": "int4 group size, one of 32, 64, 128 (smaller: more scales, closer to "
            "fp, a little slower); a layer whose in_features it does not divide stays in "
            "full precision. None picks the largest size that quantizes the most layers"
        },
    )

    def __attrs_post_init__(self) -> None:
        if self.group_size is not None and self.group_size not in INT4_GROUP_SIZES:
            sizes = ", ".join(map(str, sorted(INT4_GROUP_SIZES)))
            raise ValueError(
                f"group_size must be one of {sizes} or None (torchao's int4 kernels take "
                f"these), got {self.group_size!r}"
            )


@frozen
class TorchAOProvider(Provider):
    """One torchao quantization scheme as a dlopt plan (``torchao_<scheme>``).

    ``options_type`` follows the scheme: :class:`TorchAOInt4Options` for int4 weight-only
    (it adds the group size), :class:`TorchAOOptions` for the others.
    """

    scheme: Scheme = field(converter=Scheme)
    compiled: bool = False
    name: str = field()
    precision: Precision = field()
    options_type: type[TorchAOOptions] = field(init=False, repr=False, eq=False)
    #: The scheme's (weight-only, dynamic or static activations).
    quantization: Quantization = field(init=False, repr=False, eq=False)
    role = Role.CHALLENGER

    @property
    def reloads_by(self) -> Reload:
        """A saved plan is quantized again from the model; a compiled one with torch's
        compile caches restored."""
        return Reload.REBUILD_WITH_COMPILE_CACHE if self.compiled else Reload.REBUILD

    @name.default
    def _default_name(self) -> str:
        return f"torchao_{self.scheme.value}" + ("_inductor" if self.compiled else "")

    @precision.default
    def _default_precision(self) -> Precision:
        return self.scheme.precision

    @quantization.default
    def _default_quantization(self) -> Quantization:
        return self.scheme.quantization

    @options_type.default
    def _default_options_type(self) -> type[TorchAOOptions]:
        return TorchAOInt4Options if self.scheme is Scheme.INT4_WEIGHT_ONLY else TorchAOOptions

    # -- probe -----------------------------------------------------------------
    def _resolve(
        self, context: ProviderContext
    ) -> tuple[Recipe | None, ProviderAvailability | None, Any, dict[str, str]]:
        """Run every probe layer: ``(recipe, None, quantization, details)`` when usable,
        else ``(None, unavailable availability, None, details)``."""
        quantization, refusal, details = probe_torchao({"scheme": self.scheme.value})
        if refusal is not None:
            return None, refusal, None, details
        versions = {"torch": torch.__version__, DISTRIBUTION: _torchao_version()}
        version = versions[DISTRIBUTION] or "?"

        def unavailable(reason: str, hint: str | None) -> ProviderAvailability:
            return ProviderAvailability.unavailable(
                reason, hint, sdk_versions=versions, details=details
            )

        recipe = resolve_recipe(self.scheme, context.target, quantization, version)
        if isinstance(recipe, Unavailable):
            return None, unavailable(recipe.reason, recipe.install_hint), None, details
        details["layout"] = recipe.layout
        if self.compiled:
            inductor = probe_inductor(context.target.device_type)
            details.update({k: str(v) for k, v in inductor.details.items()})
            if not inductor.available:
                reason = f"{self.name} compiles with TorchInductor, but {inductor.reason}"
                return None, unavailable(reason, inductor.install_hint), None, details
        return recipe, None, quantization, details

    def _resolve_after_probe(
        self, context: ProviderContext, availability: ProviderAvailability
    ) -> tuple[Recipe | None, ProviderAvailability | None, Any, dict[str, str]]:
        """What :meth:`_resolve` returns, for a build after the race's probe said yes:
        the metadata and pairing layers are not checked again, only the scheme's recipe
        is resolved (it holds the config class, which a probe answer cannot carry)."""
        details = {k: str(v) for k, v in availability.details.items()}
        version = availability.sdk_versions.get(DISTRIBUTION) or _torchao_version() or "?"
        quantization, error = try_import("torchao.quantization")
        if quantization is None:
            reason = f"torchao {version} no longer imports: {error}"
            return None, ProviderAvailability.unavailable(reason), None, details
        recipe = resolve_recipe(self.scheme, context.target, quantization, version)
        if isinstance(recipe, Unavailable):
            return None, ProviderAvailability.unavailable(recipe.reason), None, details
        return recipe, None, quantization, details

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        """Layered availability; never raises."""
        try:
            _, refusal, _, details = self._resolve(context)
        except Exception as exc:  # a probe must never take the host down
            return ProviderAvailability.unavailable(
                f"probing torchao failed: {type(exc).__name__}: {exc}", install_hint()
            )
        if refusal is not None:
            return refusal
        versions = {"torch": torch.__version__, DISTRIBUTION: _torchao_version()}
        options: TorchAOOptions = context.options or self.options_type()
        why_not = not_offered_by_default(self.scheme, self.compiled, context.target.device_type)
        if why_not is not None and not options.offer_everywhere:
            return ProviderAvailability.unavailable(
                f"not offered by default: {why_not}",
                f"to race it anyway: --option {self.name}.offer_everywhere=true",
                sdk_versions=versions,
                details=details,
            )
        return ProviderAvailability.ok(sdk_versions=versions, details=details)

    # -- build -----------------------------------------------------------------
    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        """Quantize a deep copy of ``model`` with the scheme's torchao config."""
        options: TorchAOOptions = context.options or self.options_type()
        availability = context.availability
        if availability is None:  # a direct call, outside a race: probe now
            recipe, refusal, quantization, details = self._resolve(context)
        elif not availability.available:
            recipe, refusal, quantization, details = None, availability, None, {}
        else:
            recipe, refusal, quantization, details = self._resolve_after_probe(
                context, availability
            )
        if refusal is not None or recipe is None:
            reason = refusal.reason if refusal is not None else "unknown"
            raise ProviderBuildError(f"{self.name} cannot build here: {reason}")

        device = context.target.torch_device()
        qmodel = copy.deepcopy(model).eval()
        qmodel = (
            qmodel.to(device=device, dtype=recipe.model_dtype)
            if recipe.model_dtype
            else qmodel.to(device)
        )

        layers = compute_layers(qmodel)
        linears = {
            name: module
            for name, module in qmodel.named_modules()
            if isinstance(module, torch.nn.Linear)
        }
        if not linears:
            raise refuse_unquantized(
                self.name,
                layers,
                "torchao quantizes torch.nn.Linear weights only and the model has no "
                "torch.nn.Linear layers",
            )
        excluded = set(options.exclude_layers)
        unknown = sorted(excluded - set(linears))
        if unknown:
            raise ProviderBuildError(
                f"{self.name}: option exclude_layers names {', '.join(map(repr, unknown))}, "
                "which this model has no torch.nn.Linear layer called; its Linear layers: "
                + ", ".join(map(repr, list(linears)[:20]))
                + (" ..." if len(linears) > 20 else "")
            )
        group_size: int | None = None
        if recipe.grouped:
            group_size = getattr(options, "group_size", None)
            if group_size is None:
                kept = [m for n, m in linears.items() if n not in excluded]
                group_size, _ = choose_group_size(recipe, kept)
        problems = {
            n: "excluded by the exclude_layers option"
            if n in excluded
            else "attention output projection (torchao leaves it)"
            if isinstance(m, torch.nn.modules.linear.NonDynamicallyQuantizableLinear)
            else recipe.layer_problem(m, group_size)
            for n, m in linears.items()
        }
        eligible = {n for n, problem in problems.items() if problem is None}
        if not eligible:
            first = next(iter(problems.items()))
            raise refuse_unquantized(
                self.name,
                layers,
                f"no Linear layer fits {recipe.layout} (e.g. {first[0]!r}: {first[1]})",
            )
        if self.compiled and self.scheme is Scheme.INT8_DYNAMIC and device.type == "cuda":
            too_few = int_mm_row_problem(qmodel, eligible, context.build_cases())
            if too_few is not None:
                raise PlanNotApplicable(f"{self.name}: {too_few}")
        config = recipe.make_config(group_size)
        try:
            with torch.no_grad():
                quantization.quantize_(qmodel, config, filter_fn=_only(eligible))
        except Exception as exc:
            raise ProviderBuildError(
                f"{self.name}: torchao.quantization.quantize_ with {type(config).__name__} "
                f"failed: {type(exc).__name__}: {exc}"
            ) from exc

        modules = dict(qmodel.named_modules())
        # Counted on the built copy: a layer is quantized when its weight became a
        # torchao tensor subclass, whatever was asked for.
        quantized = [n for n in layers if _is_quantized(getattr(modules.get(n), "weight", None))]
        if not quantized:
            raise refuse_unquantized(
                self.name,
                layers,
                f"{type(config).__name__} left all {len(eligible)} eligible Linear layers "
                "unquantized",
            )
        skipped = {
            n: problems[n] or "left unquantized by torchao" for n in linears if n not in quantized
        }
        coverage = layer_coverage(layers, quantized)
        if coverage["quantized_fraction"] < 1.0:
            log.info(
                "%s: quantized %d of %d compute layers; the others stay unquantized",
                self.name,
                coverage["quantized_layers"],
                coverage["quantizable_layers"],
            )

        cast_dtype = recipe.model_dtype

        def _cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(cast_dtype) if t.is_floating_point() else t

        def runner(*args: Any, **kwargs: Any) -> Any:
            if cast_dtype is not None:
                args, kwargs = map_tensors(_cast, (args, kwargs))
            return qmodel(*args, **kwargs)

        metadata: dict[str, Any] = {
            "scheme": self.scheme.value,
            "config": type(config).__name__,
            "layout": recipe.layout,
            "device": str(device),
            "torchao_version": _torchao_version(),
            "torch_pairing": details.get("torch_pairing"),
            "cpp_extensions": details.get("cpp_extensions"),
            "group_size": group_size,
            "model_dtype": str(cast_dtype).replace("torch.", "") if cast_dtype else None,
            **coverage,
            "eligible_linear_layers": len(eligible),
            "skipped_linear_layers": dict(list(skipped.items())[:50]),
            "skipped_linear_layer_count": len(skipped),
        }
        if not self.compiled:
            return BuiltPlan(
                runner=runner,
                precision=self.precision,
                output_dtype=cast_dtype,
                metadata=metadata,
                # Eager torch with quantized weights: any thread, grad mode and shape
                # (checked), but no gradients through the quantized layers.
                serving=ServingTraits(
                    concurrency=Concurrency.CONCURRENT, any_grad_mode=True, dynamic_shapes=True
                ),
            )
        from dlopt_fx.compiled import COMPILED_SERVING, compile_lazily

        compiled, compile_metadata = compile_lazily(
            runner,
            tag=self.name,
            options=compile_options(device.type),
            cases=context.build_cases(),
        )
        metadata.update(compile_metadata)
        return BuiltPlan(
            runner=compiled,
            precision=self.precision,
            output_dtype=cast_dtype,
            metadata=metadata,
            on_close=compiled.close,
            serving=COMPILED_SERVING,
        )


#: ``torch._int_mm``, which Inductor lowers int8 dynamic matmuls to on CUDA, refuses a
#: matrix of this many rows or fewer ("self.size(0) needs to be greater than 16").
INT_MM_MAX_REFUSED_ROWS = 16


def int_mm_row_problem(model: torch.nn.Module, layers: set[str], cases: Any) -> str | None:
    """Why the compiled int8 dynamic plan cannot serve these cases on CUDA, or ``None``.

    Runs ``model`` (unquantized) once per case and counts the rows each Linear in
    ``layers`` multiplies (every dimension of its input but the last); a layer that sees
    :data:`INT_MM_MAX_REFUSED_ROWS` rows or fewer in any case is named with the case.
    """
    modules = dict(model.named_modules())
    fewest: dict[str, tuple[int, str]] = {}
    current = [""]
    hooks = []

    def count(name: str) -> Any:
        def hook(_module: torch.nn.Module, inputs: tuple[Any, ...]) -> None:
            if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() >= 1:
                rows = inputs[0].numel() // max(1, inputs[0].shape[-1])
                if name not in fewest or rows < fewest[name][0]:
                    fewest[name] = (rows, current[0])

        return hook

    for name in sorted(layers):
        hooks.append(modules[name].register_forward_pre_hook(count(name)))
    try:
        with torch.inference_mode():
            for case in cases:
                current[0] = case.name
                model(*case.args, **case.kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    small = {n: v for n, v in fewest.items() if v[0] <= INT_MM_MAX_REFUSED_ROWS}
    if not small:
        return None
    name, (rows, case) = min(small.items(), key=lambda item: item[1][0])
    return (
        f"on CUDA its int8 matmuls run torch._int_mm, which needs more than "
        f"{INT_MM_MAX_REFUSED_ROWS} rows, and Linear {name!r} sees {rows} row(s) in case "
        f"{case!r} ({len(small)} layer(s) see {INT_MM_MAX_REFUSED_ROWS} or fewer); race "
        f"batches of more than {INT_MM_MAX_REFUSED_ROWS} rows, or the eager "
        "torchao_int8_dynamic plan, which falls back for small batches"
    )


def _torchao_version() -> str | None:
    return distribution_version(DISTRIBUTION)


def compile_options(device_type: str) -> dict[str, Any]:
    """The Inductor settings torchao recommends for quantized models
    (``torchao.quantization.utils.recommended_inductor_config_setter``), applied to one
    plan's compiles instead of the whole process."""
    options: dict[str, Any] = {"force_fuse_int_mm_with_mul": True}
    if device_type == "cuda":
        options.update(coordinate_descent_tuning=True, coordinate_descent_check_all_directions=True)
    return options


def not_offered_by_default(
    scheme: Scheme, compiled: bool, device_type: str, int8_dot: bool | None = None
) -> str | None:
    """Why a plan is left out of a race on ``device_type`` unless its ``offer_everywhere``
    option asks for it; ``None`` where it is offered. The eager variants stay where they
    are the fast path (weight-only schemes on CUDA). ``int8_dot``: whether the CPU has
    int8 dot-product instructions (``None``: read this CPU's flags)."""
    if scheme is Scheme.INT4_WEIGHT_ONLY and device_type == "cpu":
        return (
            "int4 weight-only on CPU runs torch's tinygemm kernel "
            "(_weight_int4pack_mm_for_cpu), which unpacks the int4 weights again for every "
            "few rows and has no oneDNN/AMX path: built for LLM decoding at a few rows per "
            "call, it ran 100x slower than fp32 (0.85 s a call) on a transformer encoder at "
            "512 rows, and torchao 0.18 has no faster CPU path for float activations"
        )
    if compiled and scheme is Scheme.INT8_DYNAMIC and device_type == "cpu":
        if int8_dot is None:
            int8_dot = bool(int8_dot_flags())
        if not int8_dot:
            return (
                "int8 dynamic quantization multiplies int8 activations by int8 weights, and "
                f"this CPU ({cpu_info().model}) has no int8 dot-product instructions (VNNI "
                "or AMX-INT8) to run them on: compiled, it was 18x slower than eager fp32 "
                "on an MLP, 17x on a transformer encoder layer and 25x on BERT on an "
                "AVX2-only CPU, and no faster than Inductor fp32 on conv nets (it quantizes "
                "Linear layers only)"
            )
    if compiled:
        return None
    if device_type == "cpu":
        return (
            "eager torchao on CPU quantizes and dequantizes around every matmul as separate "
            "ops and was slower than fp32 on every workload measured; the compiled variant "
            f"torchao_{scheme.value}_inductor fuses them"
        )
    if scheme in (Scheme.INT8_DYNAMIC, Scheme.FP8):
        return (
            "on CUDA the activation quantization runs as separate eager kernels; torchao's "
            f"fast path compiles it: torchao_{scheme.value}_inductor"
        )
    return None
