"""``ServedPlan``: how a decision calls its plan for any caller, in any context, from many threads.

Per call, in order:

1. **Route** the call by its signature (:mod:`dlopt.serving.signature`): a raced
   signature, or one of a raced case's shape family when the plan serves dynamic shapes
   and passed the held-out check, goes to the plan; any other is *unseen* and, as the
   policy says, falls back to eager fp32 (a warning the first time; counted) or raises.
2. **Guard** (:mod:`dlopt.serving.production`): a disabled plan sends the call to eager fp32;
   floating inputs holding NaN or infinity (outside every raced input) go where
   ``on_nonfinite_input`` says, checked with numpy on the calling thread (torch's own
   check would wake its thread pool, whose spinning threads then slow the plan).
3. **Gradients**: a caller that needs them (autograd on, an input that requires grad)
   through a plan without them gets :class:`~dlopt.errors.ServingContextError`.
4. **Context**: a plan that computes the same in any grad mode is called in the
   caller's; any other is called in the grad mode it was judged in, on inputs of the kind
   that mode makes, and its outputs are handed back as the caller can use them
   (:mod:`dlopt.contract.calling`).
5. **Threads**: a ``serialized`` plan is called by one thread at a time (the call and its
   synchronization under one lock); a ``per_thread`` plan gets one runner per thread.
6. **Production**: the plan call's time feeds the latency watch; an exception from the
   plan is served by eager fp32 (and counted, and after ``max_failures`` in a row the
   plan is disabled) or reaches the caller, as ``on_plan_failure`` says; a sampled share
   of calls is checked against eager fp32 in the background (:mod:`dlopt.serving.shadow`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Hashable
from typing import Any

import attrs
import torch

from dlopt.contract.calling import (
    caller_grad_mode,
    grad_mode_scope,
    inputs_of_kind,
    needs_gradients,
    outputs_for_caller,
)
from dlopt.contract.provider import BuiltPlan
from dlopt.errors import NonFiniteInputError, ServingContextError, UnseenSignatureError
from dlopt.platform.arrays import any_nonfinite
from dlopt.platform.tree import iter_tensors
from dlopt.serving.evidence import RacedLatency, ServingEvidence
from dlopt.serving.health import HealthRecord
from dlopt.serving.production import ProductionGuard, SignatureWatch
from dlopt.serving.shadow import ShadowChecker, ShadowJudge
from dlopt.serving.signature import describe, family_key, signature_key
from dlopt.settings.guard import GuardPolicy
from dlopt.vocabulary import (
    Concurrency,
    FallbackReason,
    GradMode,
    NonFiniteInput,
    PlanFailure,
    TextEnum,
    UnseenSignature,
)

#: Signatures whose route is remembered; beyond it the memory starts again (a stream of
#: ever-new shapes must not grow a decision without bound).
_ROUTE_MEMORY = 4096
#: Unseen signatures a decision keeps as text for its owner to read.
_UNSEEN_KEPT = 64


class _Route(TextEnum):
    PLAN = "plan"
    FALLBACK = "fallback"
    REFUSE = "refuse"


@attrs.frozen
class _Known:
    """A signature seen before: where it goes, its text and family's text, and the latency
    watch of its raced case (``None``: not raced, or no race latency recorded)."""

    route: _Route
    text: str
    family: str
    watch: SignatureWatch | None


def _nonfinite_leaf(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return any_nonfinite(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return False
    return any(any_nonfinite(t) for t in iter_tensors(value))


def has_nonfinite_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether any floating or complex input tensor holds NaN or infinity (read with numpy
    on the calling thread for host tensors: :func:`dlopt.platform.arrays.any_nonfinite`).
    Runs on every served call: plain tensor arguments are looked at directly."""
    for value in args:
        if _nonfinite_leaf(value):
            return True
    return any(_nonfinite_leaf(value) for value in kwargs.values()) if kwargs else False


class ServedPlan:
    """Calls ``plan`` for every caller of a decision (see the module docstring).

    ``plan_name``: for messages. ``grad_mode``: the context it was judged in. ``raced``:
    the text of every raced signature (:func:`~dlopt.serving.signature.describe`;
    ``None``: not recorded, as in a report written before they were, so every call goes
    to the plan);
    ``families``: the shape families it serves beyond them (empty unless its dynamic
    shapes passed the held-out check). ``on_unseen``: what an unseen call gets.
    ``fallback``: eager fp32 (the user's model), or ``None`` when there is none here (a
    bundle loaded without its model): a call that would go to it then raises, saying so.
    ``guard``: the production guard's settings; ``race_latency`` and ``race_p50_ms``:
    the race's latency (the latency watch's yardstick); ``judge``: how a shadow check
    holds the plan's outputs (no shadow checks without it or without ``fallback``).
    ``clock``: what times the plan's calls (seconds; injectable for tests).
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
        guard: GuardPolicy | None = None,
        race_latency: Collection[RacedLatency] = (),
        race_p50_ms: float | None = None,
        judge: ShadowJudge | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.plan = plan
        self._clock = clock
        self.plan_name = plan_name
        self.grad_mode = GradMode(grad_mode)
        self.routed = raced is not None
        self.raced = frozenset(raced or ())
        self.families = frozenset(families)
        self.on_unseen = UnseenSignature(on_unseen)
        self.fallback = fallback
        self.policy = guard if guard is not None else GuardPolicy()
        self.guard = ProductionGuard(plan_name, self.policy, tuple(race_latency), race_p50_ms)
        self._check_nonfinite = self.policy.on_nonfinite_input is not NonFiniteInput.SERVE
        self._shadow = (
            ShadowChecker(self.guard, fallback, judge)
            if fallback is not None and judge is not None and self.policy.shadow_rate > 0
            else None
        )
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
        self._routes: dict[Hashable, _Known] = {}
        self._count_lock = threading.Lock()
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
        guard: GuardPolicy | None = None,
        race_p50_ms: float | None = None,
        judge: ShadowJudge | None = None,
    ) -> ServedPlan:
        """Serve ``plan`` as a report's ``serving`` evidence says (``on_unseen`` overrides
        its policy); a report without one (written before it was recorded) sends every
        call to the plan in ``inference_mode``, as such decisions were judged."""
        common: dict[str, Any] = {
            "plan_name": plan_name,
            "fallback": fallback,
            "guard": guard,
            "race_p50_ms": race_p50_ms,
            "judge": judge,
        }
        if evidence is None:
            return cls(plan, grad_mode=GradMode.INFERENCE_MODE, raced=None, **common)
        return cls(
            plan,
            grad_mode=evidence.grad_mode,
            raced=evidence.raced_signatures,
            families=evidence.served_families,
            on_unseen=on_unseen if on_unseen is not None else evidence.on_unseen_signature,
            race_latency=evidence.race_latency,
            **common,
        )

    # -- what the decision reports ------------------------------------------------------
    @property
    def fallback_calls(self) -> int:
        """How many calls eager fp32 served instead of the plan (for any reason:
        :meth:`health` says which)."""
        return self.guard.fallback_calls

    @property
    def unseen_signatures(self) -> tuple[str, ...]:
        """The first unseen signatures seen (text), in the order they came."""
        return tuple(self._unseen)

    def health(self) -> HealthRecord:
        """The production record so far (:class:`~dlopt.serving.health.HealthRecord`)."""
        return self.guard.health()

    def drain_shadow_checks(self, timeout: float = 30.0) -> bool:
        """Wait until every queued shadow check is judged (``True``), or ``timeout``."""
        return self._shadow is None or self._shadow.drain(timeout)

    # -- the call -------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.serve(args, kwargs)

    def serve(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, requests: int = 1) -> Any:
        """Serve one call (see the module docstring). ``requests``: how many callers'
        requests the call carries (a merged call of :mod:`dlopt.serving.batching`, whose
        requests were each checked by :meth:`plan_bound`): the counts are theirs, and an
        error reaches the batcher uncounted (it serves each request again on its own)."""
        merged = requests > 1
        known = self._known(signature_key(args, kwargs)) if self.routed else None
        if known is not None and known.route is not _Route.PLAN:
            if known.route is _Route.FALLBACK:
                return self._eager(
                    FallbackReason.UNSEEN_SIGNATURE, args, kwargs, known.text, requests
                )
            self.guard.refused()
            raise UnseenSignatureError(self._unseen_message(known.text))
        if self.guard.disabled is not None:
            return self._eager(FallbackReason.PLAN_DISABLED, args, kwargs, None, requests)
        if self._check_nonfinite and not merged and has_nonfinite_input(args, kwargs):
            if self.policy.on_nonfinite_input is NonFiniteInput.RAISE:
                self.guard.refused()
                raise NonFiniteInputError(
                    f"this call's floating inputs hold NaN or infinity, and plan "
                    f"{self.plan_name!r} was judged on finite inputs only; the policy refuses "
                    "such calls (on_nonfinite_input='raise'). Clean the inputs, or set "
                    "on_nonfinite_input='fallback' to serve them with eager fp32"
                )
            return self._eager(FallbackReason.NONFINITE_INPUT, args, kwargs)
        caller = caller_grad_mode()
        if not self.plan.serving.differentiable and needs_gradients(caller, args, kwargs):
            self.guard.refused()
            raise ServingContextError(
                f"this call needs gradients (autograd is on and an input requires grad), "
                f"but plan {self.plan_name!r}, judged under {self.grad_mode}, computes "
                "without autograd; call the decision under torch.inference_mode() or "
                "torch.no_grad() (or the model itself where you need gradients)"
            )
        try:
            out, seconds = self._call_plan(caller, args, kwargs)
        except Exception as exc:
            return self._plan_failed(exc, args, kwargs, requests)
        self.guard.plan_served(seconds, known.watch if known is not None else None, requests)
        if self._shadow is not None and self.guard.sample_shadow():
            if known is None:
                key = signature_key(args, kwargs)
                known = _Known(_Route.PLAN, describe(key), describe(family_key(key)), None)
            self._shadow.submit(known.text, known.family, args, kwargs, out, self.guard.plan_calls)
        return out

    def plan_bound(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable | None:
        """The call's signature key when the plan would serve it as it stands (its
        signature routed to the plan, the plan not disabled, finite inputs, no gradients
        the plan lacks); ``None`` when anything else would (eager fp32, a refusal). What
        a batcher asks before it merges a request with others."""
        key = signature_key(args, kwargs)
        if self.routed and self._known(key).route is not _Route.PLAN:
            return None
        if self.guard.disabled is not None:
            return None
        if self._check_nonfinite and has_nonfinite_input(args, kwargs):
            return None
        if not self.plan.serving.differentiable and needs_gradients(
            caller_grad_mode(), args, kwargs
        ):
            return None
        return key

    def _call_plan(
        self, caller: GradMode, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, float]:
        """The plan's outputs for this call, and how long the call and its
        synchronization took (inside the lock: waiting for another thread is not the
        plan's time)."""
        with self._lock:
            if self.plan.serving.any_grad_mode:
                start = self._clock()
                out = self._runner()(*args, **kwargs)
                self._synchronize()
                return out, self._clock() - start
            with grad_mode_scope(self.grad_mode):
                args, kwargs = inputs_of_kind(self.grad_mode, args, kwargs)
                start = self._clock()
                out = self._runner()(*args, **kwargs)
                self._synchronize()
                seconds = self._clock() - start
            return outputs_for_caller(out, caller), seconds

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

    # -- eager fp32 instead of the plan -------------------------------------------------------
    def _eager(
        self,
        reason: FallbackReason,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        signature: str | None = None,
        requests: int = 1,
    ) -> Any:
        if self.fallback is None:
            # Only non-finite inputs come here without a model: unseen signatures are
            # refused by their route, and a plan is disabled only where eager serves.
            self.guard.refused()
            raise NonFiniteInputError(
                f"this call's floating inputs hold NaN or infinity, which plan "
                f"{self.plan_name!r} was never judged on, and there is no eager model here "
                "to serve it; pass the model (load_bundle(path, model=model))"
            )
        self.guard.fallback(reason, requests)
        self.guard.warn_once(reason.value, self._fallback_message(reason, signature), 5)
        return self.fallback(*args, **kwargs)

    def _fallback_message(self, reason: FallbackReason, signature: str | None) -> str:
        if reason is FallbackReason.UNSEEN_SIGNATURE:
            return (
                f"plan {self.plan_name!r} was raced on {len(self.raced)} signature(s), and "
                f"this call's {signature} is none of them: eager fp32 serves it (and every "
                "other unseen signature; decision.fallback_calls counts them). Race this "
                "shape too (add a WorkloadCase), or set "
                "OptimizationPolicy(on_unseen_signature='raise') to refuse such calls"
            )
        if reason is FallbackReason.NONFINITE_INPUT:
            return (
                f"this call's floating inputs hold NaN or infinity, which plan "
                f"{self.plan_name!r} was never judged on: eager fp32 serves it (and every "
                "such call; decision.health() counts them). Set "
                "OptimizationPolicy(on_nonfinite_input='raise') to refuse such calls"
            )
        if reason is FallbackReason.PLAN_DISABLED:
            return (
                f"plan {self.plan_name!r} is disabled ({self.guard.disabled}): eager fp32 "
                "serves every call from now on (decision.health() has the record)"
            )
        return (
            f"plan {self.plan_name!r} raised ({self.guard.health().last_failure}): eager fp32 "
            f"served this call; {self.policy.max_failures} failures in a row disable the "
            "plan (decision.health() counts them; on_plan_failure='raise' lets them through)"
        )

    def _plan_failed(
        self, exc: Exception, args: tuple[Any, ...], kwargs: dict[str, Any], requests: int = 1
    ) -> Any:
        """The plan raised: eager fp32 serves the call, or the exception goes on."""
        if self.policy.on_plan_failure is PlanFailure.RAISE or self.fallback is None:
            # Nothing serves instead: the caller gets the plan's error, and the plan is
            # never disabled (it may recover; there is nothing to roll back to).
            self.guard.plan_failed(exc, can_disable=False)
            if requests == 1:
                self.guard.refused()
            raise exc
        try:
            out = self.fallback(*args, **kwargs)
        except Exception as eager_exc:
            # Eager fails on these inputs too: the call is at fault, not the plan.
            if requests == 1:
                self.guard.refused()
            raise eager_exc from exc
        disabled = self.guard.plan_failed(exc)
        self.guard.fallback(FallbackReason.PLAN_FAILURE, requests)
        reason = FallbackReason.PLAN_DISABLED if disabled else FallbackReason.PLAN_FAILURE
        self.guard.warn_once(reason.value, self._fallback_message(reason, None), 5)
        return out

    # -- unseen signatures ------------------------------------------------------------------
    def _known(self, key: Hashable) -> _Known:
        known = self._routes.get(key)
        if known is None:
            known = self._route(key)
        return known

    def _route(self, key: Hashable) -> _Known:
        text = describe(key)
        family = describe(family_key(key))
        if text in self.raced or (self.families and family in self.families):
            route = _Route.PLAN
        elif self.on_unseen is UnseenSignature.FALLBACK and self.fallback is not None:
            route = _Route.FALLBACK
        else:
            route = _Route.REFUSE
        known = _Known(route, text, family, self.guard.watch_of(text))
        if len(self._routes) >= _ROUTE_MEMORY:
            self._routes.clear()
        self._routes[key] = known
        if route is not _Route.PLAN:
            with self._count_lock:
                if len(self._unseen) < _UNSEEN_KEPT and text not in self._unseen:
                    self._unseen.append(text)
        return known

    def _unseen_message(self, signature: str) -> str:
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
            f"{signature} (raced: {raced}), and {why}; add a WorkloadCase with these "
            "shapes and select again to serve them with a raced plan"
        )

    def close(self) -> None:
        """Stop the shadow checks, then release the plan (and every runner it made for a
        thread)."""
        if self._shadow is not None:
            self._shadow.close()
        self.plan.close()
