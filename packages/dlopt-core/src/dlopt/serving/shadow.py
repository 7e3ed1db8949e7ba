"""``ShadowChecker``: eager fp32 reruns sampled plan calls off the caller's path.

A sampled call hands a copy of its inputs and of the plan's outputs to a bounded queue
(when it is full the check is skipped and counted: the caller never waits); one daemon
thread, at the lowest scheduling priority, runs eager fp32 on the copy in the calling
context the plan was judged in, and
holds the plan's outputs to the plan's own validation limits
(:func:`~dlopt.validation.validate_outputs`: its precision, output dtype and the quality
policy). An fp32 plan's limits widen with the reference's own fp32 rounding, as in the
race: the rounding the race measured for that shape family when the decision has it,
else measured once per family in this thread (a float64 run of a copy of the model).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import torch

from dlopt.contract.calling import grad_mode_scope, inputs_of_kind
from dlopt.platform.tree import map_tensors
from dlopt.precision import Precision
from dlopt.serving.production import ProductionGuard
from dlopt.serving.signature import describe, family_key, signature_key
from dlopt.settings.quality import QualityPolicy
from dlopt.validation.reference import ReferenceCase
from dlopt.validation.result import validate_outputs
from dlopt.validation.rounding import LeafRounding, measure_fp32_rounding
from dlopt.validation.structure import iter_leaves
from dlopt.vocabulary import GradMode

log = logging.getLogger(__name__)

#: Sampled calls waiting for their check; beyond it a check is skipped (and counted).
QUEUE_SIZE = 8
#: How long ``close`` waits for the check in progress.
CLOSE_WAIT_S = 5.0


@attrs.frozen
class ShadowJudge:
    """How a shadow check judges the plan: as the race did."""

    precision: Precision
    output_dtype: torch.dtype | None
    quality: QualityPolicy
    grad_mode: GradMode
    #: The race's measured fp32 rounding per shape family (text), where it has it.
    rounding: Mapping[str, Mapping[str, LeafRounding]] = attrs.field(factory=dict)


@attrs.frozen
class _Check:
    signature: str
    family: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: Any
    call: int


def rounding_by_family(cases: Iterable[ReferenceCase]) -> dict[str, dict[str, LeafRounding]]:
    """The race's measured fp32 rounding of each case, by the case's shape family (text;
    the first case of a family speaks for it; cases without a measurement are left out)."""
    found: dict[str, dict[str, LeafRounding]] = {}
    for case in cases:
        if case.fp32_rounding:
            family = describe(family_key(signature_key(case.args, case.kwargs)))
            found.setdefault(family, dict(case.fp32_rounding))
    return found


#: The nice value of the shadow thread (and the threads its eager calls start): the
#: lowest, so the scheduler gives the serving threads the cores whenever they want them.
SHADOW_NICE = 19


def _lowest_priority() -> None:
    """Lower this thread's scheduling priority (Linux: a thread is a task of its own, and
    threads it starts, torch's OpenMP team for its eager calls among them, inherit it).
    Elsewhere ``setpriority`` would apply to the whole process: left alone."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SHADOW_NICE)


def _copy(value: Any) -> Any:
    return map_tensors(lambda t: t.detach().clone(), value)


class ShadowChecker:
    """The background checks of one decision (see the module docstring)."""

    def __init__(
        self,
        guard: ProductionGuard,
        model: Callable[..., Any],
        judge: ShadowJudge,
        *,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self.guard = guard
        self.model = model
        self.judge = judge
        self._queue: queue.Queue[_Check | None] = queue.Queue(maxsize=queue_size)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        self._rounding: dict[str, Mapping[str, LeafRounding]] = dict(judge.rounding)

    def submit(
        self,
        signature: str,
        family: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        outputs: Any,
        call: int,
    ) -> None:
        """Queue a check of one plan call (copies taken now: the caller may change its
        tensors once it has them back); skipped and counted when the queue is full."""
        if self._closed:
            return
        if self._queue.full():
            self.guard.shadow_skipped()
            return
        check = _Check(signature, family, _copy(args), _copy(kwargs), _copy(outputs), call)
        try:
            self._queue.put_nowait(check)
        except queue.Full:
            self.guard.shadow_skipped()
            return
        self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="dlopt-shadow-checks", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        _lowest_priority()
        while True:
            check = self._queue.get()
            try:
                if check is None:
                    return
                self._check(check)
            finally:
                self._queue.task_done()

    def _check(self, check: _Check) -> None:
        try:
            reason = self._judge(check)
        except Exception as exc:  # eager itself failed on the copy: not the plan's fault
            log.warning("a shadow check of eager fp32 failed: %s: %s", type(exc).__name__, exc)
            self.guard.shadow_error()
            return
        self.guard.shadow_checked(check.signature, reason, check.call)

    def _judge(self, check: _Check) -> str | None:
        judge = self.judge
        with grad_mode_scope(judge.grad_mode):
            args, kwargs = inputs_of_kind(judge.grad_mode, check.args, check.kwargs)
            outputs = self.model(*args, **kwargs)
            expected = map_tensors(lambda t: t.detach().to("cpu", copy=True), outputs)
        reference = ReferenceCase(
            f"shadow check of {check.signature}",
            args,
            kwargs,
            expected,
            tuple(path for path, _ in iter_leaves(expected)),
        )
        if judge.precision is Precision.FP32 and judge.quality.fp32_rounding_factor > 0:
            reference.fp32_rounding = dict(self._family_rounding(check, args, kwargs, expected))
        candidate = map_tensors(lambda t: t.detach().to("cpu"), check.outputs)
        result = validate_outputs(
            candidate,
            reference,
            precision=judge.precision,
            output_dtype=judge.output_dtype,
            policy=judge.quality,
            case_name=check.signature,
        )
        return None if result.passed else result.reason or "failed validation"

    def _family_rounding(
        self, check: _Check, args: tuple[Any, ...], kwargs: dict[str, Any], expected: Any
    ) -> Mapping[str, LeafRounding]:
        known = self._rounding.get(check.family)
        if known is not None:
            return known
        if not isinstance(self.model, torch.nn.Module):
            return {}  # a plain callable has no weights to run in float64
        measured, _ = measure_fp32_rounding(self.model, [(args, kwargs, expected)])
        self._rounding[check.family] = measured[0]
        return measured[0]

    def close(self) -> None:
        """Stop the thread once the check in progress ends (queued checks are dropped)."""
        self._closed = True
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            self._queue.task_done()
        thread = self._thread
        if thread is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=CLOSE_WAIT_S)
            thread.join(CLOSE_WAIT_S)

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every queued check has been judged (for tests and shutdown);
        ``False`` when ``timeout`` seconds were not enough."""
        done = threading.Event()

        def waiter() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        return done.wait(timeout)
