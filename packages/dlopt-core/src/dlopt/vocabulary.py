"""The words the pipeline and its reports share: one enum per vocabulary.

Every enum of dlopt (and of its provider distributions, through ``dlopt.plugin``) derives
from :class:`TextEnum`: it compares equal to its text (``stage == "build"``), reads as its
text in messages, and is written to JSON as that text (cattrs uses the value).
"""

from __future__ import annotations

import enum
from typing import TypeVar

_T = TypeVar("_T", bound="TextEnum")


class TextEnum(str, enum.Enum):
    """A ``str`` enum whose ``str()`` and format are its value, not ``Class.MEMBER``."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def lookup(cls: type[_T], value: object) -> _T | None:
        """The member ``value`` names (a member, of this enum or of another with the same
        text, or its text), or ``None`` when it names none."""
        try:
            return cls(getattr(value, "value", value))
        except ValueError:
            return None

    @classmethod
    def coerce(
        cls: type[_T],
        value: object,
        what: str,
        *,
        error: type[Exception] = ValueError,
        hint: str = "",
    ) -> _T:
        """The member ``value`` names (as :meth:`lookup` reads it); otherwise raises
        ``error`` saying ``"{what} {value!r}; use one of {the choices}{hint}"``, so an
        attrs converter or a loader refuses a wrong word with its choices."""
        member = cls.lookup(value)
        if member is None:
            choices = ", ".join(str(m.value) for m in cls)
            raise error(f"{what} {value!r}; use one of {choices}{hint}")
        return member


class Objective(TextEnum):
    """What the selection minimises."""

    STEADY_STATE_LATENCY = "steady_state_latency"
    LIFECYCLE_LATENCY = "lifecycle_latency"
    #: The steady-state latency of one request: a batched workload races batch 1 only.
    MIN_LATENCY = "min_latency"
    #: Items per second over the batch sizes of a batched workload (docs/selection.md).
    MAX_THROUGHPUT = "max_throughput"


class Stage(TextEnum):
    """Where a candidate was rejected."""

    PROBE = "probe"
    BUILD = "build"
    FIRST_CALL = "first_call"
    VALIDATION = "validation"
    MEASURE = "measure"
    REVALIDATION = "revalidation"
    CONSTRAINT = "constraint"


class Status(TextEnum):
    """A candidate's place in the decision."""

    SELECTED = "selected"
    BASELINE = "baseline"
    LOST = "lost"
    REJECTED = "rejected"
    UNAVAILABLE = "unavailable"
    #: The plan does not apply to this model or workload (its build said so).
    NOT_APPLICABLE = "not_applicable"
    #: The plan was not built: its prior could not beat the confirmed leader, or the
    #: time budget had no room for it (the report says which, with the numbers).
    NOT_BUILT = "not_built"


class Verdict(TextEnum):
    """What the race concluded about one plan against the baseline."""

    BASELINE = "baseline"
    FASTER = "faster"
    NOT_FASTER = "not_faster"
    UNRESOLVED = "unresolved"
    DROPPED = "dropped"
    FAILED = "failed"


class Gate(TextEnum):
    """Where a challenger stands at the race's confidence gate while the race runs.

    Internal to the race engine (the report holds the :class:`Verdict` it leads to): ``OPEN``
    still deciding; ``FASTER`` its interval's low end cleared ``min_speedup``;
    ``NOT_FASTER`` its high end fell below it; ``FUTILE`` no budget left could decide it.
    """

    OPEN = "open"
    FASTER = "faster"
    NOT_FASTER = "not_faster"
    FUTILE = "futile"


class StopReason(TextEnum):
    """Why the race stopped."""

    RESOLVED = "resolved"
    FUTILITY = "futility"
    #: The leader passed the gate but no budget left could show that every other
    #: survivor is within the indifference zone of it: the regret bound reached is reported.
    INDIFFERENCE_FUTILITY = "indifference_futility"
    MAX_ROUNDS = "max_rounds"
    TIME_BUDGET = "time_budget"
    CANCELLED = "cancelled"
    NO_CHALLENGERS = "no_challengers"


class GradMode(TextEnum):
    """The calling context plans are judged and served in (``WorkloadProfile.grad_mode``).

    ``inference_mode``: calls inside ``torch.inference_mode()`` on inputs made there
    (inference tensors), as most serving code runs; ``no_grad``: inside
    ``torch.no_grad()``; ``enabled``: autograd on (plain grad mode).
    """

    INFERENCE_MODE = "inference_mode"
    NO_GRAD = "no_grad"
    ENABLED = "enabled"


class Concurrency(TextEnum):
    """How a built plan may be called from several threads (``ServingTraits.concurrency``).

    ``concurrent``: any number of threads may call it at once. ``serialized``: the
    decision lets one thread call it at a time. ``per_thread``: each calling thread gets
    its own runner (``BuiltPlan.thread_runner``).
    """

    CONCURRENT = "concurrent"
    SERIALIZED = "serialized"
    PER_THREAD = "per_thread"


class UnseenSignature(TextEnum):
    """What a decision does with a call whose signature no raced case had
    (``OptimizationPolicy.on_unseen_signature``), unless its plan serves any shape.

    ``fallback``: eager fp32 serves that call (with a warning, once); ``raise``: the call
    raises :class:`~dlopt.errors.UnseenSignatureError`.
    """

    FALLBACK = "fallback"
    RAISE = "raise"


class NonFiniteInput(TextEnum):
    """What a decision does with a call whose floating inputs hold NaN or infinity
    (``OptimizationPolicy.on_nonfinite_input``): no plan was judged on such values.

    ``fallback``: eager fp32 serves that call (a warning the first time; counted);
    ``raise``: the call raises :class:`~dlopt.errors.NonFiniteInputError`; ``serve``: the
    plan serves it unchecked (what it answers was never validated).
    """

    FALLBACK = "fallback"
    RAISE = "raise"
    SERVE = "serve"


class PlanFailure(TextEnum):
    """What a decision does when its plan raises at serve time
    (``OptimizationPolicy.on_plan_failure``).

    ``fallback``: eager fp32 serves that call (a warning the first time; counted), and
    after ``max_failures`` consecutive failures the plan is disabled: eager serves every
    call; ``raise``: the plan's exception reaches the caller (counted).
    """

    FALLBACK = "fallback"
    RAISE = "raise"


class Route(TextEnum):
    """Where a served call went: to the plan, to eager fp32 (``fallback``), or nowhere
    (``refused``: the call raised, as the policy says)."""

    PLAN = "plan"
    FALLBACK = "fallback"
    REFUSED = "refused"


class FallbackReason(TextEnum):
    """Why eager fp32 served a call instead of the plan."""

    #: Its signature was never raced (``on_unseen_signature="fallback"``).
    UNSEEN_SIGNATURE = "unseen_signature"
    #: Its floating inputs held NaN or infinity (``on_nonfinite_input="fallback"``).
    NONFINITE_INPUT = "nonfinite_input"
    #: The plan raised on it (``on_plan_failure="fallback"``).
    PLAN_FAILURE = "plan_failure"
    #: The plan is disabled (failures or shadow mismatches in a row).
    PLAN_DISABLED = "plan_disabled"
