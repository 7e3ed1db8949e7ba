"""The working state of one selection: each candidate plan's record and the run's shared needs.

Every stage module of :mod:`dlopt.pipeline` takes these and records its result on the
candidates, failures as values (a :class:`StageError` on the candidate), never as jumps.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from dlopt.contract.priors import Prior
from dlopt.contract.provider import (
    BuiltPlan,
    ProviderInfo,
    Role,
)
from dlopt.events import Event, EventKind
from dlopt.measurement import (
    Clock,
    PeakMemory,
    RatioInterval,
)
from dlopt.pipeline.probe import ProbeRecord
from dlopt.settings.policy import OptimizationPolicy
from dlopt.settings.target import ExecutionTarget
from dlopt.validation import (
    ValidationResult,
)
from dlopt.vocabulary import Stage

log = logging.getLogger(__name__)


@attrs.frozen
class StageError:
    """Where a candidate failed (probe, build, first_call, validation, measure, constraint)."""

    stage: Stage
    message: str


@attrs.define(eq=False)
class CandidateState:
    """Working state of one candidate during a selection: what was built and measured."""

    info: ProviderInfo
    status: ProbeRecord | None = None
    plan: BuiltPlan | None = None
    options: Any = None
    setup_s: float | None = None
    first_calls_s: list[float] = attrs.field(factory=list)
    memory: PeakMemory | None = None
    device_memory_mb: float | None = None
    validation: ValidationResult | None = None
    #: After the race: the outputs of the plan's last measured call per case, validated.
    revalidation: ValidationResult | None = None
    #: The chosen plan only: one fresh call per case after the race, validated.
    final_check: ValidationResult | None = None
    error: StageError | None = None
    #: The build said the plan does not apply to this model or workload (``error`` holds why).
    not_applicable: bool = False
    #: What the plan was expected to do before it was built (``dlopt.selection.prior_table``).
    prior: Prior | None = None
    #: Why it was not built: its prior could not beat the confirmed leader, or the time
    #: budget had no room for it (``None``: it was built, or never got that far).
    not_built: str | None = None
    #: Its speedup over the reference in a short paired screening right after its
    #: validation, when it was screened (what a confirmed leader prunes with).
    screening: RatioInterval | None = None
    #: Why it was built though its prior said it would not win: the plans of its rounding
    #: its failure would spare (``None``: built for its own chance, or not built).
    built_to_test: str | None = None
    #: Why it was built and validated but not raced: the race's share of the time
    #: budget had no room for it (``None``: raced, or never got that far).
    not_raced: str | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def role(self) -> Role:
        return Role.of(self.info.provider)

    @property
    def is_reference(self) -> bool:
        return self.role is Role.REFERENCE

    @property
    def alive(self) -> bool:
        """Built, not rejected, and in the race (or still before it)."""
        return self.plan is not None and self.error is None and self.not_raced is None


@attrs.frozen
class SelectionContext:
    """What every stage of one selection needs: the policy, the target, the clock and the
    event sink."""

    policy: OptimizationPolicy
    target: ExecutionTarget
    clock: Clock
    emit: Callable[[Event], None]
    #: Asked between warm-ups and rounds of the race; False ends the rounds.
    should_continue: Callable[[], bool] | None = None
    #: When ``select`` was called, on ``clock`` (ns; ``None``: when the engine starts).
    started_ns: int | None = None
    #: When the selection must have decided, on ``clock`` (ns; ``None``: no time budget).
    deadline_ns: int | None = None

    def seconds_left(self) -> float | None:
        """What is left of the time budget, in seconds (``None``: no budget)."""
        if self.deadline_ns is None:
            return None
        return (self.deadline_ns - self.clock.now_ns()) / 1e9

    def synchronize(self, plan: BuiltPlan | None) -> Callable[[], None] | None:
        """What waits for a plan's queued work before a timer stops: the plan's own
        ``synchronize`` if it has one, else the target's torch device (CUDA)."""
        if plan is not None and plan.synchronize is not None:
            return plan.synchronize
        if self.target.is_cuda:
            return functools.partial(torch.cuda.synchronize, torch.device(self.target.device))
        return None

    def stage(self, cand: CandidateState, stage: Stage) -> None:
        """Say that ``cand`` enters ``stage`` (for progress displays); the event carries
        the stage's text, the word a rejection at that stage is reported under."""
        self.emit(
            Event(
                EventKind.STAGE_STARTED,
                stage.value,
                candidate=cand.name,
                data={"stage": stage.value},
            )
        )

    def reject(self, cand: CandidateState, error: StageError) -> None:
        """Record ``error`` on ``cand``, release its plan (the reference's stays: it is
        needed to report), and say so."""
        cand.error = error
        if cand.plan is not None and not cand.is_reference:
            cand.plan.close()
        self.emit(
            Event(
                EventKind.CANDIDATE_REJECTED,
                f"{error.stage}: {error.message}",
                candidate=cand.name,
                data={"stage": error.stage.value},
            )
        )


def reference_failure(cand: CandidateState) -> str:
    """Why the reference plan cannot serve, for the error the user sees."""
    what = f"the reference plan {cand.name!r}"
    if cand.status is not None and not cand.status.availability.available:
        reason = cand.status.availability.reason or "no reason given"
        return f"{what} is unavailable: {reason}"
    if cand.error is not None:
        return f"{what} failed at {cand.error.stage}: {cand.error.message}"
    return f"{what} was not built"


def close_all(candidates: Sequence[CandidateState], keep: CandidateState | None = None) -> None:
    """Release every built plan except ``keep`` (the one a decision will own)."""
    for cand in candidates:
        if cand is not keep and cand.plan is not None:
            with contextlib.suppress(Exception):
                cand.plan.close()
