"""How busy the machine was around one selection, and what that means for its numbers.

A race beside other work measures that work too: on 2 cores another CPU-bound process
made eager fp32 up to 10x slower while ONNX Runtime (spinning off) was barely touched, so
every ratio over eager is inflated and its spread wide. The report records the load
average before and after, the CPUs, how many CPUs' worth of work other processes did
while the selection ran (the machine's busy time less the selection's own), and how far
the reference's calls drifted between the profiling before the builds and the race;
:func:`machine_load` calls the machine busy when the other processes' work passes its
threshold. The load average and the drift are recorded, not judged: the load average
counts the selecting process's own recent work (a test suite, a model just loaded), and
the drift moves on a quiet machine too (an LSTM tagger's eager calls ran 1.7-2.0x slower
in its race than when profiled, with nothing else running; the demo conv net's 0.36x
beside two busy processes). The summary says so, an open comparison's advice names
the load, and the user's own evidence leaves a busy race out (docs/selection.md, "A busy
machine").
"""

from __future__ import annotations

from dlopt.evidence.report import MachineLoadEvidence
from dlopt.measurement.results import RaceResult
from dlopt.platform.machine import (
    CpuSample,
    cpu_sample,
    load_average,
    others_cpus,
    usable_cpus,
)

#: Busy when other processes did at least this many CPUs' worth of work while the
#: selection ran: on a 2-core machine, one CPU-bound process beside it reads about 1,
#: an idle machine under 0.1.
BUSY_OTHERS_CPUS = 0.5
#: A selection shorter than this (seconds) is too short for the CPU counters (10 ms
#: ticks) to say what other processes did.
MIN_SAMPLED_S = 1.0


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
    load_before: float | None, start: CpuSample, call_s: float, race: RaceResult | None
) -> MachineLoadEvidence:
    """The machine's load around a selection that started at ``load_before`` (1-minute
    load average) and ``start`` (:func:`dlopt.platform.machine.cpu_sample`), whose
    reference took ``call_s`` a call before the builds and raced in ``race``; read now,
    at its end."""
    cpus = usable_cpus()
    end = cpu_sample()
    others = others_cpus(start, end) if end.at_s - start.at_s >= MIN_SAMPLED_S else None
    busy = others is not None and others >= BUSY_OTHERS_CPUS
    plural = "s" if cpus != 1 else ""
    return MachineLoadEvidence(
        cpus=cpus,
        load_before=load_before,
        load_after=load_average(),
        others_cpus=others,
        reference_drift=reference_drift(race, call_s),
        busy=busy,
        why=f"other processes used {others:.1f} of {cpus} CPU{plural}" if busy else "",
    )
