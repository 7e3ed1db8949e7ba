"""Torch-TensorRT plans: one provider instance per precision.

Probe layers, each with its own reason and fix:

1. metadata (no import): torch-tensorrt installed; its ``Requires-Dist: torch`` admits the
   installed torch.
2. import: ``torch_tensorrt`` imports (a missing ``libnvinfer`` surfaces here with the
   loader's own message); the build has the Dynamo frontend; TensorRT's version.
3. device: the target is CUDA, torch sees it, and its compute capability is one the
   installed TensorRT supports (and that has the precision: bf16/tf32 need 8.0+).

Build: ``torch_tensorrt.compile(copy, ir="dynamo", inputs=[Input(min, opt, max)...])`` with
the shape ranges of the prepared cases (``context.cases``: the inputs on the device plans
are called with; each input is traced with a case's own tensor) and the precision
requested the way the installed release expects it (``enable_autocast`` in newer,
strongly typed releases; ``enabled_precisions`` in older ones). In a race, build trusts
the probe's answer (``context.availability``) instead of checking the SDK again.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import torch
from attrs import field, frozen

from dlopt.plugin import (
    BuiltPlan,
    Concurrency,
    Precision,
    Provider,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Role,
    ServingTraits,
    WorkloadError,
    check_distribution,
    check_value_independence,
    distribution_version,
    strict_jsonable,
    try_import,
)
from dlopt_tensorrt.compat import (
    DISTRIBUTION,
    check_torch_pairing,
    distribution_requires,
    min_compute_capability,
    tensorrt_requirement,
)
from dlopt_tensorrt.inputs import OPT_SHAPE_POLICIES, derive_inputs, example_tensor, to_trt_input
from dlopt_tensorrt.requirement import NOT_INSTALLED_NOTE, install_command, libraries_hint

#: Reduced precisions and their torch dtypes.
_LOW_DTYPE = {Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}
#: Precisions that need Ampere (8.0) or newer.
_NEEDS_AMPERE = {Precision.BF16: "bf16", Precision.TF32: "TF32"}
_LIBRARY_ERROR = re.compile(
    r"libnvinfer|libnvonnxparser|libtensorrt|nvinfer|No module named 'tensorrt"
)


def install_hint() -> str:
    """Exact install command for the torch-tensorrt that pairs with the installed torch."""
    return install_command(torch.__version__, torch.version.cuda)


def precision_kwargs(precision: Precision, parameters: set[str]) -> tuple[dict[str, Any], str]:
    """Compile options that request ``precision`` from the installed Torch-TensorRT.

    ``parameters`` are the keyword names ``torch_tensorrt.dynamo.compile`` accepts. Returns
    ``(kwargs, api)`` where ``api`` names the mechanism used (for the report).
    """
    kwargs: dict[str, Any] = {}
    if precision in (Precision.FP32, Precision.TF32):
        # TensorRT rounds fp32 matmul inputs to TF32 unless told not to.
        if "disable_tf32" in parameters:
            kwargs["disable_tf32"] = precision is Precision.FP32
        elif precision is Precision.FP32:
            raise ProviderBuildError(
                "this torch-tensorrt has no disable_tf32 option, so a strict fp32 engine "
                "cannot be requested; use tensorrt_tf32 instead"
            )
        if "enabled_precisions" in parameters and "enable_autocast" not in parameters:
            kwargs["enabled_precisions"] = {torch.float32}
        return kwargs, "fp32"
    low = _LOW_DTYPE[precision]
    if "enable_autocast" in parameters:
        # Strongly typed releases: Torch-TensorRT inserts the casts itself.
        kwargs.update(enable_autocast=True, autocast_low_precision_type=low)
        if "use_explicit_typing" in parameters:
            kwargs["use_explicit_typing"] = True
        return kwargs, "enable_autocast"
    if "enabled_precisions" in parameters:
        # Weakly typed releases: TensorRT may pick low-precision kernels per layer.
        kwargs["enabled_precisions"] = {torch.float32, low}
        if "use_explicit_typing" in parameters:
            kwargs["use_explicit_typing"] = False
        return kwargs, "enabled_precisions"
    raise ProviderBuildError(
        "this torch-tensorrt accepts neither enable_autocast nor enabled_precisions; "
        f"cannot request {precision.value}"
    )


def compile_parameters(torch_tensorrt: Any) -> set[str]:
    """Keyword names the installed ``torch_tensorrt.dynamo.compile`` accepts."""
    target = getattr(getattr(torch_tensorrt, "dynamo", None), "compile", None)
    return _parameters(target or torch_tensorrt.compile)


def _parameters(function: Any) -> set[str]:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return set()


def cuda_index(target: Any) -> int:
    """The CUDA device index of ``target``: its own, else torch's current device."""
    index = target.torch_device().index
    if index is not None:
        return int(index)
    return int(torch.cuda.current_device()) if torch.cuda.is_available() else 0


def _place(obj: Any, device: torch.device) -> Any:
    """Move a module or tensor to the target device (a seam: tests run without CUDA)."""
    return obj.to(device)


def _forward_arg_names(model: torch.nn.Module) -> list[str]:
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds]


def _parse_precision(value: str | Precision) -> Precision:
    return Precision.parse(value)


def _sorted_items(value: Any) -> tuple[tuple[str, Any], ...]:
    # A tuple keeps the frozen provider hashable; sorting makes equal options compare equal.
    return tuple(sorted(dict(value).items()))


def _optional_range(name: str, value: int | None, low: int, high: int | None = None) -> None:
    if value is None or (low <= value and (high is None or value <= high)):
        return
    bound = f"{low} to {high}" if high is not None else f"at least {low}"
    raise ValueError(f"{name} must be {bound} or None, got {value!r}")


@frozen
class TensorRTOptions:
    """What a user may set per TensorRT plan (``OptimizationPolicy(plan_options=...)``)."""

    workspace_size_mb: int | None = field(
        default=None,
        metadata={
            "help": "the most device memory, in MiB, TensorRT's builder may use as scratch "
            "space while it tries kernels; None: TensorRT's default (up to the free device "
            "memory). Lower it when building runs out of memory beside other work"
        },
    )
    optimization_level: int | None = field(
        default=None,
        metadata={
            "help": "TensorRT builder optimization level, 0 (quickest build) to 5 (longest "
            "build, most kernel choices tried); None: TensorRT's default (3)"
        },
    )
    opt_shape: str = field(
        default="heaviest",
        metadata={
            "help": "the case whose shapes TensorRT tunes its kernels for: 'heaviest' "
            "(most traffic, by case weight), 'largest' or 'smallest' (by input size); the "
            "engine's min and max shapes always span every case"
        },
    )
    min_block_size: int = field(
        default=1,
        metadata={
            "help": "fewest consecutive convertible ops worth a TensorRT engine; larger "
            "leaves short runs to PyTorch (fewer engine switches), 1 puts the most in TensorRT"
        },
    )
    save_engine: bool = field(
        default=False,
        metadata={
            "help": "also write the compiled program (an ExportedProgram that embeds the "
            "engines) into the plan's directory; load it with dlopt_tensorrt.load_engine"
        },
    )

    def __attrs_post_init__(self) -> None:
        _optional_range("workspace_size_mb", self.workspace_size_mb, 1)
        _optional_range("optimization_level", self.optimization_level, 0, 5)
        _optional_range("min_block_size", self.min_block_size, 1)
        if self.opt_shape not in OPT_SHAPE_POLICIES:
            raise ValueError(
                f"opt_shape must be one of {', '.join(map(repr, OPT_SHAPE_POLICIES))}, "
                f"got {self.opt_shape!r}"
            )


@frozen
class SdkInfo:
    """What the import layer found."""

    module: Any
    torch_tensorrt_version: str
    tensorrt_version: str | None
    cuda_version: str | None
    dynamo_frontend: bool | None


@frozen
class TensorRTProvider(Provider):
    """Torch-TensorRT at one precision, as a dlopt plan (``tensorrt_<precision>``).

    What a user tunes per race (workspace, optimization level, opt shape, block size,
    saving the engine) are its options, :class:`TensorRTOptions`. ``compile_options``:
    more keyword options for ``torch_tensorrt.compile``, fixed for this instance (for a
    provider built in code; applied last).
    """

    precision: Precision = field(converter=_parse_precision)
    name: str = field()
    compile_options: tuple[tuple[str, Any], ...] = field(factory=tuple, converter=_sorted_items)
    role = Role.CHALLENGER
    options_type = TensorRTOptions

    @name.default
    def _default_name(self) -> str:
        return f"tensorrt_{self.precision.value}"

    def __attrs_post_init__(self) -> None:
        if self.precision not in (Precision.FP32, Precision.TF32, *_LOW_DTYPE):
            raise ValueError(
                f"TensorRTProvider offers fp32, tf32, fp16 and bf16, not {self.precision.value}"
            )

    # -- probe -----------------------------------------------------------------
    def _check(
        self, context: ProviderContext
    ) -> tuple[SdkInfo | None, ProviderAvailability | None, dict[str, str]]:
        versions: dict[str, str | None] = {"torch": torch.__version__, DISTRIBUTION: None}
        details: dict[str, str] = {}

        def refuse(reason: str, hint: str | None = None) -> ProviderAvailability:
            return ProviderAvailability.unavailable(
                reason, hint, sdk_versions=versions, details=details
            )

        # 1. metadata
        version, problem = check_distribution(DISTRIBUTION, None, NOT_INSTALLED_NOTE)
        versions[DISTRIBUTION] = version
        if problem is not None:
            return None, refuse(problem, install_hint()), details
        assert version is not None
        pairing = check_torch_pairing(
            version, torch.__version__, distribution_requires(DISTRIBUTION)
        )
        details["torch_requirement"] = f"torch{pairing.requirement} ({pairing.source})"
        if not pairing.ok:
            return None, refuse(pairing.message or "torch mismatch", install_hint()), details

        # 2. import
        module, error = try_import("torch_tensorrt")
        if module is None:
            if error and _LIBRARY_ERROR.search(error):
                return (
                    None,
                    refuse(
                        f"TensorRT libraries are missing: importing torch_tensorrt {version} "
                        f"failed with {error}",
                        libraries_hint(
                            version, tensorrt_requirement(distribution_requires(DISTRIBUTION))
                        ),
                    ),
                    details,
                )
            return (
                None,
                refuse(
                    f"torch-tensorrt {version} is installed but does not import: {error}",
                    install_hint(),
                ),
                details,
            )
        sdk = _sdk_info(module, version)
        versions["tensorrt"] = sdk.tensorrt_version
        details["torch_tensorrt_cuda"] = sdk.cuda_version or "unknown"
        if sdk.dynamo_frontend is False:
            return (
                None,
                refuse(
                    f"this torch-tensorrt {version} build has no Dynamo frontend, which "
                    "dlopt compiles through",
                    install_hint(),
                ),
                details,
            )

        # 3. device
        target = context.target
        if target.device_type != "cuda":
            return (
                None,
                refuse(
                    f"TensorRT builds engines for NVIDIA GPUs; the target is {target.device} "
                    "(select a cuda target)"
                ),
                details,
            )
        if not torch.cuda.is_available():
            build = torch.version.cuda
            return (
                None,
                refuse(
                    f"torch {torch.__version__} sees no CUDA device"
                    + ("" if build else " (it is a CPU-only build)"),
                    None
                    if build
                    else "install a CUDA build of torch: pip install torch "
                    "--index-url https://download.pytorch.org/whl/cu126",
                ),
                details,
            )
        index = cuda_index(target)
        count = torch.cuda.device_count()
        if index >= count:
            return (
                None,
                refuse(f"target {target.device} does not exist: {count} CUDA device(s)"),
                details,
            )
        major, minor = (int(v) for v in torch.cuda.get_device_capability(index))
        capability = (major, minor)
        details["compute_capability"] = f"{major}.{minor}"
        needed = min_compute_capability(sdk.tensorrt_version)
        if needed is not None and capability < needed:
            return (
                None,
                refuse(
                    f"GPU compute capability {major}.{minor} is below what TensorRT "
                    f"{sdk.tensorrt_version} supports ({needed[0]}.{needed[1]}+)",
                    "run on a Turing (7.5) or newer GPU, or pair an older TensorRT with a "
                    "matching torch / torch-tensorrt",
                ),
                details,
            )
        if self.precision in _NEEDS_AMPERE and capability < (8, 0):
            return (
                None,
                refuse(
                    f"{_NEEDS_AMPERE[self.precision]} needs compute capability 8.0+ "
                    f"(Ampere or newer); this GPU is {major}.{minor}"
                ),
                details,
            )
        return sdk, None, details

    def _sdk_after_probe(
        self, availability: ProviderAvailability
    ) -> tuple[SdkInfo | None, ProviderAvailability | None, dict[str, str]]:
        """What :meth:`_check` returns, for a build after the race's probe said yes: the
        module the probe imported, without checking metadata, pairing or device again."""
        details = {k: str(v) for k, v in availability.details.items()}
        version = availability.sdk_versions.get(DISTRIBUTION) or "unknown"
        module, error = try_import("torch_tensorrt")
        if module is None:
            refusal = ProviderAvailability.unavailable(
                f"torch-tensorrt {version} no longer imports: {error}", install_hint()
            )
            return None, refusal, details
        return _sdk_info(module, version), None, details

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        """Layered availability; never raises."""
        try:
            sdk, refusal, details = self._check(context)
        except Exception as exc:  # a probe must never take the host down
            return ProviderAvailability.unavailable(
                f"probing torch-tensorrt failed: {type(exc).__name__}: {exc}", install_hint()
            )
        if refusal is not None:
            return refusal
        assert sdk is not None
        return ProviderAvailability.ok(
            sdk_versions={
                "torch": torch.__version__,
                DISTRIBUTION: sdk.torch_tensorrt_version,
                "tensorrt": sdk.tensorrt_version,
            },
            details=details,
        )

    # -- build -----------------------------------------------------------------
    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        """Compile a copy of ``model`` into TensorRT engines for the prepared cases' shapes."""
        options: TensorRTOptions = context.options or TensorRTOptions()
        availability = context.availability
        if availability is None:  # a direct call, outside a race: probe now
            sdk, refusal, details = self._check(context)
        elif not availability.available:
            sdk, refusal, details = None, availability, {}
        else:
            sdk, refusal, details = self._sdk_after_probe(availability)
        if refusal is not None or sdk is None:
            reason = refusal.reason if refusal is not None else "unknown"
            raise ProviderBuildError(f"{self.name} cannot build here: {reason}")
        cases = context.build_cases()
        if not cases:
            raise ProviderBuildError(
                f"{self.name}: TensorRT engines are built for input shapes; pass a workload"
            )
        trt = sdk.module
        # Torch-TensorRT turns torch.device("cuda") into Device(gpu_id=None) and later
        # "cuda:None": always hand it an index.
        device = torch.device("cuda", cuda_index(context.target))
        try:
            spec = derive_inputs(cases, _forward_arg_names(model), options.opt_shape)
        except WorkloadError as exc:
            raise ProviderBuildError(f"{self.name}: {exc}") from exc

        parameters = compile_parameters(trt)
        precision_options, api = precision_kwargs(self.precision, parameters)
        compile_kwargs: dict[str, Any] = {
            "device": device,
            "min_block_size": options.min_block_size,
            **precision_options,
            **self._builder_kwargs(options, parameters),
        }
        if "timing_cache_path" in parameters:
            # The default is one file in /tmp shared by every build on the machine: setup
            # times and tactics would then depend on earlier runs.
            plan_dir = context.plan_dir(self.name)
            compile_kwargs["timing_cache_path"] = str(plan_dir / "timing_cache.bin")
        compile_kwargs.update(self.compile_options)
        inputs = [to_trt_input(s, trt) for s in spec.args]
        kwarg_inputs = {k: to_trt_input(s, trt) for k, s in spec.kwargs.items()}
        if kwarg_inputs:
            compile_kwargs["kwarg_inputs"] = kwarg_inputs

        # torch_tensorrt.compile captures a graph: one that depends on the input values
        # (a branch the example took) would serve every input that branch.
        example = next((c for c in cases if c.name == spec.opt_case), cases[0])
        check_value_independence(model, example.args, example.kwargs).raise_if_found(
            f"{self.name}: the model's graph"
        )
        plan_model = _place(copy.deepcopy(model).eval(), device)
        try:
            compiled = trt.compile(plan_model, ir="dynamo", inputs=inputs, **compile_kwargs)
        except Exception as exc:
            raise ProviderBuildError(
                f"{self.name}: torch_tensorrt.compile failed: {type(exc).__name__}: {exc}"
            ) from exc

        artifacts: dict[str, Path] = {}
        save_options: dict[str, Any] | None = None
        if options.save_engine:
            path = context.plan_dir(self.name) / "trt_program.ep"
            save_options = {"output_format": "exported_program"}
            if "retrace" in _parameters(trt.save):
                # Since 2.10 save re-exports by default, specialized to the example
                # tensors' shapes: the loaded program would take only the max shape.
                # retrace=False keeps the graph's symbolic (min..max) shapes.
                save_options["retrace"] = False
            # Older releases export from the examples, so they must be on the device (the
            # prepared cases' tensors already are).
            example_args = [_place(example_tensor(s), device) for s in spec.args]
            try:
                example_kwargs = {
                    k: _place(example_tensor(s), device) for k, s in spec.kwargs.items()
                }
                trt.save(
                    compiled,
                    str(path),
                    arg_inputs=example_args,
                    **({"kwarg_inputs": example_kwargs} if example_kwargs else {}),
                    **save_options,
                )
            except Exception as exc:
                raise ProviderBuildError(
                    f"{self.name}: torch_tensorrt.save to {path} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            artifacts["engine"] = path

        holder = {"module": compiled}

        def runner(*args: Any, **kwargs: Any) -> Any:
            return holder["module"](*args, **kwargs)

        def release() -> None:
            holder.clear()
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.empty_cache()

        metadata: dict[str, Any] = {
            "precision_api": api,
            "compile_options": strict_jsonable(
                {k: v for k, v in compile_kwargs.items() if k != "kwarg_inputs"}
            ),
            "inputs": spec.describe(),
            "dynamic_shapes": spec.is_dynamic,
            # How one engine serves several batch sizes (the throughput objective's report).
            "input_shapes": spec.shape_support(),
            "opt_case": spec.opt_case,
            "torch_tensorrt_version": sdk.torch_tensorrt_version,
            "tensorrt_version": sdk.tensorrt_version,
            "compute_capability": details.get("compute_capability"),
        }
        if save_options is not None:
            metadata["save_options"] = save_options
        return BuiltPlan(
            runner=runner,
            precision=self.precision,
            artifacts=artifacts,
            metadata=metadata,
            output_dtype=_LOW_DTYPE.get(self.precision),
            on_close=release,
            # One execution context per engine (not safe to enter from two threads at
            # once), judged in one grad mode, and an engine's profile bounds its shapes:
            # the safe defaults, stated.
            serving=ServingTraits(concurrency=Concurrency.SERIALIZED, dynamic_shapes=False),
        )

    def _builder_kwargs(self, options: TensorRTOptions, parameters: set[str]) -> dict[str, Any]:
        """The builder options the user set, as this torch-tensorrt names them."""
        wanted: dict[str, tuple[str, Any]] = {}
        if options.workspace_size_mb is not None:
            wanted["workspace_size"] = ("workspace_size_mb", options.workspace_size_mb * 2**20)
        if options.optimization_level is not None:
            wanted["optimization_level"] = ("optimization_level", options.optimization_level)
        for parameter, (option, _) in wanted.items():
            # An unreadable signature (empty set) is given the benefit of the doubt.
            if parameters and parameter not in parameters:
                raise ProviderBuildError(
                    f"{self.name}: this torch-tensorrt has no {parameter} option; unset "
                    f"{option} in plan_options[{self.name!r}] or upgrade torch-tensorrt"
                )
        return {parameter: value for parameter, (_, value) in wanted.items()}


#: Distributions TensorRT's libraries come in, for its version without importing it.
_TENSORRT_DISTRIBUTIONS = (
    "tensorrt",
    "tensorrt-cu13",
    "tensorrt-cu12",
    "tensorrt-cu13-libs",
    "tensorrt-cu12-libs",
)


def _sdk_info(module: Any, version: str) -> SdkInfo:
    import sys

    # torch_tensorrt.__tensorrt_version__ is gone since 2.6: the tensorrt module it
    # imported, else the installed TensorRT distribution, says which TensorRT runs.
    trt_version = getattr(module, "__tensorrt_version__", None)
    if not trt_version:
        trt_version = getattr(sys.modules.get("tensorrt"), "__version__", None)
    if not trt_version:
        trt_version = next(
            (v for name in _TENSORRT_DISTRIBUTIONS if (v := distribution_version(name))), None
        )
    features = getattr(module, "ENABLED_FEATURES", None)
    dynamo = getattr(features, "dynamo_frontend", None)
    return SdkInfo(
        module=module,
        torch_tensorrt_version=str(getattr(module, "__version__", version)),
        tensorrt_version=str(trt_version) if trt_version else None,
        cuda_version=getattr(module, "__cuda_version__", None),
        dynamo_frontend=None if dynamo is None else bool(dynamo),
    )


def load_engine(path: str | Path) -> Any:
    """Load a program written with ``save_engine=True``; returns a callable module.

    The file embeds serialized TensorRT engines and is deserialized by
    ``torch_tensorrt.load``: load only files you produced.
    """
    torch_tensorrt = importlib.import_module("torch_tensorrt")
    loaded = torch_tensorrt.load(str(path))
    return loaded.module() if hasattr(loaded, "module") else loaded


def all_providers() -> list[TensorRTProvider]:
    """One plan per precision; probes drop those the GPU lacks."""
    return [
        TensorRTProvider(p)
        for p in (Precision.FP32, Precision.TF32, Precision.FP16, Precision.BF16)
    ]
