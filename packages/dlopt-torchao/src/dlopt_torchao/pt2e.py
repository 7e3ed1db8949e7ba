"""Static int8 through PT2E on CPU: ``torch.export``, torchao's x86 Inductor quantizer,
calibration on the workload's own inputs, then TorchInductor (``torchao_pt2e_int8_static``).

The quantizer lives in ``torchao.quantization.pt2e`` (torch 2.13 no longer ships
``torch.ao.quantization.quantize_pt2e``). It quantizes convolutions and linears
statically: per-channel int8 weights, per-tensor int8 activations whose ranges the
calibration passes observe. Inductor then lowers the quantize/dequantize pairs to oneDNN's
int8 kernels, which pay off where the CPU has int8 dot-product instructions (VNNI or AMX);
the plan is offered there only.

Probe layers: torchao (installed, paired, imports), the quantizer module present (found
without importing it: its import registers Inductor passes), TorchInductor (through
dlopt-fx), then the CPU's int8 instructions.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
from pathlib import Path
from typing import Any

import torch
from attrs import field, frozen

from dlopt.plugin import (
    BuiltPlan,
    ExecutionTarget,
    Precision,
    PreparedCase,
    Provider,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Quantization,
    Role,
    WorkloadCase,
    atomic_write_text,
    cpu_info,
    distribution_version,
    iter_tensors,
    map_tensors,
    read_npz,
    try_import,
)
from dlopt_torchao.calibration import (
    CALIBRATION_RECORD,
    apply_recorded_qparams,
    calibration_record,
    example_from_record,
    read_calibration_record,
)
from dlopt_torchao.cpu import INT8_CPU_HINT, int8_dot_flags
from dlopt_torchao.provider import (
    compute_layers,
    layer_coverage,
    probe_inductor,
    probe_torchao,
    refuse_unquantized,
)

QUANTIZER_MODULE = "torchao.quantization.pt2e.quantizer.x86_inductor_quantizer"
#: The graph ops that carry a quantized weight after ``convert_pt2e`` (one per layer).
_WEIGHT_DEQUANTIZE = "quantized_decomposed.dequantize_per_channel"


@frozen
class PT2EOptions:
    """What a user may set for ``torchao_pt2e_int8_static``."""

    calibration_passes: int = field(
        default=1,
        metadata={
            "help": "how many times every calibration input runs through the observers "
            "(the workload's cases, then the calibration file's entries); the ranges are "
            "min/max, so more passes over the same inputs change nothing unless the model "
            "is random"
        },
    )
    calibration_file: str | None = field(
        default=None,
        metadata={
            "help": "a .npz file (numpy.savez, numeric arrays only, read without pickle) "
            "of extra calibration inputs, one call per entry with the entry as the model's "
            "one positional argument; calibrate on traffic the workload's cases do not cover"
        },
    )

    aot_package: bool = field(
        default=True,
        metadata={
            "help": "when this plan is selected with the plan cache on, also save its "
            "converted int8 graph as an AOTInductor package (torch.export, compiled ahead "
            "of time with the plan's Inductor options: about as long as the plan's own "
            "compile), so a cache hit loads it instead of compiling again; False skips it"
        },
    )

    def __attrs_post_init__(self) -> None:
        if (
            not isinstance(self.calibration_passes, int)
            or isinstance(self.calibration_passes, bool)
            or self.calibration_passes < 1
        ):
            raise ValueError(
                f"calibration_passes must be an integer >= 1, got {self.calibration_passes!r}"
            )
        if self.calibration_file is not None and Path(self.calibration_file).suffix != ".npz":
            raise ValueError(
                f"calibration_file must name a .npz file (numpy.savez), got "
                f"{self.calibration_file!r}"
            )


def read_calibration_file(path_text: str) -> list[tuple[str, torch.Tensor]]:
    """The ``(entry name, tensor)`` pairs of a ``.npz`` calibration file, in its order,
    never unpickled.

    Raises :class:`ProviderBuildError` saying what is wrong: not a regular file, not an
    ``.npz`` archive, an entry that needs pickle or is not numeric.
    """
    arrays = read_npz(
        path_text,
        where=f"calibration_file {path_text!r}",
        error=ProviderBuildError,
        kinds="biuf",
    )
    if not arrays:
        raise ProviderBuildError(f"calibration_file {path_text!r} holds no arrays")
    return [(key, torch.from_numpy(array)) for key, array in arrays]


def _module_present(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it (its parents are)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _import_quantizer() -> tuple[Any, Any, Any]:
    """``(quantize_pt2e module, x86 quantizer module, its pre-grad pass)``.

    Importing the quantizer module sets ``torch._inductor.config.pre_grad_custom_pass``
    for the whole process; the previous value is put back, and this plan passes the pass
    to its own compiles instead.
    """
    import torch._inductor.config as inductor_config

    before = inductor_config.pre_grad_custom_pass
    try:
        quantize_pt2e, error = try_import("torchao.quantization.pt2e.quantize_pt2e")
        x86, x86_error = try_import(QUANTIZER_MODULE)
    finally:
        inductor_config.pre_grad_custom_pass = before
    if quantize_pt2e is None or x86 is None:
        raise ProviderBuildError(
            f"torchao's PT2E quantization does not import: {error or x86_error}"
        )
    passes, _ = try_import("torchao.quantization.pt2e.inductor_passes.x86")
    return quantize_pt2e, x86, getattr(passes, "quant_lift_up", None)


def _inductor_options(lift_up: Any) -> dict[str, Any]:
    """The Inductor options the converted int8 graph compiles with, compiled plan and
    package alike: freezing (oneDNN's int8 weight prepacking and the x86 lowering patterns
    run on frozen weights) and torchao's pre-grad pass where this torchao has it."""
    options: dict[str, Any] = {"freezing": True}
    if lift_up is not None:
        options["pre_grad_custom_pass"] = lift_up
    return options


def _dynamic_shapes(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Every tensor dim ``Dim.AUTO`` (export keeps dynamic what the model lets vary), by
    parameter name; the compiled plan then marks only the dims the cases vary."""
    from torch.utils._pytree import tree_map

    def auto(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return {dim: torch.export.Dim.AUTO for dim in range(value.dim())}
        return None

    bound = inspect.signature(model.forward).bind(*args, **kwargs)
    return {name: tree_map(auto, value) for name, value in bound.arguments.items()}


def _one_partition_per_call(graph_module: torch.fx.GraphModule, model: torch.nn.Module) -> int:
    """Give each call of a module that ``forward`` calls more than once its own source
    partition; returns how many nodes were labelled.

    A non-strict ``torch.export`` leaves ``source_fn_stack`` unset, and the quantizer's
    pattern matcher then groups nodes by their innermost module's name: the three calls of
    a ResNet bottleneck's one ``relu`` become a single partition with three outputs, which
    the x86 quantizer refuses ("Input partition has more than one output node"). Each
    call has its own key in ``nn_module_stack`` (``...relu@1``); labelling the nodes with it
    is what a strict export records.
    """
    calls: dict[str, set[str]] = {}
    for node in graph_module.graph.nodes:
        innermost = _innermost_module_call(node)
        if innermost is not None:
            calls.setdefault(innermost[1], set()).add(innermost[0])
    labelled = 0
    for node in graph_module.graph.nodes:
        innermost = _innermost_module_call(node)
        if innermost is None or len(calls[innermost[1]]) < 2:
            continue
        call_key, qualified_name = innermost
        try:
            module_type = type(model.get_submodule(qualified_name))
        except AttributeError:
            continue
        node.meta["source_fn_stack"] = [(call_key, module_type)]
        labelled += 1
    return labelled


def _innermost_module_call(node: torch.fx.Node) -> tuple[str, str] | None:
    """``(call key, module name)`` of the innermost module a node came from, for an
    operator node without ``source_fn_stack``; ``None`` otherwise."""
    stack = node.meta.get("nn_module_stack")
    if node.op != "call_function" or not stack or node.meta.get("source_fn_stack") is not None:
        return None
    call_key, (qualified_name, _) = list(stack.items())[-1]
    return str(call_key), str(qualified_name)


@frozen
class PT2EStaticInt8Provider(Provider):
    """``torch.export`` + torchao's ``X86InductorQuantizer`` (static int8) + Inductor."""

    name: str = "torchao_pt2e_int8_static"
    precision: Precision = Precision.INT8
    quantization = Quantization.STATIC
    role = Role.CHALLENGER
    options_type = PT2EOptions

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        target: ExecutionTarget = context.target
        if target.device_type != "cpu":
            return ProviderAvailability.unavailable(
                "static int8 through PT2E uses the x86 Inductor quantizer: CPU targets only, "
                f"not {target.device_type}"
            )
        _, refusal, details = probe_torchao({"quantizer": "X86InductorQuantizer"})
        if refusal is not None:
            return refusal
        versions = {"torch": torch.__version__, "torchao": distribution_version("torchao")}
        if not _module_present(QUANTIZER_MODULE):
            return ProviderAvailability.unavailable(
                f"this torchao has no {QUANTIZER_MODULE} (PT2E quantization moved to "
                "torchao.quantization.pt2e in torchao 0.10+)",
                'pip install -U "torchao>=0.10"',
                sdk_versions=versions,
                details=details,
            )
        inductor = probe_inductor("cpu")
        details.update({k: str(v) for k, v in inductor.details.items()})
        if not inductor.available:
            return ProviderAvailability.unavailable(
                f"{self.name} compiles with TorchInductor, but {inductor.reason}",
                inductor.install_hint,
                sdk_versions=versions,
                details=details,
            )
        found = int8_dot_flags()
        details["int8_dot_flags"] = ",".join(found) or "none"
        if not found:
            return ProviderAvailability.unavailable(
                f"CPU ({cpu_info().model}) has no int8 dot-product instructions (VNNI or "
                "AMX-INT8): oneDNN's int8 convolutions and matmuls would be slower than fp32",
                INT8_CPU_HINT,
                sdk_versions=versions,
                details=details,
            )
        return ProviderAvailability.ok(sdk_versions=versions, details=details)

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        """Export a copy, annotate, calibrate on every case (and the calibration file),
        convert, and compile lazily with freezing (oneDNN weight prepacking needs it)."""
        options: PT2EOptions = context.options or PT2EOptions()
        if context.target.device_type != "cpu":
            raise ProviderBuildError(f"{self.name}: CPU targets only")
        # Brought back from a bundle or a cache record: the calibration it raced with.
        recorded = read_calibration_record(context.saved_plan_dir, self.name)
        cases: list[PreparedCase | WorkloadCase] = list(context.build_cases())
        if not cases and recorded is None:
            raise ProviderBuildError(
                f"{self.name}: static quantization calibrates on the workload's inputs, and "
                "this build got none (nor a calibration recorded when it was raced)"
            )
        extra = (
            read_calibration_file(options.calibration_file)
            if options.calibration_file is not None and recorded is None
            else []
        )
        if extra and any(
            len(case.args) != 1 or case.kwargs or not isinstance(case.args[0], torch.Tensor)
            for case in cases
        ):
            raise ProviderBuildError(
                f"{self.name}: option calibration_file gives one positional tensor per call, "
                "but this model's cases take other arguments; calibrate on the workload's "
                "cases (add cases) instead"
            )
        quantize_pt2e, x86, lift_up = _import_quantizer()
        layers = compute_layers(model)
        if recorded is not None:
            example_args, example_kwargs = example_from_record(recorded, self.name)
        else:
            # The largest case as the example: a batch of 1 would be specialised.
            example = max(cases, key=lambda c: sum(t.numel() for t in iter_tensors(c.args)))
            example_args, example_kwargs = example.args, example.kwargs
        plan_model = copy.deepcopy(model).eval()
        try:
            exported = torch.export.export(
                plan_model,
                example_args,
                example_kwargs,
                dynamic_shapes=_dynamic_shapes(plan_model, example_args, example_kwargs),
            ).module()
        except Exception as exc:
            raise ProviderBuildError(
                f"{self.name}: torch.export cannot capture this model ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); PT2E quantization needs an "
                "exportable model"
            ) from exc
        _one_partition_per_call(exported, plan_model)
        quantizer = x86.X86InductorQuantizer()
        # Without VNNI the int8 products may saturate: oneDNN's advice is a 7-bit range.
        reduce_range = not int8_dot_flags()
        quantizer.set_global(
            x86.get_default_x86_inductor_quantization_config(reduce_range=reduce_range)
        )
        calls = 0
        with torch.no_grad():
            try:
                prepared = quantize_pt2e.prepare_pt2e(exported, quantizer)
            except Exception as exc:
                raise ProviderBuildError(
                    f"{self.name}: the x86 Inductor quantizer could not annotate this model "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
                ) from exc
            if recorded is not None:
                apply_recorded_qparams(prepared, recorded, self.name)
            for _ in range(options.calibration_passes if recorded is None else 0):
                for case in cases:
                    prepared(*case.args, **case.kwargs)
                    calls += 1
                for key, tensor in extra:
                    try:
                        prepared(tensor.to(example_args[0].dtype))
                    except Exception as exc:
                        raise ProviderBuildError(
                            f"{self.name}: calibration_file entry {key!r} (shape "
                            f"{tuple(tensor.shape)}) does not run through the model: "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                        ) from exc
                    calls += 1
            record = recorded or calibration_record(prepared, example_args, example_kwargs)
            converted = quantize_pt2e.convert_pt2e(prepared)
        # One per quantized layer: the dequantize of a weight the conversion folded to int8.
        weights = sum(
            1
            for node in converted.graph.nodes
            if node.op == "call_function"
            and str(node.target).startswith(_WEIGHT_DEQUANTIZE)
            and node.args
            and getattr(node.args[0], "op", None) == "get_attr"
        )
        if weights == 0:
            raise refuse_unquantized(
                self.name,
                layers,
                "the x86 quantizer annotated no convolution or linear of this model",
            )
        from dlopt_fx.compiled import COMPILED_SERVING, compile_lazily

        runner, compile_metadata = compile_lazily(
            converted, tag=self.name, options=_inductor_options(lift_up), cases=cases
        )
        # What save_program packages: the converted graph, which is also what it calls.
        runner.source = (converted, converted)
        coverage = layer_coverage(layers, [])
        metadata: dict[str, Any] = {
            "plan": self.name,
            "quantizer": "X86InductorQuantizer (static: per-channel int8 weights, "
            "per-tensor int8 activations)",
            "reduce_range": reduce_range,
            "quantized_weights": weights,
            "quantizable_layers": coverage["quantizable_layers"],
            "quantizable_layer_types": coverage["quantizable_layer_types"],
            "calibration_calls": calls,
            "calibration_cases": [case.name for case in cases] if recorded is None else [],
            "calibration_file_entries": len(extra),
            **compile_metadata,
        }
        record_path = self.plan_dir(context) / CALIBRATION_RECORD
        atomic_write_text(record_path, json.dumps(record, allow_nan=False))
        metadata["calibration_record"] = (
            "reused from the saved plan" if recorded is not None else "recorded"
        )
        return BuiltPlan(
            runner=OrdinaryTensorInputs(runner),
            precision=self.precision,
            artifacts={"calibration": record_path},
            metadata=metadata,
            on_close=runner.close,
            serving=COMPILED_SERVING,
        )

    def save_program(
        self, plan: BuiltPlan, directory: Path, context: ProviderContext
    ) -> dict[str, Any] | None:
        """Save ``plan``'s converted int8 graph as an AOTInductor package in ``directory``
        (:func:`dlopt_fx.package.save_plan_package`, with the compiled plan's Inductor
        options: freezing, so oneDNN's int8 kernels and weight prepacking are lowered as
        the compiled plan lowers them, and torchao's pre-grad pass); its metadata, or
        ``None`` when the options say not to. Raises with the reason when the plan cannot
        be packaged."""
        options: PT2EOptions = context.options or PT2EOptions()
        if not options.aot_package:
            return None
        from dlopt_fx.package import save_plan_package

        # Registers torchao's x86 lowering patterns in this process (a plan built here has).
        _, _, lift_up = _import_quantizer()
        return save_plan_package(
            self.name, plan.runner, context.build_cases(), _inductor_options(lift_up), directory
        )

    def load_program(
        self, directory: Path, metadata: dict[str, Any], context: ProviderContext
    ) -> BuiltPlan:
        """The plan served from the package :meth:`save_program` wrote: no model, no
        calibration, no compile, and no torchao import (the package calls oneDNN's int8
        kernels through torch's C++ runtime). It serves as the compiled plan does
        (``COMPILED_SERVING``); inference-tensor inputs need no copy, since nothing
        compiles at serving time."""
        from dlopt_fx.package import load_package_plan

        return load_package_plan(
            directory, metadata, context, plan=self.name, precision=self.precision
        )


class OrdinaryTensorInputs:
    """Calls the compiled int8 graph with ordinary tensors only.

    Under ``torch.inference_mode()`` with inference-tensor inputs (what serving code makes
    inside that block), Inductor compiles the frozen x86 int8 graph without folding its
    weight prepacking, and fake-tensor propagation then fails on
    ``onednn.qconv_prepack`` ("UnsupportedOperatorException"); with ordinary tensors the
    same graph compiles and runs. So an inference tensor is copied to an ordinary one
    first (the copy is part of every timed call). Outside inference mode inputs are
    ordinary already and pass untouched.
    """

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    @property
    def source(self) -> Any:
        """What the compiled graph was compiled from (``None`` once closed): what
        :meth:`PT2EStaticInt8Provider.save_program` packages."""
        return getattr(self.compiled, "source", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(t.is_inference() for t in iter_tensors((args, kwargs))):
            with torch.inference_mode(False):
                args, kwargs = map_tensors(
                    lambda t: t.clone() if t.is_inference() else t, (args, kwargs)
                )
        return self.compiled(*args, **kwargs)
