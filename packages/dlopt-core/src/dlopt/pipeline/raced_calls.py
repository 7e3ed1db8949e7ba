"""The calls a race makes of each plan, and the check of every call's outputs.

A raced call's outputs are checked once the timer has stopped: a plan that turns NaN or
infinite on its tenth call (warm-up, settling and timed calls alike) fails the race
there, named with the call number (:class:`LastOutput`). The race stage and the schedule's
screenings call plans through the same recorders (:func:`checked_calls`), so a plan that
answers NaN fast never earns a screened speedup either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from dlopt.contract.provider import BuiltPlan
from dlopt.pipeline.state import CandidateState
from dlopt.platform.arrays import count_nonfinite
from dlopt.platform.tree import leaves_with_paths
from dlopt.validation import ReferenceOutputs


class NonFiniteOutput(RuntimeError):
    """A raced call returned NaN or infinity where the reference has a finite value."""


def nonfinite_counts(outputs: Any) -> dict[str, int]:
    """Per floating output leaf (by path), how many of its values are not finite."""
    counts: dict[str, int] = {}
    leaves = [("output", outputs)] if isinstance(outputs, torch.Tensor) else None
    for path, leaf in leaves if leaves is not None else leaves_with_paths(outputs, "output"):
        if not isinstance(leaf, torch.Tensor) or not (
            leaf.is_floating_point() or leaf.is_complex()
        ):
            continue
        bad = count_nonfinite(leaf)  # not on torch's thread pool: see count_nonfinite
        if bad:
            counts[path] = bad
    return counts


class LastOutput:
    """One plan's call on one case, keeping the output of the latest call for revalidation.

    :meth:`check` inspects the outputs of every raced call (the race engine hands them over
    after the timer stopped): a plan that turns NaN or infinite on its tenth call fails
    the race there, named with the call number.
    """

    __slots__ = ("allowed", "args", "calls", "case", "kwargs", "output", "plan")

    def __init__(
        self,
        plan: BuiltPlan,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        case: str = "",
        allowed: dict[str, int] | None = None,
    ) -> None:
        self.plan = plan
        self.args = args
        self.kwargs = kwargs
        self.case = case
        #: Non-finite values the reference itself has, per output path (allowed by policy).
        self.allowed = allowed or {}
        self.output: Any = None
        self.calls = 0

    def __call__(self) -> Any:
        self.output = self.plan(*self.args, **self.kwargs)
        self.calls += 1
        return self.output

    def check(self, outputs: Sequence[Any]) -> None:
        """Raise :class:`NonFiniteOutput` naming the first call of ``outputs`` (the latest
        calls, in order) with more non-finite values than the reference."""
        first = self.calls - len(outputs) + 1
        for number, output in enumerate(outputs, start=first):
            for path, bad in nonfinite_counts(output).items():
                if bad > self.allowed.get(path, 0):
                    raise NonFiniteOutput(
                        f"raced call {number} on case {self.case!r} returned {bad} non-finite "
                        f"value(s) in {path} where the reference has "
                        f"{self.allowed.get(path, 0)}"
                    )


def checked_calls(
    candidates: Sequence[CandidateState], reference: ReferenceOutputs
) -> dict[str, list[LastOutput]]:
    """Per plan, one recorder per case: its call, keeping the last output, checked."""
    allowed = [nonfinite_counts(case.outputs) for case in reference.cases]
    found: dict[str, list[LastOutput]] = {}
    for cand in candidates:
        assert cand.plan is not None
        found[cand.name] = [
            LastOutput(cand.plan, case.args, case.kwargs, case.name, allowed[i])
            for i, case in enumerate(reference.cases)
        ]
    return found


def output_checks(
    recorders: dict[str, list[LastOutput]],
) -> dict[str, list[Callable[[Sequence[Any]], None]]]:
    """``run_race``'s ``output_checks`` for ``recorders``."""
    return {name: [r.check for r in per_case] for name, per_case in recorders.items()}
