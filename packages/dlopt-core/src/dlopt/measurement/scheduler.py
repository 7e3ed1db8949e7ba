"""The scheduler: timing, quiet-wait, warm-up and settled bursts, one record per plan and case.

It runs calls and records what they cost; it decides nothing (that is
:mod:`dlopt.measurement.sequential`'s job, wired by :mod:`dlopt.measurement.race`).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence

from attrs import define, field

from dlopt.measurement.allocator import minor_faults
from dlopt.measurement.clock import Clock, CpuTimeSource
from dlopt.settings.measurement import MeasurementPolicy

#: How far above the reference (in settle tolerances) a call that stopped getting faster
#: still counts as settled.
_NEAR = 5


@define
class CaseRecord:
    """What one plan did on one workload case."""

    fn: Callable[[], object]
    #: Inspects the outputs of every call, after the timer stopped (raises to fail the plan).
    check: Callable[[Sequence[object]], None] | None = None
    block: int = 1  # back-to-back calls per timed sample
    burst_calls: int = 0  # timed samples per burst, set after warm-up
    reference_s: float = 0.0  # recent typical seconds per call: the settle target
    warmup_calls: int = 0
    warmup_converged: bool = False
    warmup_faults: int | None = None
    #: The fastest warm-up call after the first (infinite until there is one), and the
    #: slowest of the calls warm-up judged settled on: what the warm-up leave rule
    #: compares (seconds per call).
    warmup_fastest_s: float = math.inf
    warmup_settled_slowest_s: float = 0.0
    samples: list[float] = field(factory=list)  # seconds per call, every timed sample
    statistic: dict[int, float] = field(factory=dict)  # round -> burst statistic (s)
    burst_mean: dict[int, float] = field(factory=dict)  # round -> burst mean (s)
    timed_calls: int = 0
    untimed_calls: int = 0
    unsettled: int = 0
    page_faults: int | None = 0


@define
class PlanRecord:
    """A plan in the race: its calls per case and its bookkeeping."""

    name: str
    is_baseline: bool
    sync: Callable[[], None] | None
    cases: list[CaseRecord]
    failed: str | None = None
    quiet_wait_s: float = 0.0
    quiet_waits: int = 0
    quiet_capped: int = 0
    quiet_after_s: float = 0.0
    longest_call_s: float = 0.0


def burst_statistic(samples: Sequence[float], kind: str) -> float:
    """The per-round observation of a burst: ``min``, ``second_min``, ``median`` or ``mean``."""
    if kind == "min":
        return min(samples)
    if kind == "second_min":
        return sorted(samples)[1] if len(samples) > 1 else samples[0]
    if kind == "median":
        return statistics.median(samples)
    return math.fsum(samples) / len(samples)


class Scheduler:
    """Runs the calls of a race on one clock."""

    def __init__(
        self,
        policy: MeasurementPolicy,
        clock: Clock,
        cpu: CpuTimeSource | None,
        rng: random.Random,
        record_faults: bool,
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.cpu = cpu
        self.rng = rng
        self.record_faults = record_faults
        tick_s = clock.resolution_ns / 1e9
        # A block must span at least 1000 clock ticks (0.1% quantisation) and the floor.
        self.resolvable_s = max(policy.min_resolvable_time_s, 1000 * tick_s)
        self.last_plan: str | None = None
        self.plans_by_name: dict[str, PlanRecord] = {}

    # -- timing primitives -------------------------------------------------------------
    def timed_block(self, plan: PlanRecord, case: CaseRecord, k: int) -> float:
        """Seconds per call of ``k`` back-to-back calls, device work included.

        With a ``case.check``, every call's output is kept and handed to it once the timer
        has stopped: what it costs to inspect them is never timed."""
        fn, check = case.fn, case.check
        sync = plan.sync
        if sync is not None:
            sync()
        outputs: list[object] = []
        keep = outputs.append if check is not None else None
        t0 = self.clock.now_ns()
        if keep is None:
            for _ in range(k):
                fn()
        else:
            for _ in range(k):
                keep(fn())
        if sync is not None:
            sync()
        elapsed = (self.clock.now_ns() - t0) / 1e9
        plan.longest_call_s = max(plan.longest_call_s, elapsed)
        if check is not None:
            check(outputs)
        return elapsed / k

    def quiesce(self, plan: PlanRecord) -> None:
        """Wait until the process's threads are (nearly) idle, at most ``quiesce_max_s``.

        Sleeps in windows of ``quiesce_window_s``; quiet once the threads used less than
        ``quiesce_cpu_fraction`` of one core in a window. The wait is also booked to the
        plan that ran just before (how long it left the process busy).
        """
        src = self.cpu
        if src is None:
            return
        p = self.policy
        limit_ns = p.quiesce_max_s * 1e9
        # A clock that does not move while sleeping must not spin here forever.
        max_windows = math.ceil(p.quiesce_max_s / p.quiesce_window_s) + 1
        start = t0 = self.clock.now_ns()
        c0 = src.cpu_ns()
        capped = False
        for _ in range(max_windows):
            src.sleep(p.quiesce_window_s)
            c1, t1 = src.cpu_ns(), self.clock.now_ns()
            if c1 - c0 < p.quiesce_cpu_fraction * (t1 - t0) or (c1 == c0 and t1 == t0):
                break
            if t1 - start >= limit_ns:
                capped = True
                break
            c0, t0 = c1, t1
        else:
            capped = True
        waited = (self.clock.now_ns() - start) / 1e9
        plan.quiet_wait_s += waited
        plan.quiet_waits += 1
        plan.quiet_capped += capped
        before = self.plans_by_name.get(self.last_plan or "")
        if before is not None:
            before.quiet_after_s += waited

    # -- warm-up -----------------------------------------------------------------------
    def warmup(self, plan: PlanRecord, case: CaseRecord, cap_s: float) -> None:
        """Run until the latency stops trending down (windows of medians), capped.

        Warm-up also picks the block size (a call shorter than the timer resolves well is
        re-measured in blocks of ``k`` calls; the trend restarts at the new ``k``) and the
        burst size (more calls for short ones, so a burst lasts ``burst_time_target_s``).
        """
        p = self.policy
        self.quiesce(plan)
        self.last_plan = plan.name
        k = 1
        history: list[float] = []
        steps = 0
        start = self.clock.now_ns()
        f0 = minor_faults() if self.record_faults else None
        per_call = 0.0
        while True:
            per_call = self.timed_block(plan, case, k)
            case.warmup_calls += k
            if steps:
                # Not the first block: it may carry a one-off cost (a recompile when the
                # race's calling context differs from validation's), not the plan's speed.
                case.warmup_fastest_s = min(case.warmup_fastest_s, per_call)
            steps += 1
            if per_call * k < self.resolvable_s and k < p.max_block_size:
                # Too short to resolve: grow the block (x10 when the clock saw nothing).
                new_k = k * 10 if per_call <= 0 else math.ceil(self.resolvable_s / per_call)
                k = min(p.max_block_size, max(k + 1, new_k))
                history.clear()
            else:
                history.append(per_call)
            w = p.warmup_window
            if len(history) >= 2 * w:
                last = statistics.median(history[-w:])
                prev = statistics.median(history[-2 * w : -w])
                if last >= prev * (1.0 - p.warmup_tolerance):
                    case.warmup_converged = True
                    break
            spent = (self.clock.now_ns() - start) / 1e9
            if steps >= p.warmup_max_calls or spent >= min(p.warmup_max_time_s, cap_s):
                break
        if f0 is not None:
            f1 = minor_faults()
            case.warmup_faults = None if f1 is None else f1 - f0
        case.block = k
        tail = history[-p.warmup_window :] if history else [per_call]
        case.reference_s = statistics.median(tail)
        case.warmup_settled_slowest_s = max(history[-2 * p.warmup_window :] or [per_call])
        block_s = max(case.reference_s * k, 0.0)
        wanted = (
            math.ceil(p.burst_time_target_s / block_s) if block_s > 0 else p.max_calls_per_burst
        )
        case.burst_calls = max(p.timed_calls_per_burst, min(p.max_calls_per_burst, wanted))

    # -- bursts ------------------------------------------------------------------------
    def burst(self, plan: PlanRecord, case: CaseRecord, round_number: int) -> None:
        """Settle ``plan`` on ``case`` with untimed calls, then time one burst.

        Settling ends once an untimed call runs within ``settle_tolerance`` of the plan's
        recent latency, or no faster than the call before it (every burst settles: a plan
        that just ran settles at once).
        """
        p = self.policy
        k = case.block
        self.quiesce(plan)
        self.last_plan = plan.name
        start = self.clock.now_ns()
        calls = 0
        tol = p.settle_tolerance
        need = max(p.settle_min_calls, 1) if tol is not None else p.settle_min_calls
        settled = tol is None
        previous = math.inf
        while calls < p.settle_max_calls:
            elapsed = (self.clock.now_ns() - start) / 1e9
            if calls >= need and elapsed >= p.settle_time_s:
                break
            per_call = self.timed_block(plan, case, k)
            calls += k
            if tol is None:
                continue
            # Settled once a call is back at the plan's recent latency, or once the
            # latency stopped falling near it (the machine's level moved a little since
            # the reference was taken; a leftover switch penalty only ever decays). A
            # lasting slowdown far above the reference, such as a neighbour's spinning
            # threads, keeps settling until the cap, and the burst is counted.
            back = per_call <= case.reference_s * (1.0 + tol)
            near = per_call <= case.reference_s * (1.0 + _NEAR * tol)
            flat = near and per_call >= previous * (1.0 - tol)
            if calls >= need and (back or flat):
                settled = True
                break
            previous = per_call
        case.untimed_calls += calls
        if not settled:
            case.unsettled += 1
        f0 = minor_faults() if self.record_faults else None
        samples = [self.timed_block(plan, case, k) for _ in range(case.burst_calls)]
        if f0 is not None:
            f1 = minor_faults()
            case.page_faults = (case.page_faults or 0) + (f1 or 0) - f0
        case.timed_calls += k * len(samples)
        case.samples.extend(samples)
        case.statistic[round_number] = burst_statistic(samples, p.burst_statistic)
        case.burst_mean[round_number] = math.fsum(samples) / len(samples)
        # The settle target is the median of recent samples, not this burst alone.
        recent = case.samples[-max(p.settle_reference_samples, case.burst_calls) :]
        case.reference_s = statistics.median(recent)

    def round_order(self, plans: Sequence[PlanRecord], n_cases: int) -> list[tuple[int, int]]:
        """``(plan index, case)`` turns of one round: cases in a shuffled order, and within
        each case the plans in a shuffled order, so the bursts one comparison pairs run
        close together in time (drift common to them cancels)."""
        cases = list(range(n_cases))
        self.rng.shuffle(cases)
        order: list[tuple[int, int]] = []
        for case in cases:
            idx = list(range(len(plans)))
            self.rng.shuffle(idx)
            order.extend((j, case) for j in idx)
        return order
