"""Typed records the ONNX Runtime provider passes between export, transform and session.

Build and load share one path: :class:`OpenSession` (a live session, its runner and the
:class:`SessionRecord` of what it runs with), and build adds a :class:`PreparedModel`
(which file the session opened, where the export came from, the :class:`TransformRecord`
and what quantizing covered). Each record writes its own part of the plan's metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
from attrs import define, field, frozen

from dlopt.plugin import TextEnum
from dlopt_onnxruntime.quantization import QuantizationCoverage


class Transform(TextEnum):
    """What a plan does to the exported fp32 model before opening a session."""

    NONE = "none"
    #: ``convert_float_to_float16(keep_io_types=True)`` (CUDA fp16).
    FLOAT16 = "float16"
    #: ``quantize_dynamic`` on MatMul/Gemm (and the plan's op types).
    QUANTIZE_DYNAMIC = "quantize_dynamic"
    #: ``quantize_static`` QDQ on convolutions (calibrated), then ``quantize_dynamic``.
    QUANTIZE_STATIC = "quantize_static"

    @property
    def quantizes(self) -> bool:
        return self in (Transform.QUANTIZE_DYNAMIC, Transform.QUANTIZE_STATIC)


class ExportSource(TextEnum):
    """Where a plan's ONNX model came from (metadata ``export_source``)."""

    #: Exported now from the model.
    EXPORTED = "exported"
    #: Another plan of this process exported the same model and signature.
    SHARED = "shared"
    #: A manifest in the plan directory matched (a later build of the same plan).
    MANIFEST = "manifest"
    #: A saved plan opened by ``load`` (no model).
    LOADED = "loaded"


@frozen
class DynamicInt8Settings:
    """How ``onnxruntime_cpu_int8`` quantizes (part of the plan's signature)."""

    op_types: tuple[str, ...]
    per_channel: bool
    reduce_range: bool
    weight_type: str = "QInt8"


@frozen
class StaticInt8Settings:
    """How ``onnxruntime_cpu_int8_static`` quantizes (part of the plan's signature)."""

    static_op_types: tuple[str, ...]
    dynamic_op_types: tuple[str, ...]
    per_channel: bool
    reduce_range: bool
    #: Calibration batches (counts, file name, content digest): new data, new plan.
    calibration: dict[str, Any]
    format: str = "QDQ"
    activation_type: str = "QUInt8"
    weight_type: str = "QInt8"
    calibrate_method: str = "MinMax"


@frozen
class Float16Settings:
    keep_io_types: bool = True


TransformSettings = DynamicInt8Settings | StaticInt8Settings | Float16Settings


@frozen
class TransformRecord:
    """What the plan did to the fp32 model; its JSON is part of the plan's signature."""

    execution_provider: str
    precision: str
    kind: Transform
    settings: TransformSettings | None = None
    #: Seconds the transform took (``None`` when a saved model was reused).
    seconds: float | None = None

    def signature(self) -> dict[str, Any]:
        """The JSON the plan key hashes (no timing)."""
        record: dict[str, Any] = {
            "execution_provider": self.execution_provider,
            "precision": self.precision,
            "kind": self.kind.value,
        }
        if self.settings is not None:
            settings = attrs.asdict(self.settings)
            record.update({k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()})
        return record

    def metadata(self) -> dict[str, Any]:
        """The plan metadata entry ``transform``."""
        return {**self.signature(), "seconds": self.seconds}


@frozen
class SessionRecord:
    """What an opened session runs with, as the plan's metadata reports it."""

    execution_provider: str
    session_providers: tuple[str, ...]
    provider_options: dict[str, dict[str, str]]
    session_options: dict[str, Any]
    intra_op_allow_spinning: str | None
    io: str
    #: Nodes per EP as ONNX Runtime assigned them (``None``: not recorded).
    node_assignment: dict[str, int] | None
    #: Options set that the EP does not report back (so not confirmed).
    provider_options_unconfirmed: dict[str, list[str]]

    def metadata(self) -> dict[str, Any]:
        return {
            "execution_provider": self.execution_provider,
            "session_providers": list(self.session_providers),
            "provider_options": self.provider_options,
            "session_options": self.session_options,
            "intra_op_allow_spinning": self.intra_op_allow_spinning,
            "io": self.io,
            "node_assignment": self.node_assignment,
            "provider_options_unconfirmed": self.provider_options_unconfirmed,
        }


@define
class OpenSession:
    """A live session and its runner (a resource, not a value: :meth:`close` drops both
    so ONNX Runtime frees the session once the plan is closed)."""

    runner: Callable[..., Any] | None
    session: Any
    record: SessionRecord

    def close(self) -> None:
        self.runner = None
        self.session = None


@frozen(eq=False)
class PreparedModel:
    """A built plan's model file, its session, and how the file came about."""

    opened: OpenSession
    session_model: Path
    source: ExportSource
    transform: TransformRecord
    coverage: QuantizationCoverage | None = field(default=None)
