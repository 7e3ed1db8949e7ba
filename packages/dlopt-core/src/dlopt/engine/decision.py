"""``OptimizationDecision``: the plan to serve with, plus its evidence."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dlopt.bundle.store import PROGRAM_ARTIFACT, BundleError, SavedProgram, write_bundle
from dlopt.contract.provider import BuiltPlan
from dlopt.errors import ConfigurationError, ServingError
from dlopt.evidence.report import OptimizationReport
from dlopt.platform.config_checks import is_int, is_number
from dlopt.platform.containment import Containment
from dlopt.platform.fileio import TemporaryArtifacts
from dlopt.precision import Precision
from dlopt.serving.batching import DEFAULT_MAX_DELAY_MS, BatchedDecision
from dlopt.serving.health import HealthRecord
from dlopt.serving.served import ServedPlan
from dlopt.serving.shadow import ShadowJudge
from dlopt.settings.guard import GuardPolicy
from dlopt.settings.quality import QualityPolicy
from dlopt.validation.rounding import LeafRounding
from dlopt.vocabulary import GradMode, UnseenSignature


class OptimizationDecision:
    """Call it like the model: it runs the selected plan. ``report`` says why.

    ``close()`` releases the plan's runtime resources (sessions, engines) and removes the
    temporary artifact directory the selection made (``scratch``), which the plan may
    read while the decision is alive (ONNX Runtime session files); a bundle saved before
    keeps its own copy. What the plan left as it was brought into this process
    (``containment``: an SDK's helper processes, its own temp directory) goes then
    too. All of it also goes when the decision is garbage-collected or the interpreter
    exits. The decision is a context manager:
    ``with optimizer.select(model, workload) as decision:`` releases all of it on exit.

    It serves callers the way the race judged the plan (docs/serving.md): in any grad
    mode (entering the workload's around a plan bound to it), from many threads at once
    (serialized or per thread where the plan says so), and a call whose signature no
    case raced goes to eager fp32 (``fallback``, the user's model; counted in
    :attr:`fallback_calls`) or raises, as ``report.serving`` says
    (``on_unseen_signature`` overrides it).

    In production (docs/serving.md, "In production") ``guard`` says what the decision
    does with non-finite inputs, a plan that raises and shadow checks; :meth:`health`
    returns the record. Shadow checks hold the plan to ``quality`` (the selection's
    quality policy), an fp32 plan's limits widened by ``rounding``, the reference's fp32
    rounding per shape family as the race measured it.
    """

    def __init__(
        self,
        plan: BuiltPlan,
        report: OptimizationReport,
        *,
        scratch: TemporaryArtifacts | None = None,
        containment: Containment | None = None,
        program: Callable[[Path | None], SavedProgram | None] | None = None,
        fallback: Callable[..., Any] | None = None,
        on_unseen_signature: UnseenSignature | str | None = None,
        guard: GuardPolicy | None = None,
        quality: QualityPolicy | None = None,
        rounding: Mapping[str, Mapping[str, LeafRounding]] | None = None,
    ) -> None:
        self.plan = plan
        self.report = report
        self._scratch = scratch
        self._containment = containment
        #: Saves the plan as a compiled program for a bundle (see :meth:`save_bundle`).
        self._program = program
        serving = report.serving
        selected = next((c for c in report.candidates if c.name == report.selected_plan), None)
        judge = ShadowJudge(
            precision=Precision.parse(plan.precision),
            output_dtype=plan.output_dtype,
            quality=quality or QualityPolicy(),
            grad_mode=serving.grad_mode if serving is not None else GradMode.INFERENCE_MODE,
            rounding=dict(rounding or {}),
        )
        self._served = ServedPlan.from_evidence(
            plan,
            serving,
            plan_name=report.selected_plan,
            fallback=fallback,
            on_unseen=None if on_unseen_signature is None else UnseenSignature(on_unseen_signature),
            guard=guard,
            race_p50_ms=selected.latency.median_ms if selected is not None else None,
            judge=judge,
        )
        self._batchers: list[BatchedDecision] = []

    @property
    def selected_plan(self) -> str:
        return self.report.selected_plan

    @property
    def batch_size(self) -> int:
        """The batch size to serve the selected plan at: 1 except under the throughput
        objective, where the selection chose it (``report.throughput`` shows the curves)."""
        return self.report.batch_size or 1

    @property
    def selection_reason(self) -> str:
        return self.report.selection_reason

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the selected plan; an asynchronous plan's outputs are finished on return.

        Raises :class:`~dlopt.errors.ServingContextError` for a caller that needs
        gradients through a plan without them, and
        :class:`~dlopt.errors.UnseenSignatureError` for a signature no case raced when the
        policy refuses those (or there is no eager model to fall back to)."""
        return self._served(*args, **kwargs)

    @property
    def fallback_calls(self) -> int:
        """How many calls eager fp32 served because their signature was never raced."""
        return self._served.fallback_calls

    @property
    def unseen_signatures(self) -> tuple[str, ...]:
        """The first signatures this decision was called with that no case raced."""
        return self._served.unseen_signatures

    def batched(
        self,
        max_batch_size: int | None = None,
        max_delay_ms: float = DEFAULT_MAX_DELAY_MS,
        *,
        max_concurrent_batches: int | None = None,
    ) -> BatchedDecision:
        """A thread-safe callable that merges concurrent calls into one plan call
        (dynamic batching; docs/deploy.md): calls whose signatures differ only in the
        batch dimension are merged up to the largest batch size the plan serves (the
        largest raced size; under the throughput objective, the batch size it chose), or
        ``max_batch_size``; a plan that serves only its raced shapes is called at a raced
        size, padded with copies of real rows. A lone call waits at most
        ``max_delay_ms``. ``await batched.acall(...)`` serves asyncio servers. Up to
        ``max_concurrent_batches`` merged calls run at once (default 1; more only for a
        plan several threads may call at once). Every promise of the decision holds per
        caller; ``close()`` (or closing the decision) stops it."""
        serving = self.report.serving
        if serving is None or not serving.raced_batch_sizes:
            raise ServingError(
                f"the report of {self.selected_plan!r} records no raced batch sizes (it was "
                "written before dlopt recorded them, or no case has one batch size along "
                "its batch dimension): select again to serve it batched"
            )
        for name, count in (
            ("max_batch_size", max_batch_size),
            ("max_concurrent_batches", max_concurrent_batches),
        ):
            if count is not None and not (is_int(count) and count >= 1):
                raise ConfigurationError(f"{name} must be an integer >= 1 or None, got {count!r}")
        if not (is_number(max_delay_ms) and max_delay_ms >= 0):
            raise ConfigurationError(
                f"max_delay_ms must be a number of milliseconds >= 0, got {max_delay_ms!r}"
            )
        if max_batch_size is None and self.report.throughput is not None:
            max_batch_size = self.report.batch_size
        batcher = BatchedDecision(
            self._served,
            batch_dim=serving.batch_dim,
            raced_sizes=serving.raced_batch_sizes,
            max_batch_size=max_batch_size,
            max_delay_ms=float(max_delay_ms),
            max_concurrent_batches=max_concurrent_batches,
        )
        self._batchers.append(batcher)
        return batcher

    def health(self) -> HealthRecord:
        """What happened to this decision's calls so far: calls by route, the plan's
        failures and whether it is disabled, shadow checks and mismatches, the served
        latency against the race's (docs/serving.md, "In production")."""
        return self._served.health()

    @property
    def guard(self) -> GuardPolicy:
        """The production guard this decision serves under."""
        return self._served.policy

    def drain_shadow_checks(self, timeout: float = 30.0) -> bool:
        """Wait until every queued shadow check has been judged (``False`` when
        ``timeout`` seconds were not enough): before reading :meth:`health` in a test,
        or before shutting down."""
        return self._served.drain_shadow_checks(timeout)

    def save_report(self, path: str | os.PathLike[str]) -> Path:
        """Write the strict-JSON report (atomically)."""
        return self.report.save(path)

    def save_bundle(
        self, directory: str | os.PathLike[str], *, compiled_program: bool = False
    ) -> Path:
        """Write ``report.json``, the selected plan's artifacts, and ``manifest.json``.

        The manifest names the selected plan, its provider (with the plan's options) and
        precision, and the SHA-256 of the report and of each artifact file, so a
        deployment can verify what it loads (:func:`dlopt.verify_bundle`) and, when the
        plan's provider can load saved plans, serve it again without the model or a
        rebuild (:func:`dlopt.load_bundle` returns a ready decision). The bundle is written
        whole or not at all: an earlier bundle in ``directory`` is replaced whole; a
        directory that is not a bundle (and not empty) is refused with
        :class:`dlopt.bundle.store.BundleError`.

        ``compiled_program=True`` also saves the plan as a program that serves without
        the model or a compile, where its provider can (an Inductor plan: an AOTInductor
        package, compiled now unless the plan cache saved one), for
        ``load_bundle(directory, load_compiled_program=True)``; a
        :class:`~dlopt.bundle.store.BundleError` says why when it cannot.
        """
        artifacts = dict(self.plan.artifacts)
        if compiled_program:
            saved = self._program(self.artifact_dir) if self._program is not None else None
            if saved is None or saved.directory is None:
                why = (
                    saved.note
                    if saved is not None
                    else f"the provider of {self.selected_plan!r} saves no compiled programs"
                )
                raise BundleError(
                    f"no compiled program for the bundle ({why}); save it without "
                    "compiled_program=True: load_bundle then rebuilds the plan from the model"
                )
            artifacts[PROGRAM_ARTIFACT] = saved.directory
        return write_bundle(directory, self.report, artifacts)

    @property
    def artifact_dir(self) -> Path | None:
        """The temporary artifact directory this decision owns (``None`` when the caller
        named one, or once closed)."""
        scratch = self._scratch
        return None if scratch is None or scratch.released else scratch.path

    def close(self) -> None:
        """Stop the batchers and the shadow checks, release the plan, end the processes it
        started and remove its temp directory (a
        :class:`~dlopt.platform.processes.LeftoverProcessWarning` names processes that
        could not be ended), then remove the temporary artifacts it may have read."""
        for batcher in self._batchers:
            batcher.close()
        try:
            self._served.close()
        finally:
            if self._containment is not None:
                self._containment.release()
            if self._scratch is not None:
                self._scratch.release()

    def __enter__(self) -> OptimizationDecision:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OptimizationDecision(selected_plan={self.selected_plan!r})"
