"""``ServingEvidence``: how a decision serves its plan, as the report records it."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import frozen

from dlopt.serving.interface import ServingInterface
from dlopt.settings.guard import GuardPolicy
from dlopt.vocabulary import Concurrency, GradMode, NonFiniteInput, PlanFailure, UnseenSignature


@frozen
class RacedLatency:
    """The served plan's latency on one raced case, as the race measured it: what the
    production latency watch compares served calls of that ``signature`` with.
    ``high_ms``: the upper bound (the larger of the median and the upper end of the mean's
    interval)."""

    signature: str
    case: str
    median_ms: float
    high_ms: float


@frozen
class ServingEvidence:
    """The report's ``serving`` field (docs/serving.md).

    ``grad_mode``: the calling context every plan was judged in. ``concurrency``: what
    the decision does for threads (``concurrent``: calls the plan from each at once;
    ``serialized``: one at a time; ``per_thread``: a runner per thread).
    ``any_grad_mode``: the plan is called in each caller's own grad mode (else the
    decision enters ``grad_mode`` around every call). ``differentiable``: gradients flow
    through it. ``dynamic_shapes``: the plan declares it serves shapes it never raced;
    ``held_out_check`` says how that was checked on a held-out batch size (``None``: not
    declared). ``raced_signatures``: the text of each raced case's signature;
    ``served_families``: the shape families routed to the plan beyond them (set only when
    the held-out check passed). ``on_unseen_signature``: what any other call gets, and
    ``unseen``: the same in words. ``race_latency``: the plan's raced latency per case
    (the production latency watch's yardstick); ``guard``: what the production guard
    does, in words (docs/serving.md, "In production"). ``batch_dim`` and
    ``raced_batch_sizes``: the batch dimension and the sizes the cases raced along it
    (what dynamic batching merges calls up to; docs/deploy.md). ``interface``: the
    named tensors a server exchanges (:mod:`dlopt.serving.interface`).
    """

    grad_mode: GradMode
    concurrency: Concurrency
    any_grad_mode: bool
    differentiable: bool
    dynamic_shapes: bool
    on_unseen_signature: UnseenSignature
    raced_signatures: tuple[str, ...]
    served_families: tuple[str, ...] = ()
    held_out_check: str | None = None
    unseen: str = ""
    race_latency: tuple[RacedLatency, ...] = ()
    guard: str | None = None
    batch_dim: int = 0
    raced_batch_sizes: tuple[int, ...] = ()
    interface: ServingInterface | None = None


def unseen_words(families: bool, policy: UnseenSignature) -> str:
    """What a call with an unseen signature gets, in words."""
    rest = (
        "eager fp32 serves it (a warning the first time; counted)"
        if policy is UnseenSignature.FALLBACK
        else "it raises UnseenSignatureError"
    )
    if families:
        return (
            "the plan serves other shapes of a raced case (same structure, dtypes, devices "
            f"and ranks: its held-out check passed); for anything else {rest}"
        )
    return f"a call with a signature no case raced: {rest}"


def guard_words(guard: GuardPolicy, fallback: bool = True) -> str:
    """What the production guard does, in words (the report's ``serving.guard``);
    ``fallback=False``: there is no eager model to serve instead (a bundle loaded alone)."""
    eager = "eager fp32 serves it" if fallback else "it raises (no eager model here)"
    nonfinite = {
        NonFiniteInput.FALLBACK: f"a call with NaN or infinite inputs: {eager}",
        NonFiniteInput.RAISE: "a call with NaN or infinite inputs raises NonFiniteInputError",
        NonFiniteInput.SERVE: "a call with NaN or infinite inputs goes to the plan unchecked",
    }[guard.on_nonfinite_input]
    if guard.on_plan_failure is PlanFailure.FALLBACK:
        failure = (
            f"a plan that raises: {eager}, and {guard.max_failures} failures in a row "
            "disable the plan"
        )
    else:
        failure = "a plan that raises: the exception reaches the caller (counted)"
    if guard.shadow_rate > 0:
        shadow = (
            f"{guard.shadow_rate:.3g} of plan calls rerun by eager fp32 in the background "
            f"and compared within the plan's limits ({guard.max_mismatches} mismatches "
            "disable it)"
        )
    else:
        shadow = "no shadow checks (shadow_rate 0)"
    return f"{nonfinite}; {failure}; {shadow}; served latency watched against the race's"


def with_serving_policy(
    evidence: ServingEvidence | None,
    policy: UnseenSignature,
    guard: GuardPolicy | None = None,
    fallback: bool = True,
) -> ServingEvidence | None:
    """``evidence`` as served under ``policy`` and ``guard`` (a decision loaded from a
    cache record or a bundle follows the caller's policy, not the one it was raced with)."""
    if evidence is None:
        return evidence
    changes: dict[str, Any] = {}
    if evidence.on_unseen_signature is not policy:
        changes.update(
            on_unseen_signature=policy,
            unseen=unseen_words(bool(evidence.served_families), policy),
        )
    if guard is not None:
        words = guard_words(guard, fallback)
        if evidence.guard != words:
            changes["guard"] = words
    return attrs.evolve(evidence, **changes) if changes else evidence
