"""Stage 1, the ground truth: the eager fp32 reference every plan must reproduce.

Before anything is built: the workload is cut to the batch sizes the reference has memory
for (a ``max_batch_size`` profile), the model's weights are fingerprinted (a plan that
changes them is caught and undone), and eager fp32 runs every case twice in the
workload's calling context (:func:`dlopt.validation.capture_reference` refuses a reference
that cannot serve as ground truth). A race, a cache hit's check and a winner brought back
into the host of an isolated selection all start here; only a race goes on to
:func:`profiled` (where a reference call spends its time, and how long it takes), which
its priors and time budget read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch
from torch.overrides import TorchFunctionMode

from dlopt.contract.priors import OperatorMix
from dlopt.errors import ConfigurationError
from dlopt.pipeline.state import SelectionContext
from dlopt.settings.workload import WorkloadProfile
from dlopt.validation import ModelGuard, ReferenceOutputs, capture_reference
from dlopt.validation.reference import MeasuredRounding, attach_fp32_rounding


@attrs.frozen(eq=False)
class GroundTruth:
    """The workload as raced (cut for memory), the guard on the model's weights, the
    reference outputs, and, once :func:`profiled`, where one reference call spends its
    time and how long each case's call takes."""

    workload: WorkloadProfile
    guard: ModelGuard
    reference: ReferenceOutputs
    mix: OperatorMix = attrs.field(factory=OperatorMix)
    #: The reference's seconds per call of each case (one warm call each), in case order.
    case_call_s: tuple[float, ...] = ()

    @property
    def call_s(self) -> float:
        """The reference's traffic-weighted seconds per call (what the automatic time
        budget scales by)."""
        weights = [case.weight for case in self.reference.cases]
        total = sum(weights) or 1.0
        return sum(s * w for s, w in zip(self.case_call_s, weights)) / total

    @property
    def round_call_s(self) -> float:
        """Seconds of one reference call of every case: what each call per case of a race
        or a screening costs the reference, whatever the traffic weights."""
        return sum(self.case_call_s)


def capture(
    model: torch.nn.Module, workload: WorkloadProfile, context: SelectionContext
) -> GroundTruth:
    """The ground truth of one selection (see the module docstring), not yet profiled and
    without the reference's fp32 rounding: :func:`with_fp32_rounding` attaches it once the
    plan cache was looked up (a record keeps the rounding measured on its inputs)."""
    quality = context.policy.quality
    guard = ModelGuard(model, snapshot=quality.snapshot_weights)
    workload = fit_to_memory(model, workload, context.target.input_device)
    reference = capture_reference(
        model, workload, quality, target=context.target, guard=guard, fp32_rounding=False
    )
    return GroundTruth(workload, guard, reference)


def with_fp32_rounding(
    truth: GroundTruth,
    model: torch.nn.Module,
    context: SelectionContext,
    known: MeasuredRounding | None,
) -> None:
    """Attach the reference's fp32 rounding to ``truth`` left without it by
    :func:`capture`: ``known`` (measured before on these inputs), else measured now (when
    the quality policy asks for it)."""
    if context.policy.quality.fp32_rounding_factor > 0:
        attach_fp32_rounding(model, truth.reference, known)


def profiled(truth: GroundTruth, model: torch.nn.Module, context: SelectionContext) -> GroundTruth:
    """``truth`` with its operator mix (and the operators one call makes) and its
    per-case call times: one more reference call per case for the times, one to a few for
    the mix (:func:`operator_mix`), and one of the first case for the count, taken only when plans are to be built (a cache hit and a winner
    brought back into the host of an isolated selection need none of them)."""
    mix = operator_mix(model, truth.reference, lambda: context.clock.now_ns() / 1e9)
    if truth.reference.cases:
        first = truth.reference.cases[0]
        with truth.reference.calling_context():
            calls = count_operator_calls(model, first.args, first.kwargs)
        mix = attrs.evolve(mix, operator_calls=calls)
    return attrs.evolve(
        truth, mix=mix, case_call_s=reference_case_s(model, truth.reference, context)
    )


#: Module classes by the kind of work they do; a module counts to the first kind whose
#: words its class name contains (an attention block's own linear layers count to it).
_MODULE_KINDS = (
    ("attention", ("attention", "transformerencoderlayer", "transformerdecoderlayer")),
    ("recurrent", ("lstm", "gru", "rnn")),
    ("conv", ("conv",)),
    ("linear", ("linear", "bilinear")),
)


def _kind_of(module: torch.nn.Module) -> str | None:
    name = type(module).__name__.lower()
    for kind, words in _MODULE_KINDS:
        if any(word in name for word in words):
            return kind
    return None


#: How long the operator mix keeps timing passes over the cases (each pass one reference
#: call per case) and the most passes it takes: the mix keys a prior, and one pass of a
#: short call that the scheduler interrupts outside its layers reads as another kind, so
#: a short call is timed a few times and the least disturbed pass (the fastest) counts.
MIX_TIMING_S = 0.05
MIX_MAX_PASSES = 5


def operator_mix(
    model: torch.nn.Module,
    reference: ReferenceOutputs,
    decision_s: Callable[[], float] | None = None,
) -> OperatorMix:
    """Where one reference call per case spends its time, by kind of layer (time inside
    convolution, linear, attention and recurrent modules, the outermost one counting; the
    rest is ``other``): what a plan's prior is read for. Timed with forward hooks, so
    nothing but the model runs; passes over the cases are repeated while they took under
    :data:`MIX_TIMING_S` of the decision's time (``decision_s``, seconds on its clock;
    ``None``: the wall clock), at most :data:`MIX_MAX_PASSES`, and the fastest pass's
    shares are kept. A model whose call fails here leaves the mix unknown (all ``other``)."""
    import time

    elapsed = decision_s or time.perf_counter

    spent = {"conv": 0.0, "linear": 0.0, "attention": 0.0, "recurrent": 0.0}
    started: list[tuple[str, float]] = []  # the classified modules being called, outermost first
    handles = []

    def enter(kind: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            started.append((kind, time.perf_counter()))

        return hook

    def leave(*_: Any) -> None:
        kind, at = started.pop()
        if not started:  # an inner module's time is already its outer module's
            spent[kind] += time.perf_counter() - at

    classified = [(m, _kind_of(m)) for m in model.modules()]
    has_attention = any(kind == "attention" for _, kind in classified)
    fastest: tuple[float, dict[str, float]] | None = None
    try:
        for module, kind in classified:
            if kind is not None:
                handles.append(module.register_forward_pre_hook(enter(kind)))
                handles.append(module.register_forward_hook(leave))
        timing_began = elapsed()
        for _ in range(MIX_MAX_PASSES):
            spent.update(dict.fromkeys(spent, 0.0))
            begin = time.perf_counter()
            with reference.calling_context():
                for case in reference.cases:
                    model(*case.args, **case.kwargs)
            total = time.perf_counter() - begin
            if fastest is None or total < fastest[0]:
                fastest = (total, dict(spent))
            if elapsed() - timing_began >= MIX_TIMING_S:
                break
    except Exception:
        return OperatorMix(has_attention=has_attention)
    finally:
        for handle in handles:
            handle.remove()
    if fastest is None or fastest[0] <= 0:
        return OperatorMix(has_attention=has_attention)
    total, spent = fastest
    shares = {kind: min(value / total, 1.0) for kind, value in spent.items()}
    return OperatorMix(
        conv=shares["conv"],
        linear=shares["linear"],
        attention=shares["attention"],
        recurrent=shares["recurrent"],
        other=max(1.0 - sum(shares.values()), 0.0),
        has_attention=has_attention,
    )


class _OperatorCounter(TorchFunctionMode):
    """Counts the torch operators called while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def count_operator_calls(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> int:
    """How many torch operators (functions, tensor methods and attributes) one call of
    ``model`` makes, in the caller's grad mode: the size of the graph an exporter traces
    or a compiler lowers, which a plan's build and first calls grow with (a prior's cost
    is read for it). Counted at the Python level (a ``TorchFunctionMode``: a dispatcher
    mode would import much of torch's compiler stack on first use, about 1.5 s), in a call
    of its own, never a timed one, as counting costs a Python call per operator; 0 where
    the call fails."""
    counter = _OperatorCounter()
    try:
        with counter:
            model(*args, **kwargs)
    except Exception:
        return 0
    return counter.calls


def reference_case_s(
    model: torch.nn.Module, reference: ReferenceOutputs, context: SelectionContext
) -> tuple[float, ...]:
    """The reference's seconds per call of each case on the selection's clock, from one
    warm call per case (the automatic time budget and the race's expected length scale by
    them)."""
    clock, sync = context.clock, context.synchronize(None)
    seconds = []
    with reference.calling_context():
        for case in reference.cases:
            start = clock.now_ns()
            model(*case.args, **case.kwargs)
            if sync is not None:
                sync()
            seconds.append((clock.now_ns() - start) / 1e9)
    return tuple(seconds)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the model ran out of memory (host or device)."""
    oom_type = getattr(torch, "OutOfMemoryError", None)
    if isinstance(exc, MemoryError) or (oom_type is not None and isinstance(exc, oom_type)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def fit_to_memory(
    model: torch.nn.Module, workload: WorkloadProfile, device: str
) -> WorkloadProfile:
    """``workload`` without the batch sizes from the first the model runs out of memory on.

    Runs the model once per batch size, smallest first, in inference mode (``device``:
    where the model and inputs live, whose cache is emptied after a failure); other errors are left for the reference check to
    report. Batch 1 running out of memory is a ``ConfigurationError``: nothing can race.
    """
    if not workload.fit_to_memory or workload.batch_sizes is None:
        return workload
    for index, case in enumerate(workload.cases):
        try:
            with torch.inference_mode():
                model(*case.args, **case.kwargs)
        except Exception as exc:
            if not out_of_memory(exc):
                return workload
            size = workload.batch_size_of(index)
            note = (
                f"batch sizes from {size} on dropped: the reference ran out of memory at "
                f"batch {size} ({type(exc).__name__}: {str(exc).strip()[:200]})"
            )
            if index == 0:
                raise ConfigurationError(
                    f"the model runs out of memory at batch {size}, the smallest batch size: "
                    f"{note}; lower the sample's size or serve on a larger device"
                ) from None
            _release(device)
            return workload.first_cases(index, memory_note=note)
    return workload


def _release(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
