"""Capture the eager fp32 reference, after proving it can serve as ground truth."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from attrs import define, field

from dlopt.contract.calling import grad_mode_scope, inputs_of_kind
from dlopt.errors import ConfigurationError, ReferenceCheckError, WorkloadError
from dlopt.platform.tree import map_tensors
from dlopt.settings.quality import QualityPolicy
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadProfile
from dlopt.validation.fingerprint import ModelFingerprint, ModelGuard, ModelMutatedError
from dlopt.validation.inputs import (
    CaseLike,
    InputFingerprint,
    case_parts,
    copy_inputs,
    prepare_inputs,
)
from dlopt.validation.metrics import as_tensor
from dlopt.validation.rounding import LeafRounding, measure_fp32_rounding
from dlopt.validation.structure import iter_leaves, match_structure
from dlopt.vocabulary import GradMode

log = logging.getLogger(__name__)

_NONDETERMINISM_HELP = (
    "likely causes: the model (or a submodule) is in training mode, so dropout or "
    "batch-norm statistics change between calls -> call model.eval(); random ops in "
    "forward (torch.rand*, dropout with training=True) -> make them conditional on "
    "self.training; nondeterministic kernels (GPU atomics, cuDNN autotuning) -> set "
    "torch.use_deterministic_algorithms(True) and torch.backends.cudnn.benchmark = False, "
    "or allow a small QualityPolicy.reference_rel_tolerance"
)


def _to_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


@define(eq=False)
class ReferenceCase:
    """The reference for one case: its prepared inputs and the fp32 outputs (on CPU).

    ``fp32_rounding``: each float output leaf's measured distance from float64, by path
    (empty when not measured; see :mod:`dlopt.validation.rounding`).
    """

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: Any
    leaf_paths: tuple[str, ...]
    weight: float = 1.0
    fp32_rounding: dict[str, LeafRounding] = field(factory=dict)


@define(eq=False)
class ReferenceOutputs:
    """Eager fp32 outputs per case, plus the model's fingerprint taken around them.

    ``cases[i].args/kwargs`` are the inputs already on the target device, made the way
    serving code in ``grad_mode`` makes them (inference tensors under ``inference_mode``):
    call every candidate with those, inside ``grad_mode_scope(grad_mode)``. Outputs are
    detached CPU copies. ``fp32_rounding_note`` says why the fp32 rounding was not
    measured (``None``: measured, or not asked for).
    """

    cases: tuple[ReferenceCase, ...] = field(converter=_to_tuple)
    fingerprint: ModelFingerprint
    device: str
    fp32_rounding_note: str | None = None
    grad_mode: GradMode = GradMode.INFERENCE_MODE

    def calling_context(self) -> Any:
        """The context every judged call runs in (a fresh context manager)."""
        return grad_mode_scope(self.grad_mode)

    def __getitem__(self, name: str) -> ReferenceCase:
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(f"no reference case named {name!r}; cases: {[c.name for c in self.cases]}")

    def __iter__(self) -> Any:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cases)


def _model_device(model: torch.nn.Module) -> torch.device:
    for param in model.parameters():
        return param.device
    for buffer in model.buffers():
        return buffer.device
    return torch.device("cpu")


def _normalize_cases(
    cases: WorkloadProfile | Sequence[CaseLike],
) -> list[tuple[str, Any, float]]:
    items = cases.cases if isinstance(cases, WorkloadProfile) else tuple(cases)
    if not items:
        raise WorkloadError("no workload cases to capture a reference for: pass at least one")
    result = []
    for index, case in enumerate(items):
        name, _, _ = case_parts(case)
        weight = float(getattr(case, "weight", 1.0))
        result.append((name or f"case-{index}", case, weight))
    return result


def _to_cpu(outputs: Any) -> Any:
    return map_tensors(lambda t: t.detach().to("cpu", copy=True), outputs)


def _first_difference(first: Any, second: Any, tolerance: float) -> str | None:
    pairs, mismatches = match_structure(second, first)
    if mismatches:
        return mismatches[0]
    for pair in pairs:
        a = as_tensor(pair.reference)
        b = as_tensor(pair.candidate)
        if a.is_floating_point() or a.is_complex():
            a64 = a.to(torch.complex128 if a.is_complex() else torch.float64)
            b64 = b.to(a64.dtype)
            same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
            if bool(same.all()):
                continue
            finite = torch.isfinite(a64) & torch.isfinite(b64)
            diff = (a64 - b64)[finite].abs()
            max_diff = float(diff.max()) if diff.numel() else float("nan")
            if tolerance > 0 and bool((same | finite).all()):
                norm = float(torch.linalg.vector_norm(a64[finite]))
                rel = float(torch.linalg.vector_norm(diff)) / norm if norm > 0 else float("inf")
                if rel <= tolerance:
                    continue
                return f"{pair.path}: relative L2 difference {rel:.3g} > reference_rel_tolerance {tolerance:g}"
            count = int((~same).sum())
            return f"{pair.path}: {count} of {a.numel()} elements differ (max abs difference {max_diff:.3g})"
        if not torch.equal(a, b):
            count = int((a != b).sum())
            return f"{pair.path}: {count} of {a.numel()} elements differ"
    return None


def _nonfinite(outputs: Any) -> str | None:
    for path, leaf in iter_leaves(outputs):
        if isinstance(leaf, (torch.Tensor, float, complex)):
            t = as_tensor(leaf)
            if t.is_floating_point() or t.is_complex():
                bad = int((~torch.isfinite(t)).sum())
                if bad:
                    return f"{path} has {bad} non-finite value(s) of {t.numel()}"
    return None


def _check_paths(policy: QualityPolicy, paths: set[str]) -> None:
    def known(prefix: str) -> bool:
        return any(p == prefix or p.startswith((prefix + "[", prefix + ".")) for p in paths)

    wanted = [(p, "per_output override") for p in policy.per_output]
    wanted += [(m.path, f"user metric {m.name!r}") for m in policy.user_metrics if m.path]
    for path, what in wanted:
        if not known(path):
            raise ConfigurationError(
                f"QualityPolicy {what} names output path {path!r}, which the model does not "
                f"return; output paths are: {sorted(paths)}"
            )


def capture_reference(
    model: torch.nn.Module,
    cases: WorkloadProfile | Sequence[CaseLike],
    policy: QualityPolicy | None = None,
    *,
    target: ExecutionTarget | torch.device | str | None = None,
    guard: ModelGuard | None = None,
    grad_mode: GradMode | None = None,
    fp32_rounding: bool = True,
) -> ReferenceOutputs:
    """Run eager fp32 twice per case and keep the outputs as the ground truth.

    Every call runs in ``grad_mode`` (default: the workload's, else ``inference_mode``) on
    inputs made as serving code in that mode makes them; the plans are judged the same way.

    Refuses (``ReferenceCheckError``) a model in training mode (unless
    ``policy.training_mode == "warn"``), a model that fails on a case, outputs of an
    unsupported type, outputs that differ between the two runs, non-finite outputs
    (unless ``policy.allow_nonfinite_reference``), and a model that changes its own
    weights when called. Inputs are moved to ``target`` (default: the model's device).

    A model whose forward changes its parameters or buffers (a call counter, batch-norm
    statistics in training mode) is put back as it was before the error is raised:
    ``guard`` holds the snapshot to restore from (the pipeline passes the one it keeps for
    the whole race; by default one is taken here, per ``policy.snapshot_weights``).

    ``fp32_rounding``: measure the reference's fp32 rounding now (per
    ``policy.fp32_rounding_factor``); ``False`` leaves it to :func:`attach_fp32_rounding`
    (a selection with a plan cache may read it back from a record instead).
    """
    policy = policy or QualityPolicy()
    training = [name or type(model).__name__ for name, m in model.named_modules() if m.training]
    if training:
        shown = ", ".join(training[:5]) + (
            f" and {len(training) - 5} more" if len(training) > 5 else ""
        )
        message = (
            f"the model is in training mode (modules in training mode: {shown}); dropout and "
            "batch-norm make its outputs random or change its weights. Call model.eval() "
            "before optimizing it"
        )
        if policy.training_mode == "error":
            raise ReferenceCheckError(
                message + " (or set QualityPolicy(training_mode='warn') to only warn)"
            )
        warnings.warn(message, RuntimeWarning, stacklevel=2)

    device = target if target is not None else _model_device(model)
    guard = guard if guard is not None else ModelGuard(model, snapshot=policy.snapshot_weights)
    if grad_mode is None:
        grad_mode = (
            cases.grad_mode if isinstance(cases, WorkloadProfile) else GradMode.INFERENCE_MODE
        )
    try:
        captured, all_paths = _capture_cases(model, cases, policy, device, guard, grad_mode)
    except ReferenceCheckError as exc:
        raise ReferenceCheckError(f"{exc}{_restored(model, guard)}") from exc.__cause__
    _check_paths(policy, all_paths)
    reference = ReferenceOutputs(tuple(captured), guard.fingerprint, str(device), None, grad_mode)
    if fp32_rounding and policy.fp32_rounding_factor > 0:
        attach_fp32_rounding(model, reference)
    return reference


#: Each case's fp32 rounding by output path, and the note saying why none was measured.
MeasuredRounding = tuple[Sequence[dict[str, LeafRounding]], str | None]


def attach_fp32_rounding(
    model: torch.nn.Module, reference: ReferenceOutputs, known: MeasuredRounding | None = None
) -> None:
    """Set each case's fp32 rounding and the reference's note: ``known`` (one map per case,
    measured before on these very inputs), else measured now against float64."""
    if known is None:
        known = measure_fp32_rounding(
            model, [(case.args, case.kwargs, case.outputs) for case in reference.cases]
        )
    per_case, note = known
    for case, rounding in zip(reference.cases, per_case, strict=True):
        case.fp32_rounding = dict(rounding)
    reference.fp32_rounding_note = note
    if note is not None:
        log.info("fp32 limits stay fixed: %s", note)


def _restored(model: torch.nn.Module, guard: ModelGuard) -> str:
    """Put the model's state back if the reference runs changed it; say what happened."""
    if guard.describe_change(model) is None:
        return ""
    try:
        guard.restore(model)
    except ModelMutatedError as exc:
        return f" (the model's state could not be restored: {exc})"
    return " (the model's parameters and buffers were restored to their values before the call)"


def _check_inputs_unchanged(
    name: str, before: InputFingerprint, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Name an in-place write to the inputs: it would otherwise surface as nondeterminism."""
    changed = before.changed_paths(args, kwargs)
    if changed:
        raise ReferenceCheckError(
            f"case {name!r}: the model writes into its inputs ({', '.join(changed)} changed "
            "during the eager fp32 call, e.g. x.add_(1) in forward); a model that changes its "
            "inputs cannot be compared across plans: use out-of-place ops (x = x + 1) or clone "
            "the input first. The caller's own tensors were not touched (dlopt ran on a copy)"
        )


def _capture_cases(
    model: torch.nn.Module,
    cases: WorkloadProfile | Sequence[CaseLike],
    policy: QualityPolicy,
    device: Any,
    guard: ModelGuard,
    grad_mode: GradMode,
) -> tuple[list[ReferenceCase], set[str]]:
    captured: list[ReferenceCase] = []
    all_paths: set[str] = set()
    for name, case, weight in _normalize_cases(cases):
        # The reference and every plan run on copies the caller does not hold: a model
        # that writes into its inputs never changes the caller's tensors.
        # Made as serving code makes them: inference tensors under inference_mode.
        args, kwargs = inputs_of_kind(grad_mode, *copy_inputs(*prepare_inputs(case, device)))
        before = InputFingerprint.of(args, kwargs)
        runs = []
        for attempt in (1, 2):
            try:
                with grad_mode_scope(grad_mode):
                    out = model(*args, **kwargs)
                runs.append(_to_cpu(out))
            except Exception as exc:
                raise ReferenceCheckError(
                    f"case {name!r}: the eager fp32 model raised {type(exc).__name__} on call "
                    f"{attempt}: {exc}; fix the model or the workload inputs"
                ) from exc
            _check_inputs_unchanged(name, before, args, kwargs)
        # A state change explains a run-to-run difference too: report it first.
        change = guard.describe_change(model)
        if change is not None:
            raise ReferenceCheckError(
                f"the model changed its own state while computing the reference ({change}); "
                "a model whose forward updates parameters or buffers cannot be optimized: "
                "call model.eval() and keep forward free of in-place updates to its state"
            )
        try:
            leaves = iter_leaves(runs[0])
        except TypeError as exc:
            raise ReferenceCheckError(f"case {name!r}: {exc}") from None
        difference = _first_difference(runs[0], runs[1], policy.reference_rel_tolerance)
        if difference is not None:
            raise ReferenceCheckError(
                f"case {name!r}: the eager fp32 reference is not deterministic: two runs on "
                f"the same inputs differ at {difference}; {_NONDETERMINISM_HELP}"
            )
        if not policy.allow_nonfinite_reference:
            bad = _nonfinite(runs[0])
            if bad is not None:
                raise ReferenceCheckError(
                    f"case {name!r}: the eager fp32 reference has non-finite outputs: {bad}; "
                    "check the model and inputs for overflow or NaN, or set "
                    "QualityPolicy(allow_nonfinite_reference=True) if they are intended "
                    "(e.g. -inf for masked positions)"
                )
        paths = tuple(p for p, _ in leaves)
        all_paths.update(paths)
        captured.append(ReferenceCase(name, args, kwargs, runs[0], paths, weight))
    return captured, all_paths
