"""The context a race hands a provider's ``build``, for testing one provider directly.

    context = build_context(model, torch.randn(1, 16), torch.randn(4, 16))
    plan = MyProvider().build(model, context)

Each input becomes a prepared case (the model called on it, as the fp32 reference), so a
build sees what a race gives it: the inputs plans are called with and the outputs they
must reproduce. An input is a tensor (one positional argument) or ``(args, kwargs)``.
:func:`case_outputs` calls a built plan on every prepared case, and :func:`plan_gate` checks
one of its outputs as the race's quality gate does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from dlopt.contract.provider import BuiltPlan, PreparedCase, ProviderContext
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.validation import CaseValidation, validate_outputs


def prepared_cases(model: torch.nn.Module, *inputs: Any) -> tuple[PreparedCase, ...]:
    """One prepared case per input, named by its batch size (``b4``) or position."""
    cases: list[PreparedCase] = []
    with torch.inference_mode():
        for i, item in enumerate(inputs):
            args, kwargs = _split(item)
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            name = f"b{first.shape[0]}" if first is not None and first.dim() else f"case{i}"
            if any(c.name == name for c in cases):
                name = f"{name}_{i}"
            cases.append(PreparedCase(name, args, kwargs, model(*args, **kwargs)))
    return tuple(cases)


def build_context(model: torch.nn.Module, *inputs: Any, **context: Any) -> ProviderContext:
    """A :class:`ProviderContext` with the prepared cases of ``inputs`` and their workload;
    ``context`` sets any other field (``options=``, ``artifact_dir=``, ``target=``)."""
    cases = prepared_cases(model, *inputs)
    workload = WorkloadProfile(
        cases=tuple(WorkloadCase(c.name, args=c.args, kwargs=c.kwargs) for c in cases)
    )
    context.setdefault("workload", workload)
    return ProviderContext(cases=cases, **context)


def _split(item: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(item, torch.Tensor):
        return (item,), {}
    if (
        isinstance(item, Sequence)
        and len(item) == 2
        and isinstance(item[0], Sequence)
        and isinstance(item[1], Mapping)
    ):
        return tuple(item[0]), dict(item[1])
    raise TypeError(f"an input is a tensor or (args, kwargs), got {type(item).__name__}")


def case_outputs(plan: BuiltPlan, context: ProviderContext) -> list[Any]:
    """``plan`` called on each of ``context``'s prepared cases, in inference mode: the
    outputs, in case order."""
    with torch.inference_mode():
        return [plan(*case.args, **case.kwargs) for case in context.cases]


def plan_gate(plan: BuiltPlan, out: Any, reference: Any, case_name: str) -> CaseValidation:
    """The race's quality gate on ``out``, one output of ``plan``, against ``reference``:
    at the precision the plan declares, with its declared output dtype."""
    return validate_outputs(
        out,
        reference,
        precision=plan.precision,
        output_dtype=plan.output_dtype,
        case_name=case_name,
    )
