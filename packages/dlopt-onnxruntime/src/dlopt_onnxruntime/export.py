"""Export a model to ONNX so that one exported file serves every case of a workload.

Nested inputs (args and kwargs of any tuple/list/dict/namedtuple/dataclass nesting) are
flattened to a list of tensors ``input_0..input_N`` and nested outputs to
``output_0..output_M``; the structure is restored on the way out from a template of the
reference outputs (kept as JSON in the plan's metadata, so a saved plan loads without
the model). Non-tensor arguments are baked into the graph as constants, so every
case must pass the same ones.

Only the dimensions that differ between cases are dynamic. Marking every dimension
dynamic makes ``torch.export`` fail on models that specialize on static sizes; exporting
only the first case's shape makes the model fail on the next case.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from attrs import frozen

from dlopt.plugin import (
    NUMPY_DTYPES,
    ProviderBuildError,
    ValueDependentGraph,
    WorkloadError,
    atomic_write_text,
    iter_tensors,
    map_tensors,
    refuse_value_dependence,
    strip_ansi,
)

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
MODEL_NAME = "model.onnx"
#: 2: exports are checked for value-dependent graphs (an export of format 1 was not).
MANIFEST_FORMAT = 2
#: The order ``"auto"`` tries the exporters in. TorchScript first: in a fresh process on
#: a 2-core CPU it exported an MLP of the suite's shape and resnet50 in 1.0-1.9 s against
#: the dynamo exporter's 4.2-6.2 s (most of that its first import), and ONNX Runtime ran
#: the two files at the same speed (docs/providers/onnxruntime.md, "Export"). Where TorchScript
#: fails (a trace it cannot take fails within a tenth of a second) or its file does not
#: serve every case (a size it baked in), the dynamo exporter is tried.
EXPORTERS = ("torchscript", "dynamo")
#: Opset the TorchScript exporter is asked for when none is configured.
TORCHSCRIPT_DEFAULT_OPSET = 17

#: Dtypes by name, for reading layouts and output templates back from JSON (never getattr).
DTYPES_BY_NAME = {
    str(d).removeprefix("torch."): d for d in (*NUMPY_DTYPES, torch.bfloat16, torch.complex64)
}

T = TypeVar("T")


class ExportedModelDoesNotServe(ProviderBuildError):
    """The exported model loaded but failed on a workload case (wrong shapes, crash)."""


@frozen
class InputLayout:
    """How every case's ``(args, kwargs)`` flattens to the exported model's inputs."""

    names: tuple[str, ...]
    dtypes: tuple[str, ...]
    #: Per input: the size of every dimension, ``None`` where it differs between cases.
    shapes: tuple[tuple[int | None, ...], ...]
    #: Per input: ``(min, opt, max)`` shapes over the cases (opt: the heaviest case).
    shape_ranges: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]
    #: The nesting with tensors replaced by a marker, non-tensor leaves by their repr.
    structure: str
    #: Index of the case whose inputs drive the export.
    example_case: int

    @property
    def dynamic_dims(self) -> dict[str, list[int]]:
        """``{"input_0": [0]}``: which dimensions of which inputs vary."""
        return {
            name: [d for d, size in enumerate(shape) if size is None]
            for name, shape in zip(self.names, self.shapes)
            if any(size is None for size in shape)
        }

    def shape_support(self) -> str:
        """How one export serves the cases' shapes, in words (the report shows it):
        ``"dynamic axes: input_0 dim 0 (1 to 32)"``, or the fixed shapes."""
        if not self.dynamic_dims:
            return "one ONNX export at fixed input shapes"
        spans = [
            f"{name} dim {d} ({low[d]} to {high[d]})"
            for name, (low, _, high) in zip(self.names, self.shape_ranges)
            for d in self.dynamic_dims.get(name, ())
        ]
        return "one ONNX export with dynamic axes: " + ", ".join(spans)

    def signature(self) -> dict[str, Any]:
        """JSON-able description of what an exported model must accept."""
        return {
            "inputs": [
                {"name": n, "dtype": d, "shape": list(s)}
                for n, d, s in zip(self.names, self.dtypes, self.shapes)
            ],
            "structure": self.structure,
        }


class _TensorSlot:
    def __repr__(self) -> str:
        return "<tensor>"


_SLOT = _TensorSlot()


def _structure_text(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    # map_tensors keeps non-tensor leaves, so their repr becomes part of the signature.
    return repr(map_tensors(lambda _: _SLOT, (args, dict(sorted(kwargs.items())))))


class Case(Protocol):
    """What the layout reads from a case (a prepared case or a workload case)."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    weight: float


def analyze_cases(cases: Sequence[Case]) -> InputLayout:
    """Flatten every case, check they agree, and find the dimensions that vary."""
    flats = [iter_tensors((case.args, case.kwargs)) for case in cases]
    structures = [_structure_text(case.args, case.kwargs) for case in cases]
    first = cases[0]
    for case, flat, structure in zip(cases, flats, structures):
        if structure != structures[0]:
            raise WorkloadError(
                f"cases {first.name!r} and {case.name!r} differ in argument structure or "
                "non-tensor arguments; an ONNX export bakes non-tensor arguments in as "
                "constants, so one exported model cannot serve both "
                f"({structures[0][:200]} vs {structure[:200]}). Split the workload or "
                "pass the varying values as tensors"
            )
        for index, (a, b) in enumerate(zip(flats[0], flat)):
            if a.dtype != b.dtype or a.dim() != b.dim():
                raise WorkloadError(
                    f"input tensor {index} is {a.dtype} rank {a.dim()} in case {first.name!r} "
                    f"but {b.dtype} rank {b.dim()} in case {case.name!r}; one exported "
                    "model needs the same dtype and rank in every case"
                )
    if not flats[0]:
        raise WorkloadError(
            "the workload passes no tensors; there is nothing to feed an ONNX model"
        )
    for index, tensor in enumerate(flats[0]):
        if tensor.dtype not in NUMPY_DTYPES:
            raise WorkloadError(
                f"input tensor {index} is {tensor.dtype}, which ONNX Runtime's Python API "
                "cannot take; pass float32/float16/integer/bool inputs"
            )
    count = len(flats[0])
    names = tuple(f"input_{i}" for i in range(count))
    shapes: list[tuple[int | None, ...]] = []
    ranges = []
    heaviest = max(range(len(cases)), key=lambda i: cases[i].weight)
    for i in range(count):
        sizes = [tuple(int(s) for s in flat[i].shape) for flat in flats]
        shapes.append(
            tuple(
                sizes[0][d] if len({s[d] for s in sizes}) == 1 else None
                for d in range(len(sizes[0]))
            )
        )
        ranges.append(
            (
                tuple(min(s[d] for s in sizes) for d in range(len(sizes[0]))),
                sizes[heaviest],
                tuple(max(s[d] for s in sizes) for d in range(len(sizes[0]))),
            )
        )

    def example_score(case_index: int) -> tuple[int, int, int]:
        # torch.export specializes dynamic sizes of 0/1 and may tie equal sizes together:
        # prefer the case whose varying sizes are > 1 and distinct, then the largest.
        varying = [
            int(flats[case_index][i].shape[d])
            for i, shape in enumerate(shapes)
            for d, size in enumerate(shape)
            if size is None
        ]
        numel = sum(t.numel() for t in flats[case_index])
        return (sum(v > 1 for v in varying), len(set(varying)), numel)

    example = max(range(len(cases)), key=example_score)
    return InputLayout(
        names=names,
        dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in flats[0]),
        shapes=tuple(shapes),
        shape_ranges=tuple(ranges),
        structure=structures[0],
        example_case=example,
    )


class FlatModule(torch.nn.Module):
    """Wraps a model so that it takes and returns flat tuples of tensors (for export)."""

    def __init__(self, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]):
        super().__init__()
        self.model = model
        # Tensor leaves become slots filled from the flat inputs on every call.
        self._template = map_tensors(lambda t: torch.empty(0), (args, kwargs))

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves = iter(flat)
        args, kwargs = map_tensors(lambda _: next(leaves), self._template)
        return tuple(iter_tensors(self.model(*args, **kwargs)))


def output_template(outputs: Any) -> Any:
    """The output structure with tensor leaves replaced by empty placeholders."""
    return map_tensors(lambda t: torch.empty(0, dtype=t.dtype), outputs)


def restore_outputs(template: Any, tensors: Sequence[torch.Tensor]) -> Any:
    """Put flat output tensors back into the structure recorded by :func:`output_template`."""
    leaves = iter(tensors)
    return map_tensors(lambda _: next(leaves), template)


class NotLoadable(ValueError):
    """A value a saved plan's JSON metadata cannot describe (so the plan cannot be loaded)."""


_PLAIN_LEAVES = (type(None), bool, int, float, str)


def template_to_json(template: Any) -> Any:
    """The JSON form of an output template: tensors by dtype, containers by kind.

    Plain tuples, lists, dicts (with JSON scalar keys) and JSON scalar leaves only: a
    namedtuple, dataclass or any other class could only be rebuilt by importing code,
    which loading never does, so it raises :class:`NotLoadable` naming the type.
    """
    if isinstance(template, torch.Tensor):
        return {"tensor": str(template.dtype).removeprefix("torch.")}
    kind = type(template)
    if kind in (tuple, list):
        return {kind.__name__: [template_to_json(item) for item in template]}
    if kind is dict:
        for key in template:
            if type(key) not in _PLAIN_LEAVES:
                raise NotLoadable(f"an output dict has a {type(key).__qualname__} key")
        return {"dict": [[key, template_to_json(value)] for key, value in template.items()]}
    if kind in _PLAIN_LEAVES:
        if kind is float and not math.isfinite(template):
            raise NotLoadable(f"an output holds the non-finite constant {template!r}")
        return {"value": template}
    raise NotLoadable(
        f"the outputs hold a {kind.__module__}.{kind.__qualname__}, which only its own code "
        "could rebuild"
    )


def template_signature(template: Any) -> dict[str, Any]:
    """What a live output must share to stand in for a template JSON cannot describe
    (a ModelOutput dataclass, a namedtuple): its type's qualified name and its tensors'
    dtypes in order. Plain JSON; compared, never imported."""
    kind = type(template)
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "tensors": [str(t.dtype).removeprefix("torch.") for t in iter_tensors(template)],
    }


def template_from_json(data: Any) -> Any:
    """The template :func:`template_to_json` described (``ValueError`` when malformed)."""
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError(f"not an output template entry: {data!r:.100}")
    ((kind, value),) = data.items()
    if kind == "tensor":
        if value not in DTYPES_BY_NAME:
            raise ValueError(f"unknown output dtype {value!r}")
        return torch.empty(0, dtype=DTYPES_BY_NAME[value])
    if kind in ("tuple", "list") and isinstance(value, list):
        items = [template_from_json(item) for item in value]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict" and isinstance(value, list):
        pairs = []
        for pair in value:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError(f"not a key/value pair: {pair!r:.100}")
            pairs.append((pair[0], template_from_json(pair[1])))
        return dict(pairs)
    if kind == "value" and type(value) in _PLAIN_LEAVES:
        return value
    raise ValueError(f"not an output template entry: {data!r:.100}")


def layout_to_json(layout: InputLayout) -> dict[str, Any]:
    """The input layout as plain JSON values (what a loaded plan feeds the session with)."""
    return {
        "names": list(layout.names),
        "dtypes": list(layout.dtypes),
        "shapes": [list(shape) for shape in layout.shapes],
        "shape_ranges": [[list(s) for s in ranges] for ranges in layout.shape_ranges],
        "structure": layout.structure,
        "example_case": layout.example_case,
    }


def layout_from_json(data: Any) -> InputLayout:
    """The layout :func:`layout_to_json` wrote (``ValueError`` when malformed)."""
    try:

        def sizes(values: Any, allow_none: bool) -> tuple[Any, ...]:
            if not isinstance(values, list) or not all(
                (type(v) is int and v >= 0) or (allow_none and v is None) for v in values
            ):
                raise ValueError(f"bad sizes {values!r:.100}")
            return tuple(values)

        names = tuple(str(n) for n in data["names"])
        dtypes = tuple(data["dtypes"])
        if any(d not in DTYPES_BY_NAME for d in dtypes) or len(dtypes) != len(names):
            raise ValueError(f"bad input dtypes {data['dtypes']!r:.100}")
        shapes = tuple(sizes(shape, True) for shape in data["shapes"])
        ranges = tuple(
            (sizes(lo, False), sizes(opt, False), sizes(hi, False))
            for lo, opt, hi in data["shape_ranges"]
        )
        if not len(shapes) == len(ranges) == len(names):
            raise ValueError("inputs, shapes and shape ranges differ in number")
        return InputLayout(
            names=names,
            dtypes=dtypes,
            shapes=shapes,
            shape_ranges=ranges,
            structure=str(data["structure"]),
            example_case=int(data["example_case"]),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not an input layout ({type(exc).__name__}: {exc})") from None


@frozen
class ExportRecord:
    """How a model was exported: which exporter, opset, and why a fallback happened."""

    exporter: str
    opset: int | None
    seconds: float
    #: The dynamo exporter's error (or its exported model's failure) when it fell back.
    fallback_error: str | None = None


def summarize_error(exc: BaseException, limit: int = 800) -> str:
    """A short, readable form of an exporter error (the summary, not the whole guide)."""
    text = strip_ansi(str(exc)).strip()
    marker = "## Exception summary"
    if marker in text:
        text = text.split(marker, 1)[1]
        text = text.split("(Refer to the full stack trace", 1)[0]
        text = text.split("The error above occurred", 1)[0]
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_opset(path: Path) -> int | None:
    """The default-domain opset of an ONNX file (reads the graph, not the weights)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return None


def _remove_model_files(path: Path) -> None:
    for candidate in path.parent.glob(path.name + "*"):
        if candidate.is_file():
            candidate.unlink()


def save_with_external_data(model: Any, path: Path) -> None:
    """Save an ``onnx.ModelProto`` as ``path`` plus ``path.data`` (every initializer, as
    the dynamo exporter saves them: one layout whichever exporter wrote the model)."""
    import onnx

    _remove_model_files(path)
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=path.name + ".data",
        size_threshold=0,
    )


@frozen
class _ExportJob:
    """What one exporter is asked to write: the flattened model and its example inputs,
    their layout and output names, the file, and the opset (``None``: the exporter's)."""

    flat_module: FlatModule
    example: tuple[torch.Tensor, ...]
    layout: InputLayout
    output_names: list[str]
    path: Path
    opset: int | None


def _export_dynamo(job: _ExportJob) -> None:
    dynamic = torch.export.Dim.DYNAMIC
    per_input = tuple(
        {d: dynamic for d, size in enumerate(shape) if size is None} or None
        for shape in job.layout.shapes
    )
    dynamic_shapes = (per_input,) if any(spec is not None for spec in per_input) else None
    kwargs: dict[str, Any] = {}
    if job.opset is not None:
        kwargs["opset_version"] = job.opset
    with _quiet_op_registration():
        program = _dynamo_export(job, dynamic_shapes, kwargs)
    if program is None:
        raise RuntimeError("the dynamo exporter returned no program")
    _remove_model_files(job.path)
    program.save(str(job.path), external_data=True)


@contextlib.contextmanager
def _quiet_op_registration() -> Iterator[None]:
    """Silence the exporter's per-export warnings about absent optional op libraries
    (``torchvision is not installed. Skipping torchvision::nms``): they say nothing
    about the user's model and would repeat in every race."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    previous = registration.level
    registration.setLevel(logging.ERROR)
    try:
        yield
    finally:
        registration.setLevel(previous)


def _dynamo_export(job: _ExportJob, dynamic_shapes: Any, kwargs: dict[str, Any]) -> Any:
    return torch.onnx.export(
        job.flat_module,
        job.example,
        None,
        dynamo=True,
        # *flat is one (variadic) parameter: its spec is the tuple of per-input specs.
        dynamic_shapes=dynamic_shapes,
        input_names=list(job.layout.names),
        output_names=job.output_names,
        verbose=False,
        report=False,
        **kwargs,
    )


def _export_torchscript(job: _ExportJob) -> None:
    import onnx

    dynamic_axes = {
        name: {d: f"{name}_dim{d}" for d in dims} for name, dims in job.layout.dynamic_dims.items()
    }
    scratch = job.path.with_name(job.path.name + ".torchscript.tmp")
    try:
        torch.onnx.export(
            job.flat_module,
            job.example,
            str(scratch),
            dynamo=False,
            input_names=list(job.layout.names),
            output_names=job.output_names,
            dynamic_axes=dynamic_axes or None,
            opset_version=job.opset or TORCHSCRIPT_DEFAULT_OPSET,
            do_constant_folding=True,
        )
        save_with_external_data(onnx.load(str(scratch)), job.path)
    finally:
        _remove_model_files(scratch)


_EXPORT_FUNCS = {"dynamo": _export_dynamo, "torchscript": _export_torchscript}


def exporter_order(preference: str) -> tuple[str, ...]:
    """``"auto"`` tries :data:`EXPORTERS` in turn; a single name tries only that one."""
    if preference == "auto":
        return EXPORTERS
    if preference not in EXPORTERS:
        raise ValueError(f"exporter must be 'auto', 'dynamo' or 'torchscript', not {preference!r}")
    return (preference,)


def export_with_fallback(
    model: torch.nn.Module,
    layout: InputLayout,
    example_args: tuple[Any, ...],
    example_kwargs: dict[str, Any],
    output_count: int,
    path: Path,
    *,
    exporters: Sequence[str],
    opset: int | None,
    finish: Callable[[ExportRecord], T],
) -> tuple[T, ExportRecord]:
    """Export with each exporter in turn until ``finish`` accepts the exported model.

    ``finish`` loads the file, builds what the plan needs and checks it on every case;
    it raises :class:`ExportedModelDoesNotServe` to ask for the next exporter. Any other
    error from ``finish`` is not an export problem and propagates.
    """
    job = _ExportJob(
        flat_module=FlatModule(model, example_args, example_kwargs),
        example=tuple(t.detach() for t in iter_tensors((example_args, example_kwargs))),
        layout=layout,
        output_names=[f"output_{i}" for i in range(output_count)],
        path=path,
        opset=opset,
    )
    errors: list[str] = []
    modes = {module: module.training for module in model.modules()}
    for exporter in exporters:
        start = time.perf_counter()
        # The TorchScript exporter traces: a branch on input values would be baked into
        # the file. The dynamo exporter captures through torch.export, which refuses such
        # a branch itself (a data-dependent guard).
        watching = (
            refuse_value_dependence(model, "the model's ONNX export (TorchScript exporter)")
            if exporter == "torchscript"
            else contextlib.nullcontext()
        )
        try:
            try:
                with watching, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _EXPORT_FUNCS[exporter](job)
            finally:
                # The TorchScript exporter toggles train/eval on the wrapper and restores
                # it recursively, which would flatten per-module modes: put them back.
                for module, training in modes.items():
                    module.training = training
            seconds = time.perf_counter() - start
        except ValueDependentGraph:
            raise  # no other exporter could serve a branch it cannot see
        except Exception as exc:
            errors.append(f"{exporter} exporter: {summarize_error(exc)}")
            log.info("ONNX export with %s failed: %s", exporter, errors[-1])
            continue
        record = ExportRecord(
            exporter=exporter,
            opset=read_opset(path),
            seconds=seconds,
            fallback_error="; ".join(errors) or None,
        )
        try:
            return finish(record), record
        except ExportedModelDoesNotServe as exc:
            errors.append(f"{exporter} exporter's model: {exc}")
            log.info("model exported with %s does not serve the workload: %s", exporter, exc)
    raise ProviderBuildError(
        "the model could not be exported to ONNX so that one model serves every case: "
        + " | ".join(errors)
    )


# ------------------------------------------------------------------ manifest and reuse


def signature_hash(signature: dict[str, Any]) -> str:
    text = json.dumps(signature, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest in ``directory`` or ``None`` when absent or unreadable."""
    try:
        data = json.loads((directory / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    path = directory / MANIFEST_NAME
    atomic_write_text(path, json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False))
    return path


def model_files(path: Path) -> list[Path]:
    """The ONNX file and its external data file(s), as they exist."""
    return sorted(p for p in path.parent.glob(path.name + "*") if p.is_file())


def copy_model(source: Path, target_dir: Path) -> Path:
    """Copy an ONNX file and its external data into ``target_dir``, keeping the file
    names the model refers to its weights by.

    Real copies, not hard links: onnx refuses external data files with several links
    (a hard-link attack guard).
    """
    target = target_dir / source.name
    _remove_model_files(target)
    for file in model_files(source):
        destination = target_dir / file.name
        shutil.copyfile(file, destination)
    return target
