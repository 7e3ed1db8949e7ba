"""Every plan's prior before anything is built, and what the schedule reads from it.

:func:`assign_priors` gives each plan the provider's own ``prior(context)``, else the
user's evidence (:mod:`dlopt.cache.user_priors`: the plan cache's records on this machine
class), else the shipped table's (:mod:`dlopt.selection.prior_table`, by machine class and
operator mix), else the unknown prior. A plan's rounding (:func:`declared_rounding`) groups
the plans that fail validation together. Once a plan is screened, what it measured
(:func:`confirmed`, :func:`promise_of`) and how far that landed from its prior
(:func:`leader_miss`) speak for it and for the plans not yet built
(:mod:`dlopt.pipeline.schedule` reads them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import attrs

from dlopt.contract.priors import OperatorMix, Prior
from dlopt.contract.provider import ProviderContext
from dlopt.errors import PlanCall
from dlopt.pipeline.probe import declared_scheme
from dlopt.pipeline.state import CandidateState
from dlopt.precision import Precision, Quantization
from dlopt.selection.prior_table import UNKNOWN_SOURCE, table_prior, unknown_prior

log = logging.getLogger(__name__)

#: The reference's own prior: it is the unit every speedup is measured in.
REFERENCE_PRIOR = Prior(1.0, 1.0, 1.0, 0.05, "the reference")
#: Reduced float formats whose error on a model is the format's own rounding, which every
#: plan computing in it shares: plans differ in fusion and operator order, not in the
#: format.
SHARED_ROUNDING = (Precision.BF16, Precision.FP16)
#: Int8 with static activation scales shares its rounding too: per-tensor activation
#: scales calibrated on the same cases put every such plan on the same coarse grid. On
#: the suite's eight workloads the three static int8 plans (PT2E, ONNX Runtime's, NNCF's)
#: passed together or failed together, at 1.9-3.1x the limit (docs/selection.md); dynamic
#: int8 (scales from each call) passed where they failed, so it is not grouped with them.
STATIC_INT8 = "static int8"


def rounding_of(precision: Precision | str | None, quantization: str | None) -> str | None:
    """The rounding a plan shares with every plan declaring the same, by name (``"bf16"``,
    ``"fp16"``, :data:`STATIC_INT8`), or ``None`` where plans of its kind may differ."""
    if precision is None or precision == "":
        return None
    try:
        parsed = Precision.parse(precision)
    except ValueError:  # a probe record of a worker that failed says "unknown"
        return None
    if parsed in SHARED_ROUNDING:
        return parsed.value
    if parsed is Precision.INT8 and quantization == Quantization.STATIC.value:
        return STATIC_INT8
    return None


def declared_quantization(cand: CandidateState) -> str | None:
    """The quantization ``cand``'s probe recorded (``None`` before its probe)."""
    return cand.status.quantization if cand.status is not None else None


def declared_rounding(cand: CandidateState) -> str | None:
    """The rounding ``cand`` declares (:func:`rounding_of`): as its probe recorded it, or,
    before its probe, from the provider's ``precision`` and ``quantization`` (what the
    probe records)."""
    if cand.status is not None:
        return rounding_of(cand.status.precision, cand.status.quantization)
    return rounding_of(*declared_scheme(cand.info.provider))


def plan_family(cand: CandidateState) -> tuple[str, str, str | None]:
    """``cand``'s family: its distribution and the arithmetic it declares (precision and
    quantization, as its probe recorded them or, before its probe, as the provider
    declares them). The variants of one compiler (Inductor's freezing, max-autotune...)
    are one family; ONNX Runtime fp32 and its dynamic int8 are two."""
    if cand.status is not None:
        return cand.info.plugin, str(cand.status.precision), cand.status.quantization
    return (cand.info.plugin, *declared_scheme(cand.info.provider))


def assign_priors(
    candidates: Sequence[CandidateState],
    context: ProviderContext,
    machine: str,
    mix: OperatorMix,
    evidence: Mapping[str, Prior],
) -> None:
    """Give every candidate its prior: the provider's own, else the user's ``evidence``,
    else the shipped table's for ``machine`` and ``mix``, else the unknown prior."""
    for cand in candidates:
        if cand.is_reference:
            cand.prior = REFERENCE_PRIOR
            continue
        cand.prior = (
            _declared(cand, attrs.evolve(context, options=cand.options))
            or evidence.get(cand.name)
            or table_prior(machine, mix, cand.name)
            or unknown_prior()
        )


def _declared(cand: CandidateState, context: ProviderContext) -> Prior | None:
    """The provider's own ``prior(context)``, when it declares one that is a Prior."""
    declare = getattr(cand.info.provider, "prior", None)
    if not callable(declare):
        return None
    declared = PlanCall.of(lambda: declare(context))
    if declared.error is not None:  # a plugin's bug must not stop the selection
        log.warning(
            "the prior of plan %r raised %s; using dlopt's own", cand.name, declared.describe()
        )
        return None
    prior = declared.value
    if prior is None or isinstance(prior, Prior):
        return prior
    log.warning(
        "the prior of plan %r is a %s, not a dlopt.plugin.Prior; using dlopt's own",
        cand.name,
        type(prior).__name__,
    )
    return None


def confirmed(cand: CandidateState) -> float | None:
    """The speedup ``cand`` is confirmed at: its screened lower bound (1 for the
    reference; ``None``: not screened)."""
    if cand.is_reference:
        return 1.0
    if cand.screening is None:
        return None
    return cand.screening.low


def leader_miss(leader: CandidateState) -> float:
    """How far the leader's screening landed from its prior on this model: ``screened
    point / prior speedup`` (the plans not yet built read their priors through it to the
    power :data:`dlopt.pipeline.schedule.SHARED_MODEL_FACTOR`); 1 when it was not screened or its prior is unknown
    (the reference, a private provider's plan with no prior)."""
    prior = prior_of(leader)
    if (
        leader.is_reference
        or leader.screening is None
        or leader.screening.point is None
        or prior.source == UNKNOWN_SOURCE
    ):
        return 1.0
    return float(leader.screening.point / prior.speedup)


def first_calls_speedup(cand: CandidateState, case_call_s: Sequence[float]) -> float | None:
    """What ``cand``'s first calls (one per case, timed as it was judged) say of its
    speedup: the reference's seconds for a call of every case over the plan's first
    calls' (``None``: not called on every case, or no time to compare). A first call
    carries whatever the plan does lazily (a compile, a warm-up), so this bound is
    pessimistic; it is read only where nothing better speaks (:func:`promise_of`)."""
    spent = sum(cand.first_calls_s)
    if len(cand.first_calls_s) != len(case_call_s) or not case_call_s or spent <= 0:
        return None
    return sum(case_call_s) / spent


def promise_of(cand: CandidateState, case_call_s: Sequence[float]) -> float:
    """What ``cand`` is expected to measure: its screened speedup, else its prior's; for a
    plan whose prior is the unknown one, what its first calls measured against the
    reference's ``case_call_s`` (:func:`first_calls_speedup`) when they were timed."""
    if cand.screening is not None and cand.screening.point is not None:
        return cand.screening.point
    prior = prior_of(cand)
    if prior.source == UNKNOWN_SOURCE:
        first = first_calls_speedup(cand, case_call_s)
        if first is not None:
            return first
    return prior.speedup


def promise_text(cand: CandidateState, case_call_s: Sequence[float]) -> str:
    """What ``cand`` is expected to measure, in words, with where that comes from."""
    if cand.screening is not None and cand.screening.point is not None:
        return f"screened at {cand.screening.describe()}"
    prior = prior_of(cand)
    first = first_calls_speedup(cand, case_call_s) if prior.source == UNKNOWN_SOURCE else None
    if first is not None:
        return (
            f"its first calls ran {first:.2f}x eager's, and its prior is unknown ({prior.source})"
        )
    return f"its prior: {prior.describe()}, {prior.source}"


def prior_of(cand: CandidateState) -> Prior:
    """``cand``'s prior (the unknown prior before it was given one)."""
    return cand.prior if cand.prior is not None else unknown_prior()
