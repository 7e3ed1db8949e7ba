"""The calibration a PT2E static int8 plan raced with, recorded so it can be rebuilt the same.

A static plan's quantization parameters come from the workload's inputs, which a bundle
or a plan cache record does not keep. So the build records, in its plan directory, what
the conversion took from calibration: each observer's scale and zero point, and the
example input's shapes and dtypes (what ``torch.export`` traces with). A build that comes
back from a saved plan (``ProviderContext.saved_plan_dir``) exports the model on zeros of
those shapes, gives every observer its recorded parameters and converts: the same int8
graph, with no inputs and no calibration. The record is strict JSON, read with a size
cap, never unpickled.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from dlopt.plugin import ProviderBuildError

#: The record's file name inside the plan directory (the plan's ``calibration`` artifact).
CALIBRATION_RECORD = "calibration.json"
#: Version of the record's layout; a record of another version is refused.
RECORD_FORMAT = 1
#: The largest record read back (per-channel weight scales of a large model fit easily).
MAX_RECORD_BYTES = 64 * 1024 * 1024


def observers(prepared: torch.nn.Module) -> dict[str, Any]:
    """The observers ``prepare_pt2e`` inserted, by module name, in graph order."""
    return {
        name: module
        for name, module in prepared.named_modules()
        if name.startswith("activation_post_process") and hasattr(module, "calculate_qparams")
    }


def _tensor_spec(value: Any, where: str) -> dict[str, Any] | None:
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"constant": value}
    raise ProviderBuildError(
        f"the calibration record keeps tensors and plain constants only; {where} is a "
        f"{type(value).__name__}"
    )


def calibration_record(
    prepared: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """What conversion takes from a calibrated ``prepared`` model, and the example input."""
    recorded = {}
    for name, observer in observers(prepared).items():
        scale, zero_point = observer.calculate_qparams()
        recorded[name] = {
            "scale": [float(v) for v in scale.detach().flatten().tolist()],
            "zero_point": [int(v) for v in zero_point.detach().flatten().tolist()],
            "shape": list(scale.shape),
        }
    return {
        "format": RECORD_FORMAT,
        "example": {
            "args": [_tensor_spec(a, f"args[{i}]") for i, a in enumerate(args)],
            "kwargs": {k: _tensor_spec(v, f"kwargs[{k!r}]") for k, v in kwargs.items()},
        },
        "observers": recorded,
    }


def read_calibration_record(directory: Path | None, plan: str) -> dict[str, Any] | None:
    """The record saved beside a plan coming back from a bundle or cache record, or
    ``None`` (a race, or a plan saved without one). A record that cannot be read is a
    :class:`ProviderBuildError` saying why."""
    if directory is None:
        return None
    path = Path(directory) / CALIBRATION_RECORD
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_RECORD_BYTES:
        raise ProviderBuildError(
            f"{plan}: {path} is larger than {MAX_RECORD_BYTES} bytes: not a calibration record"
        )

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a finite number")

    try:
        record = json.loads(path.read_text(encoding="utf-8"), parse_constant=no_constant)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ProviderBuildError(
            f"{plan}: the calibration record {path} is unreadable: {exc}"
        ) from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ProviderBuildError(
            f"{plan}: {path} is not a calibration record of format {RECORD_FORMAT} (written "
            "by another dlopt-torchao?); race the plan again"
        )
    return record


def example_from_record(
    record: dict[str, Any], plan: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Zeros of the recorded example's shapes and dtypes: enough for ``torch.export``."""

    def make(spec: Any, where: str) -> Any:
        if isinstance(spec, dict) and "constant" in spec:
            return spec["constant"]
        try:
            shape = [int(d) for d in spec["shape"]]
            dtype = getattr(torch, str(spec["dtype"]))
            if not isinstance(dtype, torch.dtype) or any(d < 0 for d in shape):
                raise ValueError(spec)
            return torch.zeros(shape, dtype=dtype)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ProviderBuildError(
                f"{plan}: the calibration record's example {where} is malformed: {spec!r:.200}"
            ) from None

    example = record.get("example")
    if not isinstance(example, dict):
        raise ProviderBuildError(f"{plan}: the calibration record has no example input")
    args = tuple(make(spec, f"args[{i}]") for i, spec in enumerate(example.get("args") or []))
    kwargs = {str(k): make(v, f"kwargs[{k!r}]") for k, v in (example.get("kwargs") or {}).items()}
    return args, kwargs


def apply_recorded_qparams(prepared: torch.nn.Module, record: dict[str, Any], plan: str) -> None:
    """Give every observer of ``prepared`` the scale and zero point it had when the plan
    raced: conversion then builds the raced int8 graph without calibrating."""
    found = observers(prepared)
    recorded = record.get("observers")
    if not isinstance(recorded, dict) or set(recorded) != set(found):
        raise ProviderBuildError(
            f"{plan}: the model's quantizable layers no longer match the calibration record "
            f"({len(found)} observers now, {len(recorded or {})} recorded): was the model "
            "changed? race the plan again"
        )
    for name, observer in found.items():
        entry = recorded[name]
        try:
            shape = [int(d) for d in entry["shape"]]
            scale = torch.tensor([float(v) for v in entry["scale"]], dtype=torch.float32)
            zero_point = torch.tensor([int(v) for v in entry["zero_point"]], dtype=torch.int64)
            scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
        except (KeyError, TypeError, ValueError, RuntimeError):
            raise ProviderBuildError(
                f"{plan}: the calibration record's entry for {name} is malformed"
            ) from None
        if not all(math.isfinite(v) and v > 0 for v in scale.flatten().tolist()):
            raise ProviderBuildError(
                f"{plan}: the calibration record's scales for {name} are not positive"
            )
        # Conversion asks each observer for its parameters: these, not a calibration's.
        observer.calculate_qparams = _recorded(scale, zero_point)


def _recorded(scale: torch.Tensor, zero_point: torch.Tensor) -> Any:
    def calculate_qparams() -> tuple[torch.Tensor, torch.Tensor]:
        return scale.clone(), zero_point.clone()

    return calculate_qparams
