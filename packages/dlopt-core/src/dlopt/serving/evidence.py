"""``ServingEvidence``: how a decision serves its plan, as the report records it."""

from __future__ import annotations

import attrs
from attrs import frozen

from dlopt.vocabulary import Concurrency, GradMode, UnseenSignature


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
    ``unseen``: the same in words.
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


def with_unseen_policy(
    evidence: ServingEvidence | None, policy: UnseenSignature
) -> ServingEvidence | None:
    """``evidence`` as served under ``policy`` (a decision loaded from a cache record or a
    bundle follows the caller's policy, not the one it was raced with)."""
    if evidence is None or evidence.on_unseen_signature is policy:
        return evidence
    return attrs.evolve(
        evidence,
        on_unseen_signature=policy,
        unseen=unseen_words(bool(evidence.served_families), policy),
    )
