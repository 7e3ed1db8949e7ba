"""``ServedPlan``: how a decision calls its plan for any caller, in any context, from many threads.

Per call, in order:

1. **Route** the call by its signature (:mod:`dlopt.serving.signature`): a raced
   signature, or one of a raced case's shape family when the plan serves dynamic shapes
   and passed the held-out check, goes to the plan; any other is *unseen* and, as the
   policy says, falls back to eager fp32 (a warning the first time; counted) or raises.
2. **Gradients**: a caller that needs them (autograd on, an input that requires grad)
   through a plan without them gets :class:`~dlopt.errors.ServingContextError`.
3. **Context**: a plan that computes the same in any grad mode is called in the
   caller's; any other is called in the grad mode it was judged in, on inputs of the kind
   that mode makes, and its outputs are handed back as the caller can use them
   (:mod:`dlopt.contract.calling`).
4. **Threads**: a ``serialized`` plan is called by one thread at a time (the call and its
   synchronization under one lock); a ``per_thread`` plan gets one runner per thread.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Collection, Hashable
from typing import Any

from dlopt.contract.calling import (
    caller_grad_mode,
    grad_mode_scope,
    inputs_of_kind,
    needs_gradients,
    outputs_for_caller,
)
from dlopt.contract.provider import BuiltPlan
from dlopt.errors import ServingContextError, UnseenSignatureError
from dlopt.serving.evidence import ServingEvidence
from dlopt.serving.signature import describe, family_key, signature_key
from dlopt.vocabulary import Concurrency, GradMode, TextEnum, UnseenSignature

#: Signatures whose route is remembered; beyond it the memory starts again (a stream of
#: ever-new shapes must not grow a decision without bound).
_ROUTE_MEMORY = 4096
#: Unseen signatures a decision keeps as text for its owner to read.
_UNSEEN_KEPT = 64


class _Route(TextEnum):
    PLAN = "plan"
    FALLBACK = "fallback"
    REFUSE = "refuse"


class ServedPlan:
    """Calls ``plan`` for every caller of a decision (see the module docstring).

    ``plan_name``: for messages. ``grad_mode``: the context it was judged in. ``raced``:
    the text of every raced signature (:func:`~dlopt.serving.signature.describe`;
    ``None``: not recorded, as in a report written before they were, so every call goes
    to the plan);
    ``families``: the shape families it serves beyond them (empty unless its dynamic
    shapes passed the held-out check). ``on_unseen``: what an unseen call gets.
    ``fallback``: eager fp32 (the user's model), or ``None`` when there is none here (a
    bundle loaded without its model): an unseen call then raises, saying so.
    """

    def __init__(
        self,
        plan: BuiltPlan,
        *,
        plan_name: str,
        grad_mode: GradMode,
        raced: Collection[str] | None,
        families: Collection[str] = (),
        on_unseen: UnseenSignature = UnseenSignature.FALLBACK,
        fallback: Callable[..., Any] | None = None,
    ) -> None:
        self.plan = plan
        self.plan_name = plan_name
        self.grad_mode = GradMode(grad_mode)
        self.routed = raced is not None
        self.raced = frozenset(raced or ())
        self.families = frozenset(families)
        self.on_unseen = UnseenSignature(on_unseen)
        self.fallback = fallback
        traits = plan.serving
        self.concurrency = traits.concurrency
        if self.concurrency is Concurrency.PER_THREAD and plan.thread_runner is None:
            # A plan that promised runners per thread but gave no way to make them is
            # served one thread at a time instead: safe, and the report says so.
            self.concurrency = Concurrency.SERIALIZED
        self._lock: contextlib.AbstractContextManager[Any] = (
            threading.Lock()
            if self.concurrency is Concurrency.SERIALIZED
            else contextlib.nullcontext()
        )
        self._local = threading.local()
        self._routes: dict[Hashable, _Route] = {}
        self._count_lock = threading.Lock()
        self._fallback_calls = 0
        self._warned = False
        self._unseen: list[str] = []

    @classmethod
    def from_evidence(
        cls,
        plan: BuiltPlan,
        evidence: ServingEvidence | None,
        *,
        plan_name: str,
        fallback: Callable[..., Any] | None = None,
        on_unseen: UnseenSignature | None = None,
    ) -> ServedPlan:
        """Serve ``plan`` as a report's ``serving`` evidence says (``on_unseen`` overrides
        its policy); a report without one (written before it was recorded) sends every
        call to the plan in ``inference_mode``, as such decisions were judged."""
        if evidence is None:
            return cls(
                plan,
                plan_name=plan_name,
                grad_mode=GradMode.INFERENCE_MODE,
                raced=None,
                fallback=fallback,
            )
        return cls(
            plan,
            plan_name=plan_name,
            grad_mode=evidence.grad_mode,
            raced=evidence.raced_signatures,
            families=evidence.served_families,
            on_unseen=on_unseen if on_unseen is not None else evidence.on_unseen_signature,
            fallback=fallback,
        )

    # -- what the decision reports ------------------------------------------------------
    @property
    def fallback_calls(self) -> int:
        """How many calls eager fp32 served because their signature was never raced."""
        return self._fallback_calls

    @property
    def unseen_signatures(self) -> tuple[str, ...]:
        """The first unseen signatures seen (text), in the order they came."""
        return tuple(self._unseen)

    # -- the call -------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.routed:
            key = signature_key(args, kwargs)
            route = self._routes.get(key)
            if route is None:
                route = self._route(key)
            if route is _Route.FALLBACK:
                return self._fall_back(key, args, kwargs)
            if route is _Route.REFUSE:
                raise UnseenSignatureError(self._unseen_message(key))
        caller = caller_grad_mode()
        if not self.plan.serving.differentiable and needs_gradients(caller, args, kwargs):
            raise ServingContextError(
                f"this call needs gradients (autograd is on and an input requires grad), "
                f"but plan {self.plan_name!r}, judged under {self.grad_mode}, computes "
                "without autograd; call the decision under torch.inference_mode() or "
                "torch.no_grad() (or the model itself where you need gradients)"
            )
        with self._lock:
            if self.plan.serving.any_grad_mode:
                out = self._runner()(*args, **kwargs)
                self._synchronize()
                return out
            with grad_mode_scope(self.grad_mode):
                args, kwargs = inputs_of_kind(self.grad_mode, args, kwargs)
                out = self._runner()(*args, **kwargs)
                self._synchronize()
            return outputs_for_caller(out, caller)

    def _runner(self) -> Callable[..., Any]:
        if self.concurrency is not Concurrency.PER_THREAD:
            return self.plan
        runner = getattr(self._local, "runner", None)
        if runner is None:
            assert self.plan.thread_runner is not None
            runner = self._local.runner = self.plan.thread_runner()
        return runner

    def _synchronize(self) -> None:
        if self.plan.synchronize is not None:
            self.plan.synchronize()

    # -- unseen signatures ------------------------------------------------------------------
    def _route(self, key: Hashable) -> _Route:
        text = describe(key)
        if text in self.raced or (self.families and describe(family_key(key)) in self.families):
            route = _Route.PLAN
        elif self.on_unseen is UnseenSignature.FALLBACK and self.fallback is not None:
            route = _Route.FALLBACK
        else:
            route = _Route.REFUSE
        if len(self._routes) >= _ROUTE_MEMORY:
            self._routes.clear()
        self._routes[key] = route
        if route is not _Route.PLAN:
            with self._count_lock:
                if len(self._unseen) < _UNSEEN_KEPT and text not in self._unseen:
                    self._unseen.append(text)
        return route

    def _fall_back(self, key: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        assert self.fallback is not None
        with self._count_lock:
            self._fallback_calls += 1
            warn, self._warned = not self._warned, True
        if warn:
            warnings.warn(
                f"plan {self.plan_name!r} was raced on {len(self.raced)} signature(s), and "
                f"this call's {describe(key)} is none of them: eager fp32 serves it (and every "
                "other unseen signature; decision.fallback_calls counts them). Race this "
                "shape too (add a WorkloadCase), or set "
                "OptimizationPolicy(on_unseen_signature='raise') to refuse such calls",
                RuntimeWarning,
                stacklevel=4,  # the line that called the decision
            )
        return self.fallback(*args, **kwargs)

    def _unseen_message(self, key: Hashable) -> str:
        raced = "; ".join(sorted(self.raced)) or "none recorded"
        if self.on_unseen is UnseenSignature.FALLBACK:
            why = (
                "there is no eager model here to fall back to (pass the model: "
                "load_bundle(path, model=model))"
            )
        else:
            why = "the policy refuses unseen signatures (on_unseen_signature='raise')"
        return (
            f"plan {self.plan_name!r} was never raced on this call's signature "
            f"{describe(key)} (raced: {raced}), and {why}; add a WorkloadCase with these "
            "shapes and select again to serve them with a raced plan"
        )

    def close(self) -> None:
        """Release the plan (and with it every runner it made for a thread)."""
        self.plan.close()
