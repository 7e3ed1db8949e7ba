"""The ONNX Runtime provider: one instance per (execution provider, precision) plan."""

from __future__ import annotations

import hashlib
import logging
import secrets
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from attrs import field, frozen

from dlopt.plugin import (
    BuiltPlan,
    Concurrency,
    DloptError,
    PlanNotApplicable,
    Precision,
    PreparedCase,
    Provider,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Quantization,
    Role,
    ServingTraits,
    capture_output,
    is_plain_name,
    iter_tensors,
    try_import,
)
from dlopt_onnxruntime import probe as _probe
from dlopt_onnxruntime.effective import (
    ASSIGNMENT_KEY,
    assignment_problem,
    describe_lost,
    fell_back,
    node_assignment,
    options_not_in_effect,
)
from dlopt_onnxruntime.export import (
    MANIFEST_FORMAT,
    MODEL_NAME,
    ExportedModelDoesNotServe,
    ExportRecord,
    InputLayout,
    NotLoadable,
    analyze_cases,
    copy_model,
    export_with_fallback,
    exporter_order,
    layout_from_json,
    layout_to_json,
    model_files,
    output_template,
    read_manifest,
    save_with_external_data,
    signature_hash,
    summarize_error,
    template_from_json,
    template_signature,
    template_to_json,
    write_manifest,
)
from dlopt_onnxruntime.options import (
    CONVOLUTION_OP_TYPES,
    OrtInt8Options,
    OrtInt8StaticOptions,
    OrtOptions,
)
from dlopt_onnxruntime.quantization import (
    QDQ_SUFFIX,
    CalibrationSet,
    QuantizationCoverage,
    calibration_set,
    quantize_dynamic_int8,
    quantize_static_int8,
)
from dlopt_onnxruntime.quantization import coverage as quantization_coverage
from dlopt_onnxruntime.quantization import describe as describe_ops
from dlopt_onnxruntime.records import (
    DynamicInt8Settings,
    ExportSource,
    Float16Settings,
    OpenSession,
    PreparedModel,
    SessionRecord,
    StaticInt8Settings,
    Transform,
    TransformRecord,
)

log = logging.getLogger(__name__)

#: Which precisions each execution provider offers here, and how.
_PRECISIONS: Mapping[str, frozenset[Precision]] = {
    # INT8: onnxruntime.quantization.quantize_dynamic (or quantize_static QDQ, calibrated).
    "CPUExecutionProvider": frozenset({Precision.FP32, Precision.INT8}),
    # FP32 turns TF32 off (use_tf32=0); FP16 converts the model (keeping fp32 I/O).
    "CUDAExecutionProvider": frozenset({Precision.FP32, Precision.TF32, Precision.FP16}),
    # TensorRT builds fp32 engines with TF32 tactics allowed; FP16 sets trt_fp16_enable.
    "TensorrtExecutionProvider": frozenset({Precision.TF32, Precision.FP16}),
    "OpenVINOExecutionProvider": frozenset({Precision.FP32}),
}

# Exported fp32 models of this process, by export signature: plans of one race share one
# export (copied into each plan's directory) instead of exporting again.
_SHARED_EXPORTS: dict[str, tuple[Path, ExportRecord]] = {}


def _text_map(value: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


#: ORT session config entry for busy-waiting of idle intra-op threads (off by default here).
SPINNING_KEY = "session.intra_op.allow_spinning"

#: Graph optimization levels at which ONNX Runtime fuses QDQ groups into integer kernels
#: (QLinearConv...); below them a QDQ model computes in fp32 between Q/DQ pairs.
_QDQ_FUSING_LEVELS = ("extended", "all")


@frozen
class OnnxRuntimeProvider(Provider):
    """Export the model to ONNX and run it with one ONNX Runtime execution provider.

    ``execution_provider`` is ONNX Runtime's EP name (``"CPUExecutionProvider"``,
    ``"CUDAExecutionProvider"``, ``"TensorrtExecutionProvider"``,
    ``"OpenVINOExecutionProvider"``...). ``precision`` selects the variant: ``INT8``
    quantizes (CPU; ``static_int8=True``: calibrated QDQ for convolutions, then dynamic
    for MatMul/Gemm; else dynamic only), ``FP16`` converts the model (CUDA) or enables
    fp16 engines (TensorRT). ``provider_options`` are passed to the EP on top of the ones
    set here and ``session_config`` are session config entries, both fixed for a variant
    registered in code. What users tune per race are the plan's options
    (:attr:`options_type`: graph optimization level, threads, spinning, exporter, opset,
    int8 op types...), passed in ``OptimizationPolicy(plan_options=...)``.

    A built plan can be saved (``decision.save_bundle``) and served again without the
    model by :meth:`load` (``dlopt.load_bundle``).
    """

    name: str
    execution_provider: str = "CPUExecutionProvider"
    # A lambda: mypy's attrs plugin takes no classmethod as a converter.
    precision: Precision = field(
        default=Precision.FP32, converter=lambda value: Precision.parse(value)
    )
    provider_options: dict[str, str] = field(factory=dict, converter=_text_map)
    session_config: dict[str, str] = field(factory=dict, converter=_text_map)
    #: Device type the plan's inputs live on; derived from the EP when ``None``.
    device_type: str | None = None
    #: INT8 on CPU: calibrated static QDQ for convolutions (then dynamic for MatMul/Gemm)
    #: instead of dynamic quantization only.
    static_int8: bool = False
    #: The plan's options: :class:`OrtOptions`, plus the int8 plans' own.
    options_type: type[OrtOptions] = field(init=False, repr=False, eq=False)
    #: What to install when probing raises (the ONNX Runtime flavour for the EP's device).
    install_hint: str = field(init=False, repr=False, eq=False)
    #: Int8 on CPU: static where calibrated (``static_int8``), else dynamic.
    quantization: Quantization | None = field(init=False, repr=False, eq=False)

    role = Role.CHALLENGER

    @quantization.default
    def _default_quantization(self) -> Quantization | None:
        if self.precision is not Precision.INT8:
            return None
        return Quantization.STATIC if self.static_int8 else Quantization.DYNAMIC

    @options_type.default
    def _default_options_type(self) -> type[OrtOptions]:
        return {
            Transform.QUANTIZE_DYNAMIC: OrtInt8Options,
            Transform.QUANTIZE_STATIC: OrtInt8StaticOptions,
        }.get(self._transform_kind(), OrtOptions)

    @install_hint.default
    def _default_install_hint(self) -> str:
        return (
            _probe.GPU_INSTALL_HINT if self.plan_device_type == "cuda" else _probe.CPU_INSTALL_HINT
        )

    # ------------------------------------------------------------------ description
    @property
    def plan_device_type(self) -> str:
        if self.device_type:
            return self.device_type
        return _probe.EP_INFO.get(self.execution_provider, ("cpu", ""))[0]

    def execution_provider_hint(self) -> str:
        """How to make this plan's EP usable (what the probe says when it is not)."""
        if self.execution_provider == "TensorrtExecutionProvider":
            return _probe.tensorrt_ep_hint()
        if self.execution_provider in _probe.EP_INFO:
            return _probe.EP_INFO[self.execution_provider][1]
        return (
            f"install an onnxruntime build that includes {self.execution_provider} "
            "(see onnxruntime.ai/docs/execution-providers)"
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
    def availability(self, context: ProviderContext) -> ProviderAvailability:
        """The layered probe (metadata, import, a tiny session with the EP); the base
        class's ``probe`` turns an exception into "unavailable" and caches the answer."""
        versions = _probe.sdk_versions()
        hint = self.install_hint
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
        problem = _tool_problem(self._transform_kind())
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
                reason, self.execution_provider_hint(), sdk_versions=versions, details=details
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
        """Export ``model`` for the prepared cases, transform it, open a session.

        Exports with the example inputs of ``context.cases`` (on the device plans are
        called with), makes dynamic exactly the dimensions that vary between the cases,
        and takes the output structure and shapes from their reference outputs. Uses the
        race's probe result (``context.availability``) when given.
        """
        options: OrtOptions = self.plan_options(context)
        self.require_available(context)
        self._refuse_a_model_without_convolutions(model, options, context)
        cases = self.cases_with_reference(model, context)
        self.refuse_training_mode(model)
        import onnxruntime as ort

        try:
            layout = analyze_cases(cases)
        except DloptError as exc:
            raise ProviderBuildError(str(exc)) from exc
        example = cases[layout.example_case]
        template = output_template(example.reference)
        expected = [[tuple(t.shape) for t in iter_tensors(case.reference)] for case in cases]
        output_count = len(expected[layout.example_case])
        if output_count == 0:
            raise ProviderBuildError("the model returns no tensors; nothing to export")
        output_names = [f"output_{i}" for i in range(output_count)]
        calibration = None
        if self._transform_kind() is Transform.QUANTIZE_STATIC:
            assert isinstance(options, OrtInt8StaticOptions)
            if options.graph_optimization_level not in _QDQ_FUSING_LEVELS:
                raise ProviderBuildError(
                    f"{self.name}: graph_optimization_level {options.graph_optimization_level!r} "
                    "does not fuse QDQ groups into int8 kernels, so the model would compute "
                    "in fp32 between quantize/dequantize pairs; use 'extended' or 'all'"
                )
            calibration = calibration_set(cases, layout, options.calibration_file)

        plan_dir = context.plan_dir(self.name)
        export_signature = {
            "format": MANIFEST_FORMAT,
            "model": {
                "class": f"{type(model).__module__}.{type(model).__qualname__}",
                "weights": weights_digest(model),
            },
            "inputs": layout.signature(),
            "outputs": output_count,
            "torch": torch.__version__,
            "exporter": options.exporter,
            "opset": options.opset,
        }
        export_key = signature_hash(export_signature)
        plan_signature = {
            "export": export_key,
            "plan": self._transform_record(options, calibration).signature(),
            "onnxruntime": ort.__version__,
        }
        plan_key = signature_hash(plan_signature)
        setup = _BuildSetup(
            ort, context, options, plan_dir, layout, template, output_names, cases, expected,
            calibration,
        )  # fmt: skip

        def finish(record: ExportRecord, source: ExportSource, transform: bool) -> PreparedModel:
            return self._finish(setup, source, transform)

        built: PreparedModel | None = None
        record: ExportRecord | None = None
        manifest = read_manifest(plan_dir)
        if manifest and manifest.get("plan_key") == plan_key:
            try:
                record = ExportRecord(**manifest["export_record"])
                if not (plan_dir / manifest["session_model"]).exists():
                    raise FileNotFoundError(manifest["session_model"])
                built = finish(record, ExportSource.MANIFEST, transform=False)
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
                    built = finish(record, ExportSource.SHARED, transform=True)
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
                    exporters=exporter_order(options.exporter),
                    opset=options.opset,
                    finish=lambda rec: finish(rec, ExportSource.EXPORTED, transform=True),
                )
            except ProviderBuildError:
                raise
            except DloptError as exc:
                raise ProviderBuildError(str(exc)) from exc
        assert record is not None and built is not None
        _SHARED_EXPORTS[export_key] = (plan_dir / MODEL_NAME, record)

        session_model = built.session_model
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
                "session_model": session_model.name,
                "input_names": list(layout.names),
                "output_names": output_names,
                "dynamic_axes": layout.dynamic_dims,
            },
        )
        artifacts = {"manifest": manifest_path}
        for file in model_files(plan_dir / MODEL_NAME):
            artifacts["onnx_model" if file.name == MODEL_NAME else file.name] = file
        if session_model.name != MODEL_NAME:
            for file in model_files(session_model):
                artifacts["session_model" if file == session_model else file.name] = file
        try:
            outputs_json: Any = template_to_json(template)
            load_problem = None
        except NotLoadable as exc:
            outputs_json, load_problem = None, str(exc)
        # A structure JSON cannot describe comes back from the model's own reference
        # outputs (a plan cache hit has them), once they match this.
        signature = template_signature(template) if load_problem is not None else None
        metadata = {
            **built.opened.record.metadata(),
            "onnxruntime": ort.__version__,
            "flavour": _probe.detect_installation().flavour,
            "exporter": record.exporter,
            "opset": record.opset,
            "export_fallback_error": record.fallback_error,
            "export_seconds": round(record.seconds, 4),
            "export_source": built.source.value,
            "reused_export": built.source is not ExportSource.EXPORTED,
            "transform": built.transform.metadata(),
            "input_names": list(layout.names),
            "output_names": output_names,
            "dynamic_axes": layout.dynamic_dims,
            # How one export serves several batch sizes (the throughput objective's report).
            "input_shapes": layout.shape_support(),
            "example_case": example.name,
            # What load() needs to serve the saved files again without the model.
            "session_model": session_model.name,
            "layout": layout_to_json(layout),
            "outputs": outputs_json,
            "load_problem": load_problem,
            "output_signature": signature,
            "artifact_files": {name: path.name for name, path in artifacts.items()},
            # Quantizing plans: quantized_ops, quantizable_ops, quantized_fraction, op types.
            **(built.coverage.metadata() if built.coverage is not None else {}),
        }
        return _plan(built.opened, self.precision, artifacts, metadata)

    # ------------------------------------------------------------------------- load
    def load(
        self, directory: Path, metadata: dict[str, Any], context: ProviderContext
    ) -> BuiltPlan:
        """Serve a saved plan again: its ONNX file in ``directory`` -> a new session.

        ``directory`` holds the files of the built plan's artifacts under their file
        names (as a bundle holds them); ``metadata`` is the plan's recorded metadata,
        which names the session's model file and records the input layout and output
        structure. The session gets the settings ``context.options`` and
        ``context.target`` give, as at build. Nothing is exported and no model is needed,
        except for outputs JSON cannot describe (a class): their structure is taken from
        the reference outputs in ``context.cases`` (:meth:`_live_output_template`).
        Raises :class:`ProviderBuildError` naming what is missing or unreadable.
        """
        options: OrtOptions = self.plan_options(context)
        directory = Path(directory)
        live_template = None
        if metadata.get("load_problem"):
            live_template = self._live_output_template(metadata, context)
        if metadata.get("execution_provider") != self.execution_provider:
            raise ProviderBuildError(
                f"{self.name}: the saved plan ran with "
                f"{metadata.get('execution_provider')!r}, this plan runs with "
                f"{self.execution_provider}; load it with the plan that saved it"
            )
        file_name = metadata.get("session_model")
        if not is_plain_name(file_name):
            raise ProviderBuildError(
                f"{self.name}: the saved plan's metadata names session_model {file_name!r}, "
                "which is not a plain file name; refusing to open it"
            )
        session_model = directory / str(file_name)
        if not session_model.is_file():
            raise ProviderBuildError(
                f"{self.name}: {session_model} is missing; the saved plan's directory must "
                "hold the plan's artifact files under their names"
            )
        try:
            layout = layout_from_json(metadata.get("layout"))
            template = (
                live_template
                if live_template is not None
                else template_from_json(metadata.get("outputs"))
            )
            output_names = metadata.get("output_names")
            if not isinstance(output_names, list) or len(output_names) != len(
                iter_tensors(template)
            ):
                raise ValueError(f"output_names {output_names!r:.100} do not match the outputs")
            output_names = [str(n) for n in output_names]
        except ValueError as exc:
            raise ProviderBuildError(
                f"{self.name}: the saved plan's metadata cannot be read ({exc}); it may come "
                "from another dlopt-onnxruntime version: rebuild the plan"
            ) from None
        import onnxruntime as ort

        opened = self._open_session(
            ort, context, options, session_model, context.plan_dir(self.name), layout,
            template, output_names,
        )  # fmt: skip
        artifacts = {
            str(name): directory / file
            for name, file in (metadata.get("artifact_files") or {}).items()
            if is_plain_name(file) and (directory / file).is_file()
        }
        loaded = {
            **metadata,
            **opened.record.metadata(),
            "onnxruntime": ort.__version__,
            "flavour": _probe.detect_installation().flavour,
            "export_source": ExportSource.LOADED.value,
            "reused_export": True,
            "loaded_from": str(directory),
        }
        return _plan(opened, self.precision, artifacts, loaded)

    def _live_output_template(self, metadata: dict[str, Any], context: ProviderContext) -> Any:
        """The output structure of a saved plan whose outputs JSON cannot describe, taken
        from the model's own reference outputs in ``context.cases`` (a plan cache hit
        has them), once they match the recorded signature."""
        problem = metadata["load_problem"]
        if not context.cases:
            raise ProviderBuildError(
                f"{self.name}: this saved plan cannot be loaded without the model's own "
                f"outputs: {problem}; the plan cache brings it back (it calls the model on "
                "the workload), a bundle alone cannot: rebuild the plan from the model"
            )
        example = metadata.get("example_case")
        case = next((c for c in context.cases if c.name == example), context.cases[0])
        template = output_template(case.reference)
        expected = metadata.get("output_signature")
        found = template_signature(template)
        if found != expected:
            raise ProviderBuildError(
                f"{self.name}: the model's outputs ({found['type']}, "
                f"{len(found['tensors'])} tensors) are not the saved plan's "
                f"({expected!r:.200}); the plan was saved from another model: rebuild it"
            )
        return template

    # ------------------------------------------------------------------ internals
    def _config(self, options: OrtOptions) -> dict[str, str]:
        """Session config entries: the plugin's defaults, the variant's own, then options."""
        config: dict[str, str] = {}
        if self.plan_device_type == "cpu":
            # Idle intra-op threads otherwise spin ~50-100 ms after every run and slow
            # whatever runs next on the same cores: eager right after an ORT burst ran
            # 2.2x slower here, so an interleaved race overstated ORT's speedup (and so
            # would any process doing other work between requests). Costs ORT itself
            # 1.2-1.6x on tiny batch-1 models; opt back in with allow_spinning.
            config[SPINNING_KEY] = "0"
        config.update(self.session_config)
        if options.allow_spinning is not None:
            config[SPINNING_KEY] = "1" if options.allow_spinning else "0"
        config.update(options.session_config)
        return config

    def _transform_kind(self) -> Transform:
        if self.execution_provider == "CPUExecutionProvider" and self.precision is Precision.INT8:
            return Transform.QUANTIZE_STATIC if self.static_int8 else Transform.QUANTIZE_DYNAMIC
        if self.execution_provider == "CUDAExecutionProvider" and self.precision is Precision.FP16:
            return Transform.FLOAT16
        return Transform.NONE

    def _transform_record(
        self, options: OrtOptions, calibration: CalibrationSet | None
    ) -> TransformRecord:
        kind = self._transform_kind()
        settings: DynamicInt8Settings | StaticInt8Settings | Float16Settings | None = None
        if kind is Transform.QUANTIZE_STATIC:
            assert isinstance(options, OrtInt8StaticOptions) and calibration is not None
            settings = StaticInt8Settings(
                static_op_types=options.int8_static_op_types,
                dynamic_op_types=options.int8_dynamic_op_types,
                per_channel=options.int8_per_channel,
                reduce_range=_reduce_range(options.int8_reduce_range),
                calibration=calibration.record(),
            )
        elif kind is Transform.QUANTIZE_DYNAMIC:
            assert isinstance(options, OrtInt8Options)
            settings = DynamicInt8Settings(
                op_types=options.int8_op_types,
                per_channel=options.int8_per_channel,
                reduce_range=_reduce_range(options.int8_reduce_range),
            )
        elif kind is Transform.FLOAT16:
            settings = Float16Settings()
        return TransformRecord(self.execution_provider, self.precision.value, kind, settings)

    def _refuse_a_model_without_convolutions(
        self, model: torch.nn.Module, options: OrtOptions, context: ProviderContext
    ) -> None:
        """Static int8 of convolutions only (its default) does not apply to a model with no
        convolution weight (no parameter or buffer of 3 or more dimensions; a functional
        ``conv2d``, which the operator mix's module hooks miss, has one too): refused
        before the export, which cost 2.4 s on a transformer encoder only to find no Conv
        node. The profiled mix, where there is one, is quoted in the message."""
        if not isinstance(options, OrtInt8StaticOptions):
            return
        if not set(options.int8_static_op_types) <= CONVOLUTION_OP_TYPES:
            return
        if any(t.dim() >= 3 for t in (*model.parameters(), *model.buffers())):
            return
        mix = context.operator_mix
        profiled = f" (one profiled reference call: {mix.describe()})" if mix is not None else ""
        raise PlanNotApplicable(
            f"{self.name}: the model has no convolution{profiled}, and this plan quantizes "
            f"only {', '.join(options.int8_static_op_types)} statically: it would leave "
            "nothing quantized that onnxruntime_cpu_int8 does not quantize. To race it, set "
            "its int8_static_op_types option to the model's compute ops "
            f"(plan_options={{{self.name!r}: {{'int8_static_op_types': ['MatMul', 'Gemm'], "
            "'int8_dynamic_op_types': []}})"
        )

    def _transform(self, fp32_path: Path, setup: _BuildSetup) -> Path:
        """The model file the session opens: ``fp32_path`` quantized or converted."""
        options, plan_dir, kind = setup.options, setup.plan_dir, self._transform_kind()
        if kind is Transform.QUANTIZE_STATIC:
            assert isinstance(options, OrtInt8StaticOptions) and setup.calibration is not None
            target = plan_dir / "model.int8_static.onnx"
            reduce_range = _reduce_range(options.int8_reduce_range)
            if not options.int8_dynamic_op_types:
                return quantize_static_int8(
                    fp32_path, target, setup.calibration,
                    op_types=options.int8_static_op_types,
                    per_channel=options.int8_per_channel, reduce_range=reduce_range,
                )  # fmt: skip
            # Calibrate on the fp32 model, then quantize MatMul/Gemm of the QDQ model
            # dynamically (as onnxruntime_cpu_int8 does); the QDQ step goes first because
            # ONNX Runtime's calibration runs the model it quantizes.
            with tempfile.TemporaryDirectory(dir=plan_dir) as scratch:
                qdq = quantize_static_int8(
                    fp32_path, Path(scratch) / "model.qdq.onnx", setup.calibration,
                    op_types=options.int8_static_op_types,
                    per_channel=options.int8_per_channel, reduce_range=reduce_range,
                )  # fmt: skip
                return quantize_dynamic_int8(
                    qdq, target, op_types=options.int8_dynamic_op_types,
                    per_channel=False, reduce_range=reduce_range,
                )  # fmt: skip
        if kind is Transform.QUANTIZE_DYNAMIC:
            assert isinstance(options, OrtInt8Options)
            return quantize_dynamic_int8(
                fp32_path, plan_dir / "model.int8.onnx",
                op_types=options.int8_op_types, per_channel=options.int8_per_channel,
                reduce_range=_reduce_range(options.int8_reduce_range),
            )  # fmt: skip
        if kind is Transform.FLOAT16:
            return self._convert_fp16(fp32_path, plan_dir / "model.fp16.onnx")
        return fp32_path

    def _check_coverage(
        self, fp32_path: Path, session_model: Path, options: OrtOptions
    ) -> QuantizationCoverage:
        """Count what the int8 graph quantized; refuse a plan that would change nothing."""
        found = quantization_coverage(fp32_path, session_model)
        if self._transform_kind() is Transform.QUANTIZE_STATIC:
            assert isinstance(options, OrtInt8StaticOptions)
            static = {op: n for op, n in found.quantized.items() if op.endswith(QDQ_SUFFIX)}
            if not static:
                raise ProviderBuildError(
                    f"{self.name}: int8 static quantization quantized no "
                    f"{', '.join(options.int8_static_op_types)} node (the model's compute "
                    f"ops: {describe_ops(found.quantizable)}): its dynamic part alone would "
                    "compute what onnxruntime_cpu_int8 computes, so it is not raced. Set its "
                    "int8_static_op_types option to this model's compute ops (for an MLP, "
                    f"plan_options={{{self.name!r}: {{'int8_static_op_types': ['MatMul', "
                    "'Gemm'], 'int8_dynamic_op_types': []}}) or exclude the plan"
                )
        elif found.quantized_ops == 0:
            assert isinstance(options, OrtInt8Options)
            raise ProviderBuildError(
                f"{self.name}: int8 dynamic quantization {found.summary()}: this plan would "
                f"compute what the fp32 plan on {self.execution_provider} (onnxruntime_cpu) "
                "computes, so it is not raced as int8. It quantizes "
                f"{', '.join(options.int8_op_types)} nodes; set its int8_op_types option to "
                "include this model's compute ops (for example plan_options="
                f"{{{self.name!r}: {{'int8_op_types': ['MatMul', 'Conv']}}}}) or exclude the plan"
            )
        log.info(
            "%s: %s, in int8: %s; left in fp32: %s",
            self.name,
            found.summary(),
            describe_ops(found.quantized),
            describe_ops(found.unquantized),
        )
        return found

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
        self,
        context: ProviderContext,
        cache_root: Path,
        layout: InputLayout,
        stream_ptr: int | None,
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
                cache = cache_root / "trt_cache"
                cache.mkdir(parents=True, exist_ok=True)
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

    def _open_session(
        self,
        ort: Any,
        context: ProviderContext,
        options: OrtOptions,
        session_model: Path,
        cache_root: Path,
        layout: InputLayout,
        template: Any,
        output_names: list[str],
    ) -> OpenSession:
        """A session on ``session_model`` with this plan's settings, and its runner.

        Shared by build and load, so a loaded plan runs exactly as the raced one did.
        """
        from dlopt_onnxruntime.session import CudaRunner, make_cpu_runner, session_options

        threads = options.intra_op_threads or context.target.threads or torch.get_num_threads()
        config = self._config(options)
        sess_options, options_record = session_options(
            ort, threads=threads, optimization=options.graph_optimization_level, extra=config
        )
        stream = None
        if self.plan_device_type == "cuda":
            device = torch.device("cuda", self._device_index(context))
            current = torch.cuda.current_stream(device)
            # Run on torch's current stream; the default (legacy) stream has no handle
            # ORT can adopt, so then the plan gets its own stream, ordered by waits.
            stream = current if current.cuda_stream != 0 else torch.cuda.Stream(device)
        providers = self._provider_list(
            context, cache_root, layout, stream.cuda_stream if stream is not None else None
        )
        # Where this ONNX Runtime can (1.31+), record which EP takes which node.
        if hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"):
            sess_options.add_session_config_entry(ASSIGNMENT_KEY, "1")
        session_start = time.perf_counter()
        # ONNX Runtime prints "EP Error ... Falling back" to stdout when it retries.
        with capture_output(f"build {self.name}") as printed:
            try:
                session = ort.InferenceSession(
                    str(session_model), sess_options=sess_options, providers=providers
                )
            except Exception as exc:
                failure: Exception | None = exc
            else:
                failure = None
        lines = printed.result.lines() if printed.result else ()
        said = _probe.relevant_log(printed.result) or _probe.first_line("\n".join(lines))
        if failure is not None:
            raise ProviderBuildError(
                f"ONNX Runtime could not load {session_model.name} with "
                f"{self.execution_provider}: {summarize_error(failure)}"
                + (f" (it printed: {said})" if said else "")
            ) from failure
        session_seconds = time.perf_counter() - session_start
        used = list(session.get_providers())
        if self.execution_provider not in used:
            raise ProviderBuildError(
                f"the session fell back to {', '.join(used)} instead of using "
                f"{self.execution_provider}; this plan would not measure what it claims"
                + (f" (onnxruntime printed: {said})" if said else "")
            )
        try:
            effective = session.get_provider_options()
        except Exception:  # an ONNX Runtime without it: nothing to compare
            effective = {}
        lost, unconfirmed = options_not_in_effect(providers, effective, used)
        problems = [describe_lost(lost)] if lost else []
        if fell_back(lines):
            problems.insert(
                0,
                "ONNX Runtime could not create it as asked and retried with fallback "
                "providers, without the provider options",
            )
        if problems:
            raise ProviderBuildError(
                f"{self.name}: the session does not run with what the plan set "
                f"({'; '.join(problems)})"
                + (f"; onnxruntime printed: {said}" if said else "")
                + ". A plan without them would not measure what it claims"
            )
        assignment = node_assignment(session)
        problem = assignment_problem(self.execution_provider, assignment)
        if problem is not None:
            raise ProviderBuildError(f"{self.name}: {problem}")
        unknown = [i.name for i in session.get_inputs() if i.name not in layout.names]
        if unknown:
            raise ExportedModelDoesNotServe(
                f"{session_model.name} takes inputs {unknown} that the input layout "
                f"({', '.join(layout.names)}) does not feed"
            )
        if stream is not None:
            runner: Any = CudaRunner(
                ort, session, layout, template, output_names, stream.device, stream
            )
            io = "iobinding (torch CUDA tensors, user compute stream)"
        else:
            runner = make_cpu_runner(session, layout, template, output_names)
            io = "numpy views of torch tensors (zero copy in and out)"
        record = SessionRecord(
            execution_provider=self.execution_provider,
            session_providers=tuple(used),
            provider_options={name: opts for name, opts in providers},
            session_options={**options_record, "session_seconds": round(session_seconds, 4)},
            intra_op_allow_spinning=config.get(SPINNING_KEY),
            io=io,
            node_assignment=assignment,
            provider_options_unconfirmed=unconfirmed,
        )
        return OpenSession(runner, session, record)

    def _finish(self, setup: _BuildSetup, source: ExportSource, transform: bool) -> PreparedModel:
        """Transform the exported model (or reuse the transformed file), open a session on
        it and run every case through it; :class:`ExportedModelDoesNotServe` when a case
        fails or gives other output shapes than eager."""
        fp32_path = setup.plan_dir / MODEL_NAME
        transform_start = time.perf_counter()
        if transform:
            session_model = self._transform(fp32_path, setup)
        else:
            manifest = read_manifest(setup.plan_dir) or {}
            session_model = setup.plan_dir / manifest.get("session_model", MODEL_NAME)
        transform_seconds = time.perf_counter() - transform_start
        coverage = None
        if self._transform_kind().quantizes:
            coverage = self._check_coverage(fp32_path, session_model, setup.options)

        opened = self._open_session(
            setup.ort, setup.context, setup.options, session_model, setup.plan_dir,
            setup.layout, setup.template, setup.output_names,
        )  # fmt: skip
        runner = opened.runner
        assert runner is not None
        for case, shapes in zip(setup.cases, setup.expected):
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
        transform_record = attrs.evolve(
            self._transform_record(setup.options, setup.calibration),
            seconds=round(transform_seconds, 4) if transform else None,
        )
        return PreparedModel(opened, session_model, source, transform_record, coverage)


@frozen(eq=False)
class _BuildSetup:
    """What one build knows once the cases are analysed: everything ``_finish`` needs to
    turn an exported file into a served session."""

    ort: Any
    context: ProviderContext
    options: OrtOptions
    plan_dir: Path
    layout: InputLayout
    template: Any
    output_names: list[str]
    cases: tuple[PreparedCase, ...]
    #: Per case, the output shapes eager gave.
    expected: list[list[tuple[int, ...]]]
    calibration: CalibrationSet | None


def _plan(
    opened: OpenSession, precision: Precision, artifacts: dict[str, Path], metadata: dict[str, Any]
) -> BuiltPlan:
    """The BuiltPlan over an opened session; closing drops the session and its runner."""
    assert opened.runner is not None
    return BuiltPlan(
        runner=opened.runner,
        precision=precision,
        artifacts=artifacts,
        metadata=metadata,
        on_close=opened.close,
        # A session's run() may be called from many threads, in any grad mode (ONNX
        # Runtime sees arrays); shapes beyond the raced ones only along dynamic axes.
        serving=ServingTraits(
            concurrency=Concurrency.CONCURRENT,
            any_grad_mode=True,
            dynamic_shapes=bool(metadata.get("dynamic_axes")),
        ),
    )


def weights_digest(model: torch.nn.Module) -> str:
    """A content hash of the model's parameters and buffers (names, dtypes, shapes, bytes).

    Part of the export signature: a later build reuses an export only for the same
    weights. A tensor whose bytes cannot be read (a quantized or sparse layout) makes
    the digest unique, so nothing is reused for that model.
    """
    digest = hashlib.blake2b(digest_size=16)
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=False).items():
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            try:
                data = tensor.detach().reshape(-1).contiguous().cpu().view(torch.uint8)
            except (RuntimeError, TypeError, AttributeError):
                return f"unhashable-{secrets.token_hex(8)}"
            digest.update(memoryview(data.numpy()))
    return digest.hexdigest()


def _reduce_range(option: bool | None) -> bool:
    """The int8 plans' ``int8_reduce_range``: as set, else 7-bit weights where u8 x s8
    saturates (x86 without VNNI)."""
    return _probe.int8_saturates() if option is None else option


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


def _tool_problem(transform: Transform) -> str | None:
    """Is the tool the plan's precision transform needs importable?"""
    if transform.quantizes:
        module, error = try_import("onnxruntime.quantization")
        if module is None:
            return f"onnxruntime.quantization does not import ({error}); int8 needs it"
    if transform is Transform.FLOAT16:
        module, error = try_import("onnxruntime.transformers.float16")
        if module is None:
            return (
                "onnxruntime.transformers.float16 (the fp16 converter shipped in the "
                f"onnxruntime wheel) does not import ({error})"
            )
    return None
