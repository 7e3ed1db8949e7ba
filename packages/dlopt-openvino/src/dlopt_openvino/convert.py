"""Convert a PyTorch model to OpenVINO so that one model serves every case of a workload.

The model is wrapped so that it takes its tensor inputs as one flat tuple (positional and
keyword, in :func:`dlopt.plugin.iter_tensors` order) and returns the flat tuple of its
output tensors; OpenVINO's PyTorch frontend traces that wrapper with the example case.
The OpenVINO model's inputs are named ``input_0..N`` and its outputs ``output_0..M``.
Non-tensor arguments become constants of the graph, so every case must pass the same.

The plans of one race convert the same model for the same cases: the last conversion is
kept in memory while its model lives, with a content hash of the model's weights and
class, the input layout and the example case, and the next plan whose hash matches
starts from it instead of tracing again.

Only the dimensions that differ between the cases are dynamic (the batch, where a
workload races several batch sizes); the others stay static, which OpenVINO compiles
better. Outputs come back in the model's own structure (:mod:`dlopt_openvino.outputs`).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import warnings
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import torch
from attrs import frozen

from dlopt.plugin import (
    NUMPY_DTYPES,
    ProviderBuildError,
    ValueDependentGraph,
    capture_output,
    iter_tensors,
    map_tensors,
    refuse_value_dependence,
)

#: The converted model's file names in the plan directory (IR: graph and weights).
IR_NAME = "model.xml"
WEIGHTS_NAME = "model.bin"

#: Input dtypes OpenVINO takes from numpy views of torch tensors, by their names in JSON.
INPUT_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in NUMPY_DTYPES}


class ConversionFailed(ProviderBuildError):
    """OpenVINO's PyTorch frontend could not convert the model (its reason is quoted)."""


class ModelDoesNotServe(ProviderBuildError):
    """The converted model compiled but failed on a case, or gave other output shapes."""


class Case(Protocol):
    """What the layout reads from a case (a prepared case or a workload case)."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@frozen
class InputSpec:
    """One flat input tensor: its dtype and every dimension's size over the cases."""

    dtype: str
    #: The size of each dimension, ``None`` where the cases differ (dynamic).
    shape: tuple[int | None, ...]
    low: tuple[int, ...]
    high: tuple[int, ...]


@frozen
class InputLayout:
    """How every case's ``(args, kwargs)`` flattens to the OpenVINO model's inputs."""

    inputs: tuple[InputSpec, ...]
    #: The argument nesting with tensors replaced by a marker, other leaves by their repr.
    structure: str
    #: Index of the case the conversion traces.
    example_case: int

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"input_{i}" for i in range(len(self.inputs)))

    @property
    def dynamic_dims(self) -> dict[str, list[int]]:
        """``{"input_0": [0]}``: which dimensions of which inputs vary between cases."""
        found = {
            name: [d for d, size in enumerate(spec.shape) if size is None]
            for name, spec in zip(self.names, self.inputs)
        }
        return {name: dims for name, dims in found.items() if dims}

    def describe(self) -> str:
        """How one model serves the cases' shapes (the report's ``input_shapes``)."""
        spans = [
            f"{name} dim {d} ({spec.low[d]} to {spec.high[d]})"
            for name, spec in zip(self.names, self.inputs)
            for d, size in enumerate(spec.shape)
            if size is None
        ]
        if not spans:
            return "one OpenVINO model at fixed input shapes"
        return "one OpenVINO model with dynamic dimensions: " + ", ".join(spans)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (a loaded plan checks its calls against it)."""
        return {
            "inputs": [
                {"dtype": s.dtype, "shape": list(s.shape), "low": list(s.low), "high": list(s.high)}
                for s in self.inputs
            ],
            "structure": self.structure,
            "example_case": self.example_case,
        }

    @classmethod
    def from_json(cls, data: Any) -> InputLayout:
        """The layout :meth:`to_json` wrote; ``ValueError`` when it is malformed."""

        def sizes(values: Any, dynamic: bool) -> tuple[Any, ...]:
            ok = isinstance(values, list) and all(
                (type(v) is int and v >= 0) or (dynamic and v is None) for v in values
            )
            if not ok:
                raise ValueError(f"bad sizes {values!r:.100}")
            return tuple(values)

        try:
            specs = []
            for entry in data["inputs"]:
                if entry["dtype"] not in INPUT_DTYPES:
                    raise ValueError(f"unknown input dtype {entry['dtype']!r:.40}")
                specs.append(
                    InputSpec(
                        entry["dtype"],
                        sizes(entry["shape"], True),
                        sizes(entry["low"], False),
                        sizes(entry["high"], False),
                    )
                )
            return cls(tuple(specs), str(data["structure"]), int(data["example_case"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an input layout ({type(exc).__name__}: {exc})") from None


class _Slot:
    def __repr__(self) -> str:
        return "<tensor>"


def _structure(case: Case) -> str:
    # Non-tensor leaves keep their repr: they are baked into the graph as constants.
    return repr(map_tensors(lambda _: _Slot(), (case.args, dict(sorted(case.kwargs.items())))))


def analyze_cases(cases: Sequence[Case]) -> InputLayout:
    """Flatten every case, check that one model can serve them all, find the dimensions
    that vary. ``ProviderBuildError`` names the case and the input that disagree."""
    flats = [iter_tensors((case.args, case.kwargs)) for case in cases]
    first, first_flat = cases[0], flats[0]
    if not first_flat:
        raise ProviderBuildError("the workload passes no tensors: there is nothing to feed")
    for index, tensor in enumerate(first_flat):
        if str(tensor.dtype).removeprefix("torch.") not in INPUT_DTYPES:
            raise ProviderBuildError(
                f"input tensor {index} is {tensor.dtype}, which OpenVINO's Python API cannot "
                f"take from torch; pass one of {', '.join(INPUT_DTYPES)}"
            )
    for case, flat in zip(cases[1:], flats[1:]):
        if _structure(case) != _structure(first):
            raise ProviderBuildError(
                f"cases {first.name!r} and {case.name!r} differ in argument structure or "
                "non-tensor arguments; OpenVINO's conversion bakes non-tensor arguments in "
                "as constants, so one converted model cannot serve both. Split the workload "
                "or pass the varying values as tensors"
            )
        for index, (a, b) in enumerate(zip(first_flat, flat)):
            if a.dtype != b.dtype or a.dim() != b.dim():
                raise ProviderBuildError(
                    f"input tensor {index} is {a.dtype} of rank {a.dim()} in case "
                    f"{first.name!r} but {b.dtype} of rank {b.dim()} in case {case.name!r}; "
                    "one converted model needs the same dtype and rank in every case"
                )
    specs = []
    for index, tensor in enumerate(first_flat):
        shapes = [tuple(int(s) for s in flat[index].shape) for flat in flats]
        columns = list(zip(*shapes))
        specs.append(
            InputSpec(
                dtype=str(tensor.dtype).removeprefix("torch."),
                shape=tuple(c[0] if len(set(c)) == 1 else None for c in columns),
                low=tuple(min(c) for c in columns),
                high=tuple(max(c) for c in columns),
            )
        )
    # Trace the largest case: a tracer can specialize sizes of 1.
    example = max(range(len(cases)), key=lambda i: sum(t.numel() for t in flats[i]))
    return InputLayout(tuple(specs), _structure(first), example)


class FlatModule(torch.nn.Module):
    """The model taking its tensor inputs as one flat tuple and returning its output
    tensors as one flat tuple (what the conversion traces)."""

    def __init__(self, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]):
        super().__init__()
        self.model = model
        # Tensor leaves are slots, filled from the flat inputs on every call.
        self._args, self._kwargs = args, kwargs

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves = iter(flat)
        args, kwargs = map_tensors(lambda _: next(leaves), (self._args, self._kwargs))
        return tuple(iter_tensors(self.model(*args, **kwargs)))


@contextlib.contextmanager
def _modes_kept(model: torch.nn.Module) -> Iterator[None]:
    """OpenVINO's tracer calls ``eval()`` on the module it converts: put every module's
    training flag back afterwards (the caller's model is read-only)."""
    modes = {module: module.training for module in model.modules()}
    try:
        yield
    finally:
        for module, training in modes.items():
            module.training = training


def convert(
    ov: Any, model: torch.nn.Module, layout: InputLayout, example: Case, output_count: int
) -> Any:
    """The ``openvino.Model`` of ``model`` traced on ``example``, its inputs and outputs
    named, the dimensions the layout calls dynamic left dynamic.

    Raises :class:`ConversionFailed` with OpenVINO's reason when it cannot convert.
    """
    shapes = [
        ov.PartialShape([-1 if s is None else s for s in spec.shape]) for spec in layout.inputs
    ]
    with torch.inference_mode(False), torch.no_grad():
        # Inference tensors (made under inference_mode) cannot be traced: plain copies can.
        args, kwargs = map_tensors(lambda t: t.detach().clone(), (example.args, example.kwargs))
        flat = tuple(iter_tensors((args, kwargs)))
        wrapper = FlatModule(model, args, kwargs)
        try:
            with (
                _modes_kept(model),
                capture_output("openvino convert_model") as printed,
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore")  # the tracer's TracerWarnings
                # The decoder traces the model: a branch on input values would be baked in.
                with refuse_value_dependence(model, "the model's OpenVINO conversion"):
                    decoder = _decoder_without_trace_check(wrapper, flat)
                converted = ov.convert_model(decoder, input=shapes, share_weights=False)
        except ValueDependentGraph:
            raise
        except Exception as exc:
            said = printed.result.lines() if printed.result else ()
            raise ConversionFailed(
                f"OpenVINO could not convert the model: {summarize(exc)}"
                + (f" (it printed: {' | '.join(said)[:300]})" if said else "")
            ) from exc
    if len(converted.outputs) != output_count:
        raise ConversionFailed(
            f"the converted model has {len(converted.outputs)} outputs but the model returns "
            f"{output_count} tensors; OpenVINO may have folded an output away"
        )
    for index, port in enumerate(converted.inputs):
        port.get_tensor().set_names({f"input_{index}"})
    for index, port in enumerate(converted.outputs):
        port.get_tensor().set_names({f"output_{index}"})
    return converted


def _decoder_without_trace_check(module: torch.nn.Module, example: tuple[torch.Tensor, ...]) -> Any:
    """OpenVINO's TorchScript decoder of ``module`` traced on ``example``, its weights
    copied, without torch's trace check (``convert_model`` would trace with it).

    The check calls the module and its trace again and compares them with
    ``torch.testing.assert_close``, whose first use imports ``torch.distributed.tensor``.
    Without it the int8 build of a transformer encoder layer took 2.1-2.2 s instead of
    2.9-3.0 s on a 2-core CPU; the comparison is one the race makes anyway (every plan's
    outputs are validated against the eager reference on every case before it races)."""
    from openvino.frontend.pytorch.ts_decoder import TorchScriptPythonDecoder

    return TorchScriptPythonDecoder(
        module, example_input=example, shared_memory=False, trace_kwargs={"check_trace": False}
    )


def summarize(exc: BaseException, limit: int = 800) -> str:
    """OpenVINO's error without its source locations: ``OpConversionFailure: Model wasn't
    fully converted. Summary: -- No conversion rule found for operations: aten::...``."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    kept = [
        ln.removeprefix("FrontEnd API failed with OpConversionFailure:").strip()
        for ln in lines
        if not (ln.startswith("Check '") or ln.startswith("Exception from "))
    ]
    text = f"{type(exc).__name__}: {' '.join(k for k in kept if k) or type(exc).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# The last conversion of this process, by the model it came from (held no longer than
# that model lives): (fingerprint, openvino.Model). Its users never modify it: saving
# reads it, NNCF quantizes a copy.
_last: weakref.WeakKeyDictionary[torch.nn.Module, tuple[str, Any]] = weakref.WeakKeyDictionary()
_last_lock = threading.Lock()


def fingerprint(model: torch.nn.Module, layout: InputLayout, example: Case) -> str | None:
    """What a conversion depends on, hashed: the model's class and weights, the input
    layout and the example case's tensors. ``None`` when a tensor's bytes cannot be read
    (a quantized or sparse layout): such a model is converted by every plan."""
    digest = hashlib.blake2b(digest_size=16)
    kind = type(model)
    digest.update(f"{kind.__module__}.{kind.__qualname__}|{torch.__version__}".encode())
    digest.update(repr(layout.to_json()).encode())
    named = list(model.state_dict(keep_vars=False).items())
    named += [
        (f"example.{i}", t) for i, t in enumerate(iter_tensors((example.args, example.kwargs)))
    ]
    with torch.no_grad():
        for name, tensor in named:
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
            try:
                raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
                digest.update(memoryview(raw.numpy()))
            except (RuntimeError, TypeError, AttributeError):
                return None
    return digest.hexdigest()


def convert_shared(
    ov: Any, model: torch.nn.Module, layout: InputLayout, example: Case, output_count: int
) -> tuple[Any, bool]:
    """:func:`convert`, or the last conversion of the same model and cases:
    ``(openvino.Model, whether it was shared)``."""
    key = fingerprint(model, layout, example)
    with _last_lock:
        kept = _last.get(model)
    if key is not None and kept is not None and kept[0] == key:
        return kept[1], True
    converted = convert(ov, model, layout, example, output_count)
    with _last_lock:
        _last.clear()
        if key is not None:
            _last[model] = (key, converted)
    return converted, False


def forget_conversions() -> None:
    """Drop the kept conversion (its weights are held in memory until then)."""
    with _last_lock:
        _last.clear()
