"""The quality gate: every candidate must reproduce the eager fp32 outputs.

``inputs`` (a case's inputs put on the target device), ``reference`` (the eager fp32
reference, captured once it is proven fit to serve as ground truth), ``rounding`` (the
reference's own fp32 rounding, against a float64 run), ``structure`` (a candidate's
nested outputs matched to the reference's, leaf by leaf), ``metrics`` (per-leaf errors,
in float64), ``result`` (one candidate's outputs checked, over every case),
``fingerprint`` (no plan changed the user's model, or the change is undone),
``metric_registry`` (user metrics by name) and ``user_metrics`` (ready-made ones:
top-1 agreement, PSNR).

Pipeline use::

    ref = capture_reference(model, workload, policy.quality)      # refuses a bad reference
    guard = ModelGuard(model, snapshot=policy.quality.snapshot_weights)
    ...build a plan; guard.check(model, stage="build")...
    per_case = [
        validate_outputs(plan(*c.args, **c.kwargs), c.outputs, precision=plan.precision,
                         output_dtype=plan.output_dtype, policy=policy.quality, case_name=c.name)
        for c in ref.cases
    ]
    result = ValidationResult.from_cases(per_case)
"""

from __future__ import annotations

from dlopt.settings.quality import (
    DEFAULT_LIMITS,
    LimitOverride,
    QualityLimits,
    QualityPolicy,
    UserMetric,
    default_limits,
)
from dlopt.validation.fingerprint import (
    FingerprintDiff,
    ModelFingerprint,
    ModelGuard,
    ModelMutatedError,
    TensorDigest,
)
from dlopt.validation.inputs import (
    InputFingerprint,
    copy_inputs,
    map_input_tensors,
    move_to_device,
    prepare_inputs,
)
from dlopt.validation.metrics import LeafMetrics, compute_leaf_metrics
from dlopt.validation.reference import ReferenceCase, ReferenceOutputs, capture_reference
from dlopt.validation.result import (
    CaseValidation,
    UserMetricResult,
    ValidationResult,
    check_leaf,
    validate_outputs,
)
from dlopt.validation.structure import find_path, iter_leaves, match_structure
from dlopt.validation.user_metrics import PsnrFn, Top1AgreementFn, psnr, top1_agreement

__all__ = [
    "DEFAULT_LIMITS",
    "CaseValidation",
    "FingerprintDiff",
    "InputFingerprint",
    "LeafMetrics",
    "LimitOverride",
    "ModelFingerprint",
    "ModelGuard",
    "ModelMutatedError",
    "PsnrFn",
    "QualityLimits",
    "QualityPolicy",
    "ReferenceCase",
    "ReferenceOutputs",
    "TensorDigest",
    "Top1AgreementFn",
    "UserMetric",
    "UserMetricResult",
    "ValidationResult",
    "capture_reference",
    "check_leaf",
    "compute_leaf_metrics",
    "copy_inputs",
    "default_limits",
    "find_path",
    "iter_leaves",
    "map_input_tensors",
    "match_structure",
    "move_to_device",
    "prepare_inputs",
    "psnr",
    "top1_agreement",
    "validate_outputs",
]
