"""The numeric precision a plan computes in.

Validation picks its default quality limits from this, so every plan must declare it
honestly: a plan that runs matmuls in bf16 is ``BF16`` even if it returns fp32 tensors.
"""

from __future__ import annotations

from dlopt.vocabulary import TextEnum


class Precision(TextEnum):
    """Precision class of a plan's arithmetic (the weakest format it computes in)."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    INT8 = "int8"
    INT4 = "int4"
    FP8 = "fp8"
    MIXED = "mixed"

    @property
    def is_reduced(self) -> bool:
        """True for every class that may not match fp32 bit for bit (all but FP32)."""
        return self is not Precision.FP32

    @classmethod
    def parse(cls, value: str | Precision) -> Precision:
        """Accept a member or its string value; raise a ValueError listing the choices."""
        if isinstance(value, Precision):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise ValueError(f"unknown precision {value!r}; use one of: {choices}") from None


class Quantization(TextEnum):
    """How an integer plan scales its activations (its weights are scaled ahead of time
    in every scheme). A provider declares it beside its precision (``Provider.quantization``):
    plans of one scheme share its rounding on a model, which the build schedule uses
    (docs/selection.md, "A precision that failed here")."""

    #: Scales calibrated ahead of time on sample inputs, fixed while serving.
    STATIC = "static"
    #: Scales computed from each call's own activations.
    DYNAMIC = "dynamic"
    #: Activations stay in floating point; only the weights are integers.
    WEIGHT_ONLY = "weight_only"
