"""The OpenVINO provider: one instance per (device, precision) plan.

Build: convert the model with the workload's example inputs (``openvino.convert_model``
on a flat wrapper, :mod:`dlopt_openvino.convert`), quantize it with NNCF for the int8
plan, save it as OpenVINO IR in the plan's directory, read it back and compile it for
the device with the plan's performance hint and precision, with OpenVINO's model cache
in the plan's directory; then run every case once and check the output shapes and the
precision each compute layer runs in. Load: read the saved IR and compile it with the
saved model cache (an import, not a compile, on the same OpenVINO and device).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from attrs import field, frozen

from dlopt.plugin import (
    BuiltPlan,
    Concurrency,
    PlanNotApplicable,
    Precision,
    PreparedCase,
    Provider,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Quantization,
    Reload,
    Role,
    ServingTraits,
    is_plain_name,
    iter_tensors,
)
from dlopt_openvino import probe as _probe
from dlopt_openvino.convert import (
    IR_NAME,
    WEIGHTS_NAME,
    InputLayout,
    ModelDoesNotServe,
    analyze_cases,
    convert_shared,
    summarize,
)
from dlopt_openvino.options import OpenVinoInt8Options, OpenVinoOptions
from dlopt_openvino.outputs import NotSavable, OutputStructure, signature, to_json
from dlopt_openvino.quantize import (
    COMPUTE_LAYERS,
    INT8_PRECISIONS,
    QuantizeRecord,
    count,
    layer_precisions,
    quantize,
    runtime_layer_types,
    total,
)
from dlopt_openvino.runner import Runner

#: The plan directory's folder for OpenVINO's compiled-model cache (``CACHE_DIR``).
MODEL_CACHE_DIR = "model_cache"

#: What each device type offers: precision -> OpenVINO's ``INFERENCE_PRECISION_HINT``
#: (``None``: the device's own). int8 computes its quantized layers in int8 and the rest
#: in f32 (not in bf16, which the CPU plugin would pick on a bf16 CPU).
_PRECISION_HINTS: Mapping[str, Mapping[Precision, str | None]] = {
    "CPU": {Precision.FP32: "f32", Precision.BF16: "bf16", Precision.INT8: "f32"},
    # Intel GPUs compute in f16 by default (OpenVINO's GPU plugin's own choice).
    "GPU": {Precision.FP16: "f16"},
    # NPUs compute in f16; their plugin takes no precision hint.
    "NPU": {Precision.FP16: None},
}

_BF16_HINT = (
    "bf16 needs a CPU with AVX512-BF16 or AMX (Intel Cooper Lake, Sapphire Rapids and newer; "
    "AMD Zen 4 and newer); openvino_cpu and openvino_cpu_int8 run on any x86 CPU"
)


def _precision(value: Any) -> Precision:
    return Precision.parse(value)


@frozen
class OpenVinoProvider(Provider):
    """Convert the model to OpenVINO and run it on one OpenVINO device.

    ``device_type`` is OpenVINO's (``"CPU"``, ``"GPU"``, ``"NPU"``); ``precision`` picks
    the variant: on CPU ``FP32`` (the inference precision pinned to f32), ``BF16`` (CPUs
    with native bf16 only) or ``INT8`` (NNCF post-training quantization calibrated on the
    workload's inputs); on GPU and NPU ``FP16``, what those devices compute in. What users
    tune per race are the plan's options (:attr:`options_type`).

    A built plan is saved with its IR and compiled-model cache and served again without
    the model by :meth:`load` (a plan cache hit, ``dlopt.load_bundle``).
    """

    name: str
    device_type: str = "CPU"
    precision: Precision = field(default=Precision.FP32, converter=_precision)
    options_type: type[OpenVinoOptions] = field(init=False, repr=False, eq=False)
    #: Int8: NNCF calibrates activation scales on the workload's inputs (static).
    quantization: Quantization | None = field(init=False, repr=False, eq=False)

    role = Role.CHALLENGER
    reloads_by = Reload.LOAD
    install_hint = _probe.INSTALL_HINT

    @quantization.default
    def _default_quantization(self) -> Quantization | None:
        return Quantization.STATIC if self.precision is Precision.INT8 else None

    @options_type.default
    def _default_options_type(self) -> type[OpenVinoOptions]:
        return OpenVinoInt8Options if self.precision is Precision.INT8 else OpenVinoOptions

    def __attrs_post_init__(self) -> None:
        offered = _PRECISION_HINTS.get(self.device_type)
        if offered is None or self.precision not in offered:
            raise ValueError(
                f"{self.name}: OpenVINO plans on {self.device_type} are offered in "
                + ", ".join(
                    f"{kind}: {'/'.join(p.value for p in hints)}"
                    for kind, hints in _PRECISION_HINTS.items()
                )
            )

    # ------------------------------------------------------------------------ probe
    def _device_index(self, context: ProviderContext) -> tuple[int | None, str | None]:
        """Which device of this type the target names, or why the target does not fit."""
        target = context.target
        if target.input_device.partition(":")[0] != "cpu":
            return None, (
                f"{self.name} takes host tensors, but the target's inputs live on "
                f"{target.input_device}; race it on a CPU target"
            )
        kind = target.device_type
        if kind == "cpu":
            return None, None
        own = self.device_type.lower()
        if self.device_type == "CPU" or kind != own:
            where = (
                "a CPU target"
                if self.device_type == "CPU"
                else (f"a CPU target or ExecutionTarget('{own}:N', host='cpu')")
            )
            return None, f"{self.name} runs on OpenVINO's {self.device_type}; race it on {where}"
        _, _, index = target.device.partition(":")
        return (int(index) if index else None), None

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        """The layered probe (metadata, import, the device listed, bf16/NNCF where the plan
        needs them); the base class's ``probe`` turns an exception into "unavailable"."""
        versions = _probe.sdk_versions()
        ov, problem = _probe.import_openvino()
        if ov is None:
            return ProviderAvailability.unavailable(
                problem or "openvino does not import", _probe.INSTALL_HINT, sdk_versions=versions
            )
        index, problem = self._device_index(context)
        if problem is not None:
            return ProviderAvailability.unavailable(problem, sdk_versions=versions)
        device = _probe.check_device(ov, self.device_type, index)
        details: dict[str, Any] = {"device": device.device}
        if not device.usable:
            return ProviderAvailability.unavailable(
                device.reason or f"OpenVINO does not list {device.device}",
                device.hint,
                sdk_versions=versions,
                details=details,
            )
        details.update(device_name=device.full_name, capabilities=",".join(device.capabilities))
        if self.precision is Precision.BF16:
            problem = _probe.bf16_problem(device.capabilities)
            if problem is not None:
                return ProviderAvailability.unavailable(
                    problem, _BF16_HINT, sdk_versions=versions, details=details
                )
        if self.precision is Precision.INT8:
            problem = _probe.nncf_problem()
            if problem is not None:
                return ProviderAvailability.unavailable(
                    problem, _probe.INSTALL_HINT, sdk_versions=versions, details=details
                )
        return ProviderAvailability.ok(sdk_versions=versions, details=details)

    # ------------------------------------------------------------------------ build
    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        """Convert ``model`` for the prepared cases (every varying dimension dynamic),
        quantize it for int8, compile it, and check it on every case."""
        options: OpenVinoOptions = self.plan_options(context)
        self.require_available(context)
        cases = self.cases_with_reference(model, context)
        self.refuse_training_mode(model)
        layout = analyze_cases(cases)
        if self.device_type == "NPU" and layout.dynamic_dims:
            raise PlanNotApplicable(
                f"{self.name}: OpenVINO's NPU plugin compiles static shapes, and this workload "
                f"races several ({layout.describe()}); race one input shape per workload"
            )
        example = cases[layout.example_case]
        output_count = len(iter_tensors(example.reference))
        if output_count == 0:
            raise ProviderBuildError("the model returns no tensors; nothing to convert")
        ov, problem = _probe.import_openvino()
        if ov is None:
            raise ProviderBuildError(f"{self.name}: {problem}")
        plan_dir = self.plan_dir(context)
        for stale in (plan_dir / IR_NAME, plan_dir / WEIGHTS_NAME, plan_dir / MODEL_CACHE_DIR):
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
        start = time.perf_counter()
        converted, shared = convert_shared(ov, model, layout, example, output_count)
        convert_s = time.perf_counter() - start
        quantized: QuantizeRecord | None = None
        if self.precision is Precision.INT8:
            assert isinstance(options, OpenVinoInt8Options)
            converted, quantized = quantize(converted, cases, options)
        # compress_to_fp16=False: OpenVINO would otherwise store the fp32 weights in fp16.
        ov.save_model(converted, str(plan_dir / IR_NAME), compress_to_fp16=False)
        del converted
        try:
            outputs_json: dict[str, Any] | None = to_json(example.reference)
            load_problem = None
        except NotSavable as exc:
            outputs_json, load_problem = None, str(exc)
        cache = plan_dir / MODEL_CACHE_DIR if options.model_cache else None
        served = self._serve(
            ov, context, options, plan_dir / IR_NAME, cache, layout,
            OutputStructure.from_reference(example.reference),
            split_batch=_batch_splits(layout, cases),
        )  # fmt: skip
        try:
            self._check_cases(served.runner, cases)
            evidence = self._check_precisions(served.precisions, served.layer_types)
        except BaseException:
            served.runner.close()
            raise
        artifacts = {"ir": plan_dir / IR_NAME, "weights": plan_dir / WEIGHTS_NAME}
        if cache is not None:
            artifacts["model_cache"] = cache
        metadata = {
            "device_type": self.device_type,
            "precision": self.precision.value,
            **served.metadata(),
            **evidence,
            "convert_seconds": round(convert_s, 4),
            # "shared": another plan of this process converted the same model and cases.
            "conversion": "shared" if shared else "converted",
            "quantization": quantized.metadata() if quantized is not None else None,
            "input_names": list(layout.names),
            "dynamic_dims": layout.dynamic_dims,
            # How one model serves several batch sizes (the throughput objective's report).
            "input_shapes": layout.describe(),
            "example_case": example.name,
            # What load() needs to serve the saved files without the model.
            "ir": IR_NAME,
            "layout": layout.to_json(),
            "outputs": outputs_json,
            "output_signature": signature(example.reference),
            "load_problem": load_problem,
        }
        return self._plan(served, artifacts, metadata)

    # ------------------------------------------------------------------------- load
    def load(
        self, directory: Path, metadata: dict[str, Any], context: ProviderContext
    ) -> BuiltPlan:
        """Serve a saved plan again: its IR in ``directory`` compiled with its saved
        compiled-model cache (copied into this plan's directory: the saved one is never
        written to). Nothing is converted and no model is needed. Output structures JSON
        cannot describe come from ``context.cases``' reference outputs (a plan cache hit
        has them). Raises :class:`ProviderBuildError` naming what is missing or unreadable.
        """
        options: OpenVinoOptions = self.plan_options(context)
        directory = Path(directory)
        for key, mine in (("device_type", self.device_type), ("precision", self.precision.value)):
            if metadata.get(key) != mine:
                raise ProviderBuildError(
                    f"{self.name}: the saved plan has {key} {metadata.get(key)!r}, this plan "
                    f"{mine!r}; load it with the plan that saved it"
                )
        name = metadata.get("ir")
        if not isinstance(name, str) or not is_plain_name(name) or not name.endswith(".xml"):
            raise ProviderBuildError(
                f"{self.name}: the saved plan's metadata names IR file {name!r}, which is not "
                "a plain .xml file name; refusing to open it"
            )
        ir = directory / name
        if not ir.is_file() or not ir.with_suffix(".bin").is_file():
            raise ProviderBuildError(
                f"{self.name}: {ir} or its weights {ir.with_suffix('.bin').name} are missing; "
                "the directory must hold the plan's artifact files under their names"
            )
        try:
            layout = InputLayout.from_json(metadata.get("layout"))
            outputs = self._saved_outputs(metadata, context)
        except ValueError as exc:
            raise ProviderBuildError(
                f"{self.name}: the saved plan's metadata cannot be read ({exc})"
            ) from None
        ov, problem = _probe.import_openvino()
        if ov is None:
            raise ProviderBuildError(f"{self.name}: {problem}")
        cache = self.plan_dir(context) / MODEL_CACHE_DIR if options.model_cache else None
        saved_cache = directory / MODEL_CACHE_DIR
        if cache is not None and cache.resolve() != saved_cache.resolve():
            # OpenVINO writes into its cache on a miss: a copy, never the saved directory.
            shutil.rmtree(cache, ignore_errors=True)
            if saved_cache.is_dir():
                shutil.copytree(saved_cache, cache)
        served = self._serve(
            ov, context, options, ir, cache, layout, outputs,
            split_batch=bool(metadata.get("split_batch")),
        )  # fmt: skip
        artifacts = {"ir": ir, "weights": ir.with_suffix(".bin")}
        if cache is not None:
            artifacts["model_cache"] = cache
        loaded = {**metadata, **served.metadata(), "loaded_from": str(directory)}
        return self._plan(served, artifacts, loaded)

    def _saved_outputs(self, metadata: dict[str, Any], context: ProviderContext) -> OutputStructure:
        """The output structure of a saved plan: from the model's own reference outputs
        where the context has them (checked against the saved signature), else from the
        saved JSON."""
        expected = metadata.get("output_signature")
        if context.cases:
            wanted = metadata.get("example_case")
            case = next((c for c in context.cases if c.name == wanted), context.cases[0])
            found = signature(case.reference)
            if found != expected:
                raise ProviderBuildError(
                    f"{self.name}: the model's outputs ({found['type']}, "
                    f"{len(found['tensors'])} tensors) are not the saved plan's "
                    f"({expected!r:.200}); the plan was saved from another model: rebuild it"
                )
            return OutputStructure.from_reference(case.reference)
        if metadata.get("outputs") is None:
            raise ValueError(
                f"its output structure could not be saved ({metadata.get('load_problem')}); "
                "the plan cache brings it back (it has the model's outputs), a bundle alone "
                "cannot: rebuild the plan from the model"
            )
        return OutputStructure.from_json(metadata["outputs"])

    # ------------------------------------------------------------------ internals
    def _config(self, context: ProviderContext, options: OpenVinoOptions) -> dict[str, str]:
        """The compile configuration: hint, precision, threads and streams."""
        config = {"PERFORMANCE_HINT": _hint(options, context).upper()}
        precision = _PRECISION_HINTS[self.device_type][self.precision]
        if precision is not None:
            config["INFERENCE_PRECISION_HINT"] = precision
        if self.device_type == "CPU":
            threads = options.inference_threads or context.target.threads or torch.get_num_threads()
            config["INFERENCE_NUM_THREADS"] = str(threads)
        if config["PERFORMANCE_HINT"] == "THROUGHPUT" and options.num_streams:
            config["NUM_STREAMS"] = str(options.num_streams)
        return config

    def _serve(
        self,
        ov: Any,
        context: ProviderContext,
        options: OpenVinoOptions,
        ir: Path,
        cache_dir: Path | None,
        layout: InputLayout,
        outputs: OutputStructure,
        *,
        split_batch: bool,
    ) -> _Served:
        """Read the IR ``ir`` and compile it with this plan's configuration, with
        OpenVINO's model cache in ``cache_dir``; shared by build and load, so a loaded plan
        runs as the raced one."""
        config = self._config(context, options)
        if cache_dir is not None:
            cache_dir.mkdir(exist_ok=True)
            config["CACHE_DIR"] = str(cache_dir)
        index, _ = self._device_index(context)
        device = self.device_type if index is None else f"{self.device_type}.{index}"
        core = _probe.shared_core(ov)
        start = time.perf_counter()
        try:
            # Compiled from the model read back (not from its path): the cache key is then
            # the model's content, the same in any directory and any process.
            ov_model = core.read_model(str(ir))
            compiled = core.compile_model(ov_model, device, config)
        except Exception as exc:
            raise ProviderBuildError(
                f"OpenVINO could not compile {ir.name} for {device}: {summarize(exc)}"
            ) from exc
        compile_s = time.perf_counter() - start
        hint = config["PERFORMANCE_HINT"]
        requests = 1
        if hint == "THROUGHPUT":
            requests = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        runner = Runner(
            compiled,
            layout,
            outputs,
            requests_per_call=requests,
            split_batch=split_batch and options.split_batch,
        )
        return _Served(
            runner=runner,
            config=config,
            cache_dir=cache_dir,
            from_cache=_property(compiled, "LOADED_FROM_CACHE"),
            compile_s=compile_s,
            device=device,
            precisions=layer_precisions(compiled) if self.device_type == "CPU" else None,
            layer_types=runtime_layer_types(compiled) if self.device_type == "CPU" else (),
            streams=_property(compiled, "NUM_STREAMS"),
            split_batch=split_batch,
            openvino=str(getattr(ov, "__version__", "?")),
        )

    def _check_cases(self, runner: Runner, cases: tuple[PreparedCase, ...]) -> None:
        """Every case runs and gives eager's output shapes (values are the race's to judge)."""
        for case in cases:
            expected = [tuple(t.shape) for t in iter_tensors(case.reference)]
            try:
                got = [tuple(t.shape) for t in iter_tensors(runner(*case.args, **case.kwargs))]
            except Exception as exc:
                raise ModelDoesNotServe(
                    f"{self.name}: the converted model fails on case {case.name!r}: "
                    f"{summarize(exc, 400)}"
                ) from exc
            if got != expected:
                raise ModelDoesNotServe(
                    f"{self.name}: on case {case.name!r} the converted model gives output "
                    f"shapes {got}, eager {expected}"
                )

    def _check_precisions(
        self, table: dict[str, dict[str, int]] | None, layer_types: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """Metadata of what the compute layers run in; a plan that would not compute in
        its declared precision is refused (naming the layer types OpenVINO ran, when it
        ran none of the types counted as compute)."""
        if table is None:
            return {"layer_precisions": None}
        layers = total(table)
        evidence: dict[str, Any] = {"layer_precisions": table}
        if self.precision is Precision.FP32:
            other = layers - count(table, {"f32"})
            if other:
                raise ProviderBuildError(
                    f"{self.name}: OpenVINO compiled {other} of {layers} compute layers in "
                    f"another precision than f32 ({table}) although the plan pins f32"
                )
        elif self.precision is Precision.BF16:
            if layers and not count(table, {"bf16"}):
                raise ProviderBuildError(
                    f"{self.name}: OpenVINO compiled none of the {layers} compute layers in "
                    f"bf16 ({table}): this plan would compute what openvino_cpu computes"
                )
        elif self.precision is Precision.INT8:
            quantized = count(table, INT8_PRECISIONS)
            if not layers:
                ran = ", ".join(layer_types) or "none reported"
                raise ProviderBuildError(
                    f"{self.name}: OpenVINO's compiled model has no layer of the types int8 "
                    f"runs in ({', '.join(sorted(COMPUTE_LAYERS))}); the layer types it ran: "
                    f"{ran}. This plan would compute what openvino_cpu computes, so it is not "
                    "raced as int8"
                )
            if not quantized:
                raise ProviderBuildError(
                    f"{self.name}: NNCF quantized none of the {layers} compute layers so that "
                    f"OpenVINO runs them in int8 ({table}): this plan would compute what "
                    "openvino_cpu computes, so it is not raced as int8"
                )
            evidence.update(
                quantized_ops=quantized,
                quantizable_ops=layers,
                quantized_fraction=round(quantized / layers, 4),
                quantized_op_types={
                    kind: sum(n for p, n in by.items() if p in INT8_PRECISIONS)
                    for kind, by in table.items()
                },
            )
        return evidence

    def _plan(
        self, served: _Served, artifacts: dict[str, Path], metadata: dict[str, Any]
    ) -> BuiltPlan:
        return BuiltPlan(
            runner=served.runner,
            precision=self.precision,
            artifacts=artifacts,
            metadata=metadata,
            on_close=served.runner.close,
            # An infer request per calling thread; OpenVINO never sees autograd; shapes
            # beyond the raced ones only along the dimensions the cases vary (checked on
            # a held-out batch size before the decision routes such calls here).
            serving=ServingTraits(
                concurrency=Concurrency.CONCURRENT,
                any_grad_mode=True,
                dynamic_shapes=bool(metadata.get("dynamic_dims")),
            ),
        )


@frozen(eq=False)
class _Served:
    """A compiled model behind its runner, and how it was compiled."""

    runner: Runner
    config: dict[str, str]
    cache_dir: Path | None
    from_cache: Any
    compile_s: float
    device: str
    precisions: dict[str, dict[str, int]] | None
    layer_types: tuple[str, ...]
    streams: Any
    split_batch: bool
    openvino: str

    def metadata(self) -> dict[str, Any]:
        return {
            "openvino": self.openvino,
            "device": self.device,
            "compile_config": {k: v for k, v in self.config.items() if k != "CACHE_DIR"},
            "compile_seconds": round(self.compile_s, 4),
            "loaded_from_model_cache": None if self.from_cache is None else bool(self.from_cache),
            "model_cache": MODEL_CACHE_DIR if self.cache_dir is not None else None,
            "num_streams": None if self.streams is None else int(self.streams),
            "infer_requests_per_call": self.runner.requests_per_call
            if self.runner.split_batch
            else 1,
            "split_batch": self.split_batch,
            "thread_safety": "one infer request per calling thread",
        }


def _hint(options: OpenVinoOptions, context: ProviderContext) -> str:
    """``latency`` or ``throughput``: the option, or for ``auto`` the race's objective."""
    if options.performance_hint != "auto":
        return options.performance_hint
    objective = getattr(context.policy, "objective", None)
    return "throughput" if getattr(objective, "value", objective) == "max_throughput" else "latency"


def _property(compiled: Any, name: str) -> Any:
    try:
        return compiled.get_property(name)
    except Exception:  # a device plugin that does not report it
        return None


def _batch_splits(layout: InputLayout, cases: tuple[PreparedCase, ...]) -> bool:
    """Whether a call's batch can be split: dimension 0 of every input varies between
    the cases, and in every case it is one size shared by every input and output."""
    if not all(spec.shape and spec.shape[0] is None for spec in layout.inputs):
        return False
    for case in cases:
        sizes = {
            int(t.shape[0]) if t.dim() else -1
            for t in iter_tensors((case.args, case.kwargs, case.reference))
        }
        if len(sizes) != 1:
            return False
    return True
