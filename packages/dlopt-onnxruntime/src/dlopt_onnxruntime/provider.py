"""The ONNX Runtime provider: one instance per (execution provider, precision) plan."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from attrs import field, frozen

from dlopt.errors import DloptError, ProviderBuildError
from dlopt.precision import Precision
from dlopt.providers.contract import BuiltPlan, ProviderAvailability, ProviderContext
from dlopt.tree import iter_tensors
from dlopt_onnxruntime import probe as _probe
from dlopt_onnxruntime.export import (
    MANIFEST_FORMAT,
    MODEL_NAME,
    ExportedModelDoesNotServe,
    ExportRecord,
    InputLayout,
    analyze_workload,
    copy_model,
    export_with_fallback,
    exporter_order,
    model_files,
    output_template,
    read_manifest,
    save_with_external_data,
    signature_hash,
    summarize_error,
    write_manifest,
)
from dlopt_onnxruntime.quantization import coverage as quantization_coverage
from dlopt_onnxruntime.quantization import describe as describe_ops

log = logging.getLogger(__name__)

#: Which precisions each execution provider offers here, and how.
_PRECISIONS: Mapping[str, frozenset[Precision]] = {
    # INT8: onnxruntime.quantization.quantize_dynamic on the exported model.
    "CPUExecutionProvider": frozenset({Precision.FP32, Precision.INT8}),
    # FP32 turns TF32 off (use_tf32=0); FP16 converts the model (keeping fp32 I/O).
    "CUDAExecutionProvider": frozenset({Precision.FP32, Precision.TF32, Precision.FP16}),
    # TensorRT builds fp32 engines with TF32 tactics allowed; FP16 sets trt_fp16_enable.
    "TensorrtExecutionProvider": frozenset({Precision.TF32, Precision.FP16}),
    "OpenVINOExecutionProvider": frozenset({Precision.FP32}),
}

#: Modules that compute differently in training mode (exporting them would not match).
_TRAINING_SENSITIVE = (
    torch.nn.modules.dropout._DropoutNd,
    torch.nn.modules.batchnorm._BatchNorm,
    torch.nn.modules.instancenorm._InstanceNorm,
)

# Exported fp32 models of this process, by export signature: plans of one race share one
# export (copied/hard-linked into each plan's directory) instead of exporting again.
_SHARED_EXPORTS: dict[str, tuple[Path, ExportRecord]] = {}


def _precision(value: str | Precision) -> Precision:
    return Precision.parse(value)


def _options(value: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


#: ORT session config entry for busy-waiting of idle intra-op threads (off by default here).
SPINNING_KEY = "session.intra_op.allow_spinning"


@frozen
class OnnxRuntimeProvider:
    """Export the model to ONNX and run it with one ONNX Runtime execution provider.

    ``execution_provider`` is ONNX Runtime's EP name (``"CPUExecutionProvider"``,
    ``"CUDAExecutionProvider"``, ``"TensorrtExecutionProvider"``,
    ``"OpenVINOExecutionProvider"``...). ``precision`` selects the variant: ``INT8``
    quantizes dynamically (CPU), ``FP16`` converts the model (CUDA) or enables fp16
    engines (TensorRT). ``provider_options`` are passed to the EP on top of the ones
    set here; ``session_config`` are session config entries (CPU sessions default to
    ``session.intra_op.allow_spinning = "0"``; see docs/providers/onnxruntime.md).
    ``exporter`` is ``"auto"``
    (dynamo, then TorchScript), ``"dynamo"`` or ``"torchscript"``.
    """

    name: str
    execution_provider: str = "CPUExecutionProvider"
    precision: Precision = field(default=Precision.FP32, converter=_precision)
    provider_options: dict[str, str] = field(factory=dict, converter=_options)
    session_config: dict[str, str] = field(factory=dict, converter=_options)
    graph_optimization: str = "all"
    exporter: str = "auto"
    opset: int | None = None
    #: Node types quantized by the INT8 plan ("MatMul" covers Gemm: quantize_dynamic
    #: rewrites Gemm as MatMul + Add). Conv is left out on purpose: ONNX Runtime's
    #: ConvInteger ran the demo conv net 8x slower than fp32 Conv on x86 here (it passed the
    #: int8 limits). The plan's metadata counts what was quantized.
    int8_op_types: tuple[str, ...] = ("MatMul", "Attention", "LSTM")
    int8_per_channel: bool = False
    #: 7-bit weights. ``None`` = automatic: on with x86 CPUs without VNNI, where the
    #: u8 x s8 multiply saturates (measured relative L2 error 7.5% -> 1.6% on an MLP).
    int8_reduce_range: bool | None = None
    #: Device type the plan's inputs live on; derived from the EP when ``None``.
    device_type: str | None = None

    # ------------------------------------------------------------------ description
    @property
    def plan_device_type(self) -> str:
        if self.device_type:
            return self.device_type
        return _probe.EP_INFO.get(self.execution_provider, ("cpu", ""))[0]

    def install_hint(self) -> str:
        if self.execution_provider in _probe.EP_INFO:
            return _probe.EP_INFO[self.execution_provider][1]
        return (
            f"install an onnxruntime build that includes {self.execution_provider} "
            "(see onnxruntime.ai/docs/execution-providers)"
        )

    def _sdk_hint(self) -> str:
        return (
            _probe.GPU_INSTALL_HINT if self.plan_device_type == "cuda" else _probe.CPU_INSTALL_HINT
        )

    def _precision_problem(self) -> str | None:
        offered = _PRECISIONS.get(self.execution_provider)
        if offered is None:
            if self.precision is Precision.FP32:
                return None
            return f"{self.execution_provider} plans are offered in fp32 only"
        if self.precision not in offered:
            return (
                f"{self.precision.value} is not offered with {self.execution_provider} "
                f"(offered: {', '.join(sorted(p.value for p in offered))})"
            )
        return None

    def _device_index(self, context: ProviderContext) -> int:
        _, _, index = context.target.device.partition(":")
        if index:
            return int(index)
        return torch.cuda.current_device() if torch.cuda.is_available() else 0

    def _probe_options(self, context: ProviderContext) -> dict[str, str]:
        if self.plan_device_type == "cuda":
            return {"device_id": str(self._device_index(context))}
        if self.execution_provider == "OpenVINOExecutionProvider":
            return {"device_type": "CPU"}
        return {}

    # ------------------------------------------------------------------------ probe
    def probe(self, context: ProviderContext) -> ProviderAvailability:
        try:
            return self._probe(context)
        except Exception as exc:  # a probe never raises
            return ProviderAvailability.unavailable(
                f"probing {self.name} failed: {type(exc).__name__}: {exc}",
                self._sdk_hint(),
            )

    def _probe(self, context: ProviderContext) -> ProviderAvailability:
        versions = _probe.sdk_versions()
        hint = self._sdk_hint()
        ort, problem, details = _probe.check_sdk(hint)
        if problem is not None:
            return ProviderAvailability.unavailable(
                problem, hint, sdk_versions=versions, details=details
            )
        details["execution_provider"] = self.execution_provider
        problem = self._precision_problem()
        if problem is not None:
            return ProviderAvailability.unavailable(problem, sdk_versions=versions, details=details)
        target_type = context.target.device_type
        if target_type != self.plan_device_type:
            return ProviderAvailability.unavailable(
                f"{self.name} runs with {self.execution_provider} on {self.plan_device_type} "
                f"inputs, but the target is {context.target.device}",
                sdk_versions=versions,
                details=details,
            )
        problem = _tool_problem(self._transform_record()["kind"])
        if problem is not None:
            return ProviderAvailability.unavailable(
                problem, hint, sdk_versions=versions, details=details
            )
        check = _probe.check_execution_provider(
            ort, self.execution_provider, self._probe_options(context)
        )
        if check.session_providers:
            details["session_providers"] = ",".join(check.session_providers)
        if not check.usable:
            reason = check.reason or f"{self.execution_provider} is unusable"
            if details.get("conflict"):
                reason += f" ({details['conflict']})"
            return ProviderAvailability.unavailable(
                reason, self.install_hint(), sdk_versions=versions, details=details
            )
        if self.plan_device_type == "cuda":
            if not torch.cuda.is_available():
                return ProviderAvailability.unavailable(
                    f"{self.execution_provider} works but torch sees no CUDA device, and the "
                    "plan binds torch CUDA tensors to the session",
                    "install a CUDA build of torch (pip install torch --index-url "
                    "https://download.pytorch.org/whl/cu124 or newer)",
                    sdk_versions=versions,
                    details=details,
                )
            if self._device_index(context) >= torch.cuda.device_count():
                return ProviderAvailability.unavailable(
                    f"target {context.target.device} does not exist "
                    f"(torch sees {torch.cuda.device_count()} CUDA devices)",
                    sdk_versions=versions,
                    details=details,
                )
        return ProviderAvailability.ok(
            details.get("conflict"), sdk_versions=versions, details=details
        )

    # ------------------------------------------------------------------------ build
    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        availability = self.probe(context)
        if not availability.available:
            raise ProviderBuildError(f"{self.name} is unavailable: {availability.reason}")
        workload = context.workload
        if workload is None:
            raise ProviderBuildError(
                f"{self.name} exports the model for the workload's inputs; pass a workload"
            )
        training = [
            name
            for name, module in model.named_modules()
            if module.training and isinstance(module, _TRAINING_SENSITIVE)
        ]
        if training:
            raise ProviderBuildError(
                f"{', '.join(training[:3]) or 'the model'} is in training mode (dropout or "
                "batch statistics); an exported inference model would differ from it. "
                "Call model.eval() first"
            )
        import onnxruntime as ort

        try:
            layout = analyze_workload(workload)
        except DloptError as exc:
            raise ProviderBuildError(str(exc)) from exc
        start = time.perf_counter()
        with torch.no_grad():
            eager = [model(*case.args, **case.kwargs) for case in workload.cases]
        example = workload.cases[layout.example_case]
        template = output_template(eager[layout.example_case])
        expected = [[tuple(t.shape) for t in iter_tensors(out)] for out in eager]
        output_count = len(expected[layout.example_case])
        if output_count == 0:
            raise ProviderBuildError("the model returns no tensors; nothing to export")
        output_names = [f"output_{i}" for i in range(output_count)]
        eager_seconds = time.perf_counter() - start

        from dlopt.validation import ModelFingerprint

        plan_dir = context.plan_dir(self.name)
        export_signature = {
            "format": MANIFEST_FORMAT,
            "model": {
                "class": f"{type(model).__module__}.{type(model).__qualname__}",
                "weights": ModelFingerprint.of(model).digest,
            },
            "inputs": layout.signature(),
            "outputs": output_count,
            "torch": torch.__version__,
            "exporter": self.exporter,
            "opset": self.opset,
        }
        export_key = signature_hash(export_signature)
        plan_signature = {
            "export": export_key,
            "plan": self._transform_record(),
            "onnxruntime": ort.__version__,
        }
        plan_key = signature_hash(plan_signature)

        def finish(record: ExportRecord, source: str, transform: bool) -> dict[str, Any]:
            return self._finish(
                ort, context, plan_dir, layout, template, output_names, expected,
                record, source, transform,
            )  # fmt: skip

        built: dict[str, Any] | None = None
        record: ExportRecord | None = None
        manifest = read_manifest(plan_dir)
        if manifest and manifest.get("plan_key") == plan_key:
            try:
                record = ExportRecord(**manifest["export_record"])
                if not (plan_dir / manifest["session_model"]).exists():
                    raise FileNotFoundError(manifest["session_model"])
                built = finish(record, "manifest", transform=False)
            except (ExportedModelDoesNotServe, OSError, KeyError, TypeError) as exc:
                log.info("cannot reuse the export in %s (%s); exporting again", plan_dir, exc)
                built = None
        if built is None and export_key in _SHARED_EXPORTS:
            source_path, shared_record = _SHARED_EXPORTS[export_key]
            if source_path.exists():
                if source_path.parent != plan_dir:
                    copy_model(source_path, plan_dir)
                record = shared_record
                try:
                    built = finish(record, "shared", transform=True)
                except ExportedModelDoesNotServe:
                    built = None
        if built is None:
            try:
                built, record = export_with_fallback(
                    model,
                    layout,
                    example.args,
                    example.kwargs,
                    output_count,
                    plan_dir / MODEL_NAME,
                    exporters=exporter_order(self.exporter),
                    opset=self.opset,
                    finish=lambda rec: finish(rec, "exported", transform=True),
                )
            except ProviderBuildError:
                raise
            except DloptError as exc:
                raise ProviderBuildError(str(exc)) from exc
        assert record is not None and built is not None
        _SHARED_EXPORTS[export_key] = (plan_dir / MODEL_NAME, record)

        manifest_path = write_manifest(
            plan_dir,
            {
                "format": MANIFEST_FORMAT,
                "plan": self.name,
                "plan_key": plan_key,
                "export_key": export_key,
                "signature": {"export": export_signature, "plan": plan_signature},
                "export_record": {
                    "exporter": record.exporter,
                    "opset": record.opset,
                    "seconds": record.seconds,
                    "fallback_error": record.fallback_error,
                },
                "model": MODEL_NAME,
                "session_model": built["session_model"].name,
                "input_names": list(layout.names),
                "output_names": output_names,
                "dynamic_axes": layout.dynamic_dims,
            },
        )
        artifacts = {"manifest": manifest_path}
        for file in model_files(plan_dir / MODEL_NAME):
            artifacts["onnx_model" if file.name == MODEL_NAME else file.name] = file
        if built["session_model"].name != MODEL_NAME:
            for file in model_files(built["session_model"]):
                artifacts["session_model" if file == built["session_model"] else file.name] = file
        metadata = {
            "execution_provider": self.execution_provider,
            "session_providers": built["session_providers"],
            "provider_options": built["provider_options"],
            "session_options": built["session_options"],
            "intra_op_allow_spinning": self._config().get(SPINNING_KEY),
            "onnxruntime": ort.__version__,
            "flavour": _probe.detect_installation().flavour,
            "exporter": record.exporter,
            "opset": record.opset,
            "export_fallback_error": record.fallback_error,
            "export_seconds": round(record.seconds, 4),
            "export_source": built["source"],
            "reused_export": built["source"] != "exported",
            "eager_reference_seconds": round(eager_seconds, 4),
            "transform": built["transform"],
            "input_names": list(layout.names),
            "output_names": output_names,
            "dynamic_axes": layout.dynamic_dims,
            "example_case": example.name,
            "io": built["io"],
            # Quantizing plans: quantized_ops, quantizable_ops, quantized_fraction, op types.
            **built["coverage"],
        }
        holder = built

        def close() -> None:
            holder.pop("session", None)
            holder.pop("runner", None)

        return BuiltPlan(
            runner=built["runner"],
            precision=self.precision,
            artifacts=artifacts,
            metadata=metadata,
            on_close=close,
        )

    # ------------------------------------------------------------------ internals
    def _config(self) -> dict[str, str]:
        """Session config entries: the plugin's defaults, overridden by ``session_config``."""
        defaults: dict[str, str] = {}
        if self.plan_device_type == "cpu":
            # Idle intra-op threads otherwise spin ~50-100 ms after every run and slow
            # whatever runs next on the same cores: eager right after an ORT burst ran
            # 2.2x slower here, so an interleaved race overstated ORT's speedup (and so
            # would any process doing other work between requests). Costs ORT itself
            # 1.2-1.6x on tiny batch-1 models; opt back in with "1".
            defaults[SPINNING_KEY] = "0"
        return {**defaults, **self.session_config}

    def _transform_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "execution_provider": self.execution_provider,
            "precision": self.precision.value,
        }
        if self.execution_provider == "CPUExecutionProvider" and self.precision is Precision.INT8:
            record.update(
                kind="quantize_dynamic",
                op_types=list(self.int8_op_types),
                per_channel=self.int8_per_channel,
                reduce_range=self._reduce_range(),
                weight_type="QInt8",
            )
        elif (
            self.execution_provider == "CUDAExecutionProvider" and self.precision is Precision.FP16
        ):
            record.update(kind="float16", keep_io_types=True)
        else:
            record["kind"] = "none"
        return record

    def _reduce_range(self) -> bool:
        if self.int8_reduce_range is not None:
            return self.int8_reduce_range
        from dlopt.runtime import cpu_info

        flags = set(cpu_info().isa_flags)
        return "avx2" in flags and not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}

    def _transform(self, fp32_path: Path, plan_dir: Path) -> Path:
        kind = self._transform_record()["kind"]
        if kind == "quantize_dynamic":
            return self._quantize_int8(fp32_path, plan_dir / "model.int8.onnx")
        if kind == "float16":
            return self._convert_fp16(fp32_path, plan_dir / "model.fp16.onnx")
        return fp32_path

    def _quantize_int8(self, source: Path, target: Path) -> Path:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        for file in model_files(target):
            file.unlink()
        # quantize_dynamic logs a pre-processing tip on the root logger on every call.
        quiet = _DropMessage("pre-processing before quantization")
        logging.getLogger().addFilter(quiet)
        try:
            quantize_dynamic(
                source,
                target,
                op_types_to_quantize=list(self.int8_op_types),
                per_channel=self.int8_per_channel,
                reduce_range=self._reduce_range(),
                weight_type=QuantType.QInt8,
                use_external_data_format=True,
            )
        except Exception as exc:
            raise ProviderBuildError(
                f"int8 dynamic quantization failed: {summarize_error(exc)}"
            ) from exc
        finally:
            logging.getLogger().removeFilter(quiet)
        return target

    def _check_coverage(self, fp32_path: Path, session_model: Path) -> dict[str, Any]:
        """Count what the int8 graph quantized; refuse a plan that quantized nothing."""
        found = quantization_coverage(fp32_path, session_model)
        if found.quantized_ops == 0:
            raise ProviderBuildError(
                f"{self.name}: int8 dynamic quantization {found.summary()}: this plan would "
                f"compute what the fp32 plan on {self.execution_provider} (onnxruntime_cpu) "
                "computes, so it is not raced as int8. It quantizes "
                f"{', '.join(self.int8_op_types)} nodes; set int8_op_types to include this "
                'model\'s compute ops (for example ("MatMul", "Conv")) or exclude the plan'
            )
        if found.unquantized:
            log.info(
                "%s: %s; the rest (%s) computes in fp32",
                self.name,
                found.summary(),
                describe_ops(found.unquantized),
            )
        return found.metadata()

    def _convert_fp16(self, source: Path, target: Path) -> Path:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        try:
            converted = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
        except Exception as exc:
            raise ProviderBuildError(f"fp16 conversion failed: {summarize_error(exc)}") from exc
        save_with_external_data(converted, target)
        return target

    def _provider_list(
        self, context: ProviderContext, plan_dir: Path, layout: InputLayout, stream_ptr: int | None
    ) -> list[tuple[str, dict[str, str]]]:
        ep = self.execution_provider
        options: dict[str, str] = {}
        providers: list[tuple[str, dict[str, str]]] = []
        if self.plan_device_type == "cuda":
            device = str(self._device_index(context))
            stream = {"user_compute_stream": str(stream_ptr), "has_user_compute_stream": "1"}
            cuda = {
                "device_id": device,
                # FP32 plans must not use TF32 tensor cores (ORT enables them by default).
                "use_tf32": "0" if self.precision is Precision.FP32 else "1",
                "arena_extend_strategy": "kSameAsRequested",
                **stream,
            }
            if ep == "CUDAExecutionProvider":
                options = cuda
            elif ep == "TensorrtExecutionProvider":
                cache = plan_dir / "trt_cache"
                cache.mkdir(exist_ok=True)
                options = {
                    "device_id": device,
                    "trt_fp16_enable": "True" if self.precision is Precision.FP16 else "False",
                    "trt_engine_cache_enable": "True",
                    "trt_engine_cache_path": str(cache),
                    "trt_timing_cache_enable": "True",
                    "trt_timing_cache_path": str(cache),
                    **stream,
                    **_trt_profiles(layout),
                }
                # Nodes TensorRT cannot take run on the CUDA EP, not on the CPU.
                providers.append((ep, {**options, **self.provider_options}))
                providers.append(("CUDAExecutionProvider", cuda))
                return providers
            else:
                options = {"device_id": device, **stream}
        elif ep == "OpenVINOExecutionProvider":
            # OpenVINO's CPU plugin may default to bf16 on AMX CPUs: pin fp32.
            options = {"device_type": "CPU", "precision": "FP32"}
        providers.append((ep, {**options, **self.provider_options}))
        return providers

    def _finish(
        self,
        ort: Any,
        context: ProviderContext,
        plan_dir: Path,
        layout: InputLayout,
        template: Any,
        output_names: list[str],
        expected: list[list[tuple[int, ...]]],
        record: ExportRecord,
        source: str,
        transform: bool,
    ) -> dict[str, Any]:
        from dlopt_onnxruntime.session import CudaRunner, make_cpu_runner, session_options

        fp32_path = plan_dir / MODEL_NAME
        transform_start = time.perf_counter()
        if transform:
            session_model = self._transform(fp32_path, plan_dir)
        else:
            manifest = read_manifest(plan_dir) or {}
            session_model = plan_dir / manifest.get("session_model", MODEL_NAME)
        transform_seconds = time.perf_counter() - transform_start
        coverage: dict[str, Any] = {}
        if self._transform_record()["kind"] == "quantize_dynamic":
            coverage = self._check_coverage(fp32_path, session_model)

        threads = context.target.threads or torch.get_num_threads()
        options, options_record = session_options(
            ort, threads=threads, optimization=self.graph_optimization, extra=self._config()
        )
        stream = None
        if self.plan_device_type == "cuda":
            device = torch.device("cuda", self._device_index(context))
            current = torch.cuda.current_stream(device)
            # Run on torch's current stream; the default (legacy) stream has no handle
            # ORT can adopt, so then the plan gets its own stream, ordered by waits.
            stream = current if current.cuda_stream != 0 else torch.cuda.Stream(device)
        providers = self._provider_list(
            context, plan_dir, layout, stream.cuda_stream if stream is not None else None
        )
        session_start = time.perf_counter()
        try:
            session = ort.InferenceSession(
                str(session_model), sess_options=options, providers=providers
            )
        except Exception as exc:
            raise ProviderBuildError(
                f"ONNX Runtime could not load the exported model with {self.execution_provider}: "
                f"{summarize_error(exc)}"
            ) from exc
        session_seconds = time.perf_counter() - session_start
        used = list(session.get_providers())
        if self.execution_provider not in used:
            raise ProviderBuildError(
                f"the session fell back to {', '.join(used)} instead of using "
                f"{self.execution_provider}; this plan would not measure what it claims"
            )
        if stream is not None:
            runner: Any = CudaRunner(
                ort, session, layout, template, output_names, stream.device, stream
            )
            io = "iobinding (torch CUDA tensors, user compute stream)"
        else:
            runner = make_cpu_runner(session, layout, template, output_names)
            io = "numpy views of torch tensors (zero copy in and out)"

        assert context.workload is not None
        for case, shapes in zip(context.workload.cases, expected):
            try:
                with torch.inference_mode():
                    got = runner(*case.args, **case.kwargs)
            except Exception as exc:
                raise ExportedModelDoesNotServe(
                    f"running case {case.name!r} failed: {summarize_error(exc, 400)}"
                ) from exc
            got_shapes = [tuple(t.shape) for t in iter_tensors(got)]
            if got_shapes != shapes:
                raise ExportedModelDoesNotServe(
                    f"case {case.name!r} gave output shapes {got_shapes}, eager gave {shapes}"
                )
        transform_record = self._transform_record()
        transform_record["seconds"] = round(transform_seconds, 4) if transform else None
        return {
            "runner": runner,
            "session": session,
            "session_model": session_model,
            "session_providers": used,
            "provider_options": {name: opts for name, opts in providers},
            "session_options": {**options_record, "session_seconds": round(session_seconds, 4)},
            "source": source,
            "transform": transform_record,
            "io": io,
            "coverage": coverage,
        }


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def _trt_profiles(layout: InputLayout) -> dict[str, str]:
    """TensorRT optimization profiles spanning the workload's shapes (dynamic inputs)."""
    if not layout.dynamic_dims:
        return {}

    def spec(which: int) -> str:
        return ",".join(
            f"{name}:{'x'.join(str(s) for s in ranges[which])}"
            for name, ranges in zip(layout.names, layout.shape_ranges)
        )

    return {
        "trt_profile_min_shapes": spec(0),
        "trt_profile_opt_shapes": spec(1),
        "trt_profile_max_shapes": spec(2),
    }


def _tool_problem(transform: str) -> str | None:
    """Is the tool the plan's precision transform needs importable?"""
    from dlopt.probing import try_import

    if transform == "quantize_dynamic":
        module, error = try_import("onnxruntime.quantization")
        if module is None:
            return f"onnxruntime.quantization does not import ({error}); int8 needs it"
    if transform == "float16":
        module, error = try_import("onnxruntime.transformers.float16")
        if module is None:
            return (
                "onnxruntime.transformers.float16 (the fp16 converter shipped in the "
                f"onnxruntime wheel) does not import ({error})"
            )
    return None
