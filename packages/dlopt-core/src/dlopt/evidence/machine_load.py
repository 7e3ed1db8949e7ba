"""How busy the machine was around one selection, and what that means for its numbers.

A race beside other work measures that work too: on 2 cores another CPU-bound process
made eager fp32 up to 10x slower while ONNX Runtime (spinning off) was barely touched, so
every ratio over eager is inflated and its spread wide. The report records the load
average before and after, the CPUs, and how far the reference's calls drifted between
the profiling before the builds and the race; :func:`machine_load` calls the machine busy
when either passes its threshold. The summary says so, an open comparison's advice names
the load, and the user's own evidence leaves a busy race out (docs/selection.md, "A busy
machine").
"""

from __future__ import annotations

from dlopt.evidence.report import MachineLoadEvidence
from dlopt.measurement.results import RaceResult
from dlopt.platform.machine import load_average, usable_cpus

#: Busy when the 1-minute load average before the selection is at least this much per
#: CPU: that many threads were already running or waiting beside it. On the 2-core
#: machines dlopt is developed on an idle load is 0.3-0.9 and one CPU-bound process
#: beside the selection brings it to 1.5 within a minute.
BUSY_LOAD_PER_CPU = 0.75
#: Busy when the reference's mean call in the race is at least this many times its call
#: measured before the builds: something took the CPUs between the two.
BUSY_DRIFT = 1.5


def reference_drift(race: RaceResult | None, call_s: float) -> float | None:
    """The reference's traffic-weighted mean call time in ``race`` over ``call_s`` (its
    traffic-weighted seconds per call measured before the builds)."""
    if race is None or call_s <= 0:
        return None
    reference = next((c for c in race.candidates if c.name == race.baseline), None)
    if reference is None or reference.weighted_mean_ms is None:
        return None
    return reference.weighted_mean_ms / 1e3 / call_s


def machine_load(
    load_before: float | None, call_s: float, race: RaceResult | None
) -> MachineLoadEvidence:
    """The machine's load around a selection that started at ``load_before`` (1-minute
    load average), whose reference took ``call_s`` a call before the builds and raced in
    ``race``; read now, at its end."""
    cpus = usable_cpus()
    drift = reference_drift(race, call_s)
    reasons = []
    if load_before is not None and load_before >= BUSY_LOAD_PER_CPU * cpus:
        reasons.append(f"load {load_before:.1f} on {cpus} CPU{'s' if cpus != 1 else ''}")
    if drift is not None and drift >= BUSY_DRIFT:
        reasons.append(f"the reference ran {drift:.1f}x slower in the race than before it")
    return MachineLoadEvidence(
        cpus=cpus,
        load_before=load_before,
        load_after=load_average(),
        reference_drift=drift,
        busy=bool(reasons),
        why="; ".join(reasons),
    )
