"""A saved report as tables of text: one source for the terminal, the HTML page and exports.

Every function here reads an :class:`~dlopt.evidence.report.OptimizationReport` and returns
:class:`Table` values (headers, cells as text, how each column may break). Fields a
report may lack (an older writer, a candidate that never ran) show as ``-``; fields this
module does not know are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen

from dlopt.measurement.stats import not_measured
from dlopt.vocabulary import Verdict

if TYPE_CHECKING:
    from dlopt.evidence.report import CandidateEvidence, OptimizationReport
    from dlopt.measurement.stats import RatioInterval

#: Minor page faults per call above which the table suggests allocator tuning.
PAGE_FAULT_HINT_THRESHOLD = 100

#: How a column may break when the terminal is narrow: never (names, numbers), at spaces
#: (reasons) or anywhere (install commands, paths); or kept to one line, cut short with
#: an ellipsis on a terminal (notes: the whole text is in ``--plain``, ``--candidate``
#: and the JSON).
NOWRAP, WRAP, FOLD, CLIP = "none", "wrap", "fold", "clip"


@frozen
class Table:
    """Headers, text cells and, per column, how it may break (:data:`NOWRAP`, :data:`WRAP`,
    :data:`FOLD`), whether it is numeric (right-aligned) and its priority (0 is always
    shown; on a narrow terminal the highest numbers give way first); per row an optional
    style (``"selected"``, ``"failed"``, ``"unavailable"``)."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    overflow: tuple[str, ...]
    numeric: tuple[bool, ...]
    row_styles: tuple[str | None, ...] = ()
    title: str | None = None
    priority: tuple[int, ...] = ()

    @classmethod
    def build(
        cls,
        columns: Sequence[tuple[str, str, bool] | tuple[str, str, bool, int]],
        rows: Iterable[Sequence[object]],
        *,
        row_styles: Sequence[str | None] = (),
        title: str | None = None,
    ) -> Table:
        """``columns`` as ``(header, overflow, numeric[, priority])``; ``None`` cells
        become ``-``."""
        text_rows = tuple(tuple(text(v) for v in row) for row in rows)
        return cls(
            headers=tuple(c[0] for c in columns),
            rows=text_rows,
            overflow=tuple(c[1] for c in columns),
            numeric=tuple(c[2] for c in columns),
            row_styles=tuple(row_styles),
            title=title,
            priority=tuple(c[3] if len(c) > 3 else 0 for c in columns),
        )


def text(value: object) -> str:
    """A cell: ``None`` as ``-``, everything else as ``str``."""
    return "-" if value is None else str(value)


def number(value: float | None, pattern: str = "{:.3f}") -> str:
    """``value`` formatted, or ``-`` when it is missing."""
    return "-" if value is None else pattern.format(value)


def quantized_share(metadata: dict[str, Any]) -> str | None:
    """``"quantized 1 of 8 ops"`` when a quantizing plan left part of the model in full
    precision (its label alone would overstate it); ``None`` otherwise."""
    fraction = metadata.get("quantized_fraction")
    if not isinstance(fraction, (int, float)) or fraction >= 1:
        return None
    for unit in ("ops", "layers"):
        done, of = metadata.get(f"quantized_{unit}"), metadata.get(f"quantizable_{unit}")
        if isinstance(done, int) and isinstance(of, int):
            return f"quantized {done} of {of} {unit}"
    return f"quantized {fraction:.0%}"


def speedup_text(cand: CandidateEvidence, baseline: str | None = None) -> str:
    """``"1.99 [1.93, 2.06]"`` (point and interval against eager), or what stands instead."""
    if getattr(cand, "role", None) == "reference" or cand.name == "eager_fp32":
        return "1 (reference)"
    speedup = cand.race.speedup_vs_reference
    if speedup is None or speedup.point is None:
        return "-"
    if cand.race.elimination_speedup is not None:
        # Its interval against eager decided nothing: the notes show the one that did.
        return f"{speedup.point:.2f} (eliminated)"
    return interval_text(speedup, unit="")


def gate_text(cand: CandidateEvidence) -> str:
    """The confidence gate against which plan: ``passed``, ``failed`` (its interval fell
    below the bar), ``unresolved`` (the race ended, or dropped it, with the interval
    still across the bar) or ``not passed``; ``-`` where no gate was judged."""
    passed = cand.race.gate_passed
    if passed is None:
        return "-"
    verdict = cand.race.verdict
    if passed:
        word = "passed"
    elif verdict == Verdict.NOT_FASTER:
        word = "failed"
    elif verdict in (Verdict.UNRESOLVED, Verdict.DROPPED):
        word = "unresolved"
    else:
        word = "not passed"
    against = cand.race.gate_against
    return f"{word} vs {against}" if against else word


def _worst(values: Iterable[float | None], *, high: bool = True) -> float | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return max(present) if high else min(present)


def _leaves(result: Any) -> list[Any]:
    return [leaf for case in getattr(result, "cases", ()) or () for leaf in case.leaves or ()]


def parity_text(cand: CandidateEvidence, *, detail: bool = False) -> str:
    """The quality gate: ``ok``, ``failed`` or ``-``; with ``detail`` the worst relative
    L2 error over cases and outputs (``ok (rel L2 3.1e-04)``)."""
    parity = cand.validation.first_calls
    if parity is None:
        return "-"
    word = "ok" if parity.passed else "failed"
    rel = _worst(leaf.rel_l2 for leaf in _leaves(parity)) if detail else None
    return f"{word} (rel L2 {rel:.1e})" if rel is not None else word


def notes_text(cand: CandidateEvidence) -> str:
    """Why a candidate stands where it does: its error, why it is unavailable, its verdict."""
    note = ""
    error = getattr(cand, "error", None)
    verdict = cand.race.verdict
    if cand.status == "not_applicable" and error is not None:
        note = f"not applicable: {error.message}"
    elif error is not None:
        note = f"{error.stage}: {error.message}"
    elif cand.status == "unavailable":
        note = getattr(cand, "availability_reason", None) or ""
    elif getattr(cand, "not_built", None):
        note = f"not built: {cand.not_built}"
    elif getattr(cand, "not_raced", None):
        note = f"not raced: {cand.not_raced}"
    elif verdict:
        note = str(verdict) + (" (noisy)" if cand.race.noisy else "")
        if cand.race.eliminated_by:
            # A plan that passed its gate and was then eliminated keeps "faster".
            eliminated = dropped_text(cand)
            note = eliminated if verdict == "dropped" else f"{note}; {eliminated}"
        faults = max(
            (
                cs.latency.page_faults_per_call or 0
                for cs in getattr(cand, "cases", ()) or ()
                if cs.latency is not None
            ),
            default=0,
        )
        if faults >= PAGE_FAULT_HINT_THRESHOLD:
            # glibc handing large buffers back to the OS every call: a real, fixable cost.
            note += (
                f"; {faults:.0f} page faults/call "
                "(allocator churn: see MALLOC_MMAP_THRESHOLD_ or jemalloc)"
            )
    coverage = quantized_share(getattr(cand, "metadata", None) or {})
    if coverage and cand.status != "unavailable":
        note = f"{coverage}; {note}" if note else coverage
    return note


def interval_text(speedup: RatioInterval | None, unit: str = "x") -> str:
    """``"0.81x [0.74, 0.89]"``, ``-`` without a point, ``"0.81x [not measured (1 round)]"``
    when the interval is too thin to print (:func:`~dlopt.measurement.stats.not_measured`)."""
    if speedup is None or speedup.point is None:
        return "-"
    thin = not_measured(speedup)
    if thin is not None:
        return f"{speedup.point:.2f}{unit} [{thin}]"
    low, high = number(speedup.low, "{:.2f}"), number(speedup.high, "{:.2f}")
    return f"{speedup.point:.2f}{unit} [{low}, {high}]"


def dropped_text(cand: CandidateEvidence) -> str:
    """An eliminated plan, with the comparison that eliminated it (not its few-round
    interval against eager, which decided nothing)."""
    by = cand.race.eliminated_by
    speedup = cand.race.elimination_speedup
    if by and speedup is not None and speedup.point is not None:
        return f"eliminated: {interval_text(speedup)} of {by}'s speed"
    note = cand.race.note
    return note or "dropped"


def status_text(cand: CandidateEvidence) -> str:
    """The status column: the report's status, except ``not_raced`` for a plan built and
    validated that the race had no room for (the report keeps ``lost`` there, with
    ``not_raced`` saying why): it lost nothing."""
    if cand.status == "lost" and getattr(cand, "not_raced", None):
        return "not_raced"
    return str(cand.status)


def row_style(cand: CandidateEvidence, report: OptimizationReport) -> str | None:
    """The row's emphasis in a rendered table."""
    if cand.name == report.selected_plan:
        return "selected"
    if cand.status in ("unavailable", "not_applicable", "not_built"):
        return "unavailable"
    if cand.status == "rejected" or getattr(cand, "error", None) is not None:
        return "failed"
    return None


CANDIDATE_COLUMNS = (
    ("plan", NOWRAP, False, 0),
    ("status", NOWRAP, False, 0),
    ("prec", NOWRAP, False, 1),
    ("median ms", NOWRAP, True, 0),
    ("p99 ms", NOWRAP, True, 2),
    ("vs eager [CI]", NOWRAP, False, 0),
    ("gate", NOWRAP, False, 1),
    ("parity", NOWRAP, False, 1),
    ("setup s", NOWRAP, True, 3),
    ("1st call s", NOWRAP, True, 3),
    ("peak MB", NOWRAP, True, 3),
    # One line a plan on a terminal: a "not built" reason runs to 300 characters.
    ("notes", CLIP, False, 0),
)


def candidates_table(report: OptimizationReport, *, include_unavailable: bool = True) -> Table:
    """One row per candidate: status, precision, latency, speedup with its interval, the
    confidence gate, parity, one-off costs, and why it stands where it does."""
    cands = [c for c in report.candidates if include_unavailable or c.status != "unavailable"]
    rows = [
        (
            c.name,
            status_text(c),
            c.precision,
            number(c.latency.median_ms),
            number(c.latency.p99_ms),
            speedup_text(c),
            gate_text(c),
            parity_text(c),
            number(c.lifecycle.setup_time_s, "{:.2f}"),
            number(c.lifecycle.first_call_time_s, "{:.2f}"),
            number(c.memory.peak_mb, "{:.0f}"),
            notes_text(c),
        )
        for c in cands
    ]
    return Table.build(
        CANDIDATE_COLUMNS,
        rows,
        row_styles=[row_style(c, report) for c in cands],
    )


def unavailable_table(report: OptimizationReport) -> Table | None:
    """The plans that could not run here, each with its reason and install hint."""
    rows = [
        (c.name, c.distribution, c.availability_reason, c.install_hint)
        for c in report.candidates
        if c.status == "unavailable"
    ]
    failures = getattr(report, "plugin_failures", ()) or ()
    rows += [
        (f.plugin, f.distribution, f"plugin failed at {f.stage}: {f.error}", None) for f in failures
    ]
    if not rows:
        return None
    return Table.build(
        (
            ("plan", NOWRAP, False),
            ("distribution", NOWRAP, False),
            ("reason", WRAP, False),
            ("install", FOLD, False),
        ),
        rows,
        title="unavailable here",
    )


def unavailable_summary_table(report: OptimizationReport) -> Table | None:
    """:func:`unavailable_table` in one row per distribution, for a terminal: how many of
    its plans cannot run here and which, their distinct reasons and its first install
    hint (each cut to one line there; ``--plain`` and the JSON list every plan)."""
    full = unavailable_table(report)
    if full is None:
        return None
    groups: dict[str, list[tuple[str, ...]]] = {}
    for row in full.rows:
        groups.setdefault(row[1], []).append(row)
    rows = []
    for distribution, members in groups.items():
        plans = [m[0] for m in members]
        reasons = list(dict.fromkeys(m[2] for m in members if m[2] != "-"))
        hints = [m[3] for m in members if m[3] != "-"]
        count = f"{len(plans)} plan{'s' if len(plans) != 1 else ''}"
        rows.append(
            (
                distribution,
                f"{count}: {', '.join(plans)}",
                "; ".join(reasons) or "-",
                hints[0] if hints else "-",
            )
        )
    return Table.build(
        (
            ("distribution", NOWRAP, False),
            ("plans", CLIP, False),
            ("reason", CLIP, False),
            ("install", CLIP, False, 1),
        ),
        rows,
        title=f"unavailable here ({len(full.rows)} plans, one line per distribution)",
    )


def measurement_line(report: OptimizationReport) -> str | None:
    """The race in one line: rounds, calls, time, why it stopped, seed, confidence."""
    m = getattr(report, "measurement", None)
    if m is None:
        return None
    budget = getattr(m, "budget_s", None)
    of_budget = f" of a {budget:.1f}s budget" if isinstance(budget, (int, float)) else ""
    return (
        f"measurement: {m.rounds} rounds, {m.timed_calls} timed calls, "
        f"{m.total_time_s:.1f}s{of_budget}, stop: {m.stop_reason}, seed {m.seed}, "
        f"confidence {m.confidence:g}"
    )


def race_notes(report: OptimizationReport) -> list[str]:
    """What the race left open and what to know about it, where the report records it:
    the leader and how much faster another plan may still be, each comparison the budget
    ended with the budget that would decide it, and allocator advice."""
    m = getattr(report, "measurement", None)
    if m is None:
        return []
    notes = []
    busy = busy_reason(report)
    leader, regret = getattr(m, "leader", None), getattr(m, "regret_bound", None)
    zone = getattr(getattr(m, "policy", None), "indifference_zone", None)
    if leader and isinstance(regret, (int, float)):
        if isinstance(zone, (int, float)) and regret <= zone:
            notes.append(
                f"leader: {leader}, identified: no surviving plan can be faster than it by "
                f"more than the {zone:g}x indifference zone"
            )
        else:
            notes.append(f"leader: {leader}; another plan may still be up to {regret:.3g}x faster")
    for open_ in getattr(m, "open_comparisons", ()) or ():
        what = "the gate" if open_.kind == "gate" else "within reach of"
        if open_.rounds_needed is not None:
            rerun = _rerun_budget(report, open_.budget_s_needed)
            needs = f"about {open_.rounds_needed} rounds would decide it" + (
                f": rerun with --time-budget {rerun:.0f}" if rerun is not None else ""
            )
            if busy:
                needs += f", or on a quieter machine (this one was busy: {busy})"
        elif busy:
            # Beside other work the spread is the other work's: a quieter machine, not a
            # longer race, is what decides it.
            needs = f"the machine was busy ({busy}): rerun on a quieter machine"
        else:
            needs = "no budget would decide it (the estimate sits on the bar)"
        notes.append(
            f"open: {open_.candidate} vs {open_.against} ({what}) after {open_.rounds} "
            f"rounds; {needs}"
        )
    allocator = getattr(m, "allocator", None)
    advice = getattr(allocator, "advice", None)
    if advice:
        notes.append(f"allocator: {advice}")
    return notes


def _rerun_budget(report: OptimizationReport, race_s_needed: float | None) -> float | None:
    """The time budget a selection would need for its race to reach ``race_s_needed``
    seconds: what this one spent, plus the race's missing seconds (``None``: not priced)."""
    timing = getattr(report, "decision_time", None)
    m = getattr(report, "measurement", None)
    spent = getattr(timing, "spent_s", None)
    raced = getattr(m, "total_time_s", None)
    if not all(isinstance(v, (int, float)) for v in (race_s_needed, spent, raced)):
        return None
    return float(spent) + max(float(race_s_needed) - float(raced), 0.0)  # type: ignore[arg-type]


def headline(report: OptimizationReport) -> str:
    """What was decided on what: workload, objective, target."""
    return (
        f"workload: {report.workload.name}; objective: {report.objective}; "
        f"target: {report.target.device}"
    )


def decision_lines(report: OptimizationReport) -> tuple[str, str]:
    """``selected: ...`` (with the batch size under the throughput objective) and
    ``reason: ...``."""
    batch = (
        f" at batch {report.batch_size}"
        if getattr(report, "throughput", None) is not None and report.batch_size
        else ""
    )
    return (
        f"selected: {report.selected_plan}{batch} (baseline {report.baseline})",
        f"reason: {report.selection_reason}",
    )


def decision_time_line(report: OptimizationReport) -> str | None:
    """``decision time: ...``: the time spent against the budget and the plans not built
    (``None`` for a report written before it was recorded)."""
    timing = getattr(report, "decision_time", None)
    if timing is None:
        return None
    if timing.exhaustive:
        budget = "(exhaustive: every plan built, no budget)"
    elif timing.budget_s is None:
        budget = "(no budget)"
    else:
        rule = " (auto)" if timing.budget_rule == "auto" else ""
        budget = f"of a {timing.budget_s:.0f} s budget{rule}"
    skipped = len(timing.not_built)
    plans = f"; {skipped} plan{'s' if skipped != 1 else ''} not built" if skipped else ""
    return (
        f"decision time: {timing.spent_s:.1f} s {budget}{plans}; priors for "
        f"{timing.machine_class}, {timing.mix_kind} models"
    )


def busy_reason(report: OptimizationReport) -> str | None:
    """Why the machine was busy around the selection, in words (``None``: it was not, or
    the report does not say)."""
    timing = getattr(report, "decision_time", None)
    load = getattr(timing, "machine_load", None)
    if load is None or not load.busy:
        return None
    return load.why or "busy"


def machine_line(report: OptimizationReport) -> str | None:
    """``machine: busy ...``, when the machine was busy around the selection (``None``
    otherwise): its timings measured the other work too."""
    busy = busy_reason(report)
    if busy is None:
        return None
    return (
        f"machine: busy ({busy}): the race measured the other work too, so its spread is "
        "wide and its ratios over eager may be inflated; rerun on a quieter machine to "
        "trust a close call"
    )


def serving_line(report: OptimizationReport) -> str | None:
    """``serving: ...``: how the decision serves its plan (``None`` for a report written
    before it was recorded)."""
    serving = report.serving
    if serving is None:
        return None
    context = (
        "in the caller's grad mode"
        if serving.any_grad_mode
        else f"entering {serving.grad_mode} around each call"
    )
    threads = {
        "concurrent": "threads call it at once",
        "serialized": "one thread at a time",
        "per_thread": "a runner per thread",
    }[str(serving.concurrency)]
    return f"serving: judged under {serving.grad_mode}; {context}; {threads}; {serving.unseen}"


def guard_line(report: OptimizationReport) -> str | None:
    """``in production: ...``: what the production guard does (``None`` for a report
    written before it was recorded)."""
    serving = report.serving
    if serving is None or not serving.guard:
        return None
    return f"in production: {serving.guard}"


#: The widest bar of the throughput curves, in characters.
CURVE_WIDTH = 24


def _curve_bar(value: float | None, top: float) -> str:
    if value is None or top <= 0:
        return ""
    return "#" * max(1, round(CURVE_WIDTH * value / top))


def throughput_table(report: OptimizationReport) -> Table | None:
    """The throughput curves (throughput objective only): per plan and batch size, the
    latency per call and the upper bound the budget is checked with, items per second
    with its interval, a bar scaled to the best, and the budget's verdict."""
    evidence = getattr(report, "throughput", None)
    if evidence is None or not evidence.points:
        return None
    top = max((p.items_per_s or 0.0 for p in evidence.points), default=0.0)
    rows, styles = [], []
    for p in evidence.points:
        if evidence.budget is None:
            verdict = "-"
        elif p.admissible:
            verdict = "within budget"
        else:
            verdict = f"over by {p.over_budget:.0%}" if p.over_budget is not None else "no bound"
        checked = p.p99_high_ms if evidence.budget and "p99" in evidence.budget else None
        rows.append(
            (
                p.plan,
                p.batch_size,
                number(p.latency_ms),
                number(checked if checked is not None else p.latency_high_ms),
                number(p.items_per_s, "{:,.1f}"),
                f"[{number(p.items_per_s_low, '{:,.1f}')}, "
                f"{number(p.items_per_s_high, '{:,.1f}')}]",
                _curve_bar(p.items_per_s, top),
                verdict,
            )
        )
        chosen = (p.plan, p.batch_size) == (report.selected_plan, report.batch_size)
        styles.append("selected" if chosen else (None if p.admissible else "unavailable"))
    budget = f", budget {evidence.budget}" if evidence.budget else ""
    return Table.build(
        (
            ("plan", NOWRAP, False, 0),
            ("batch", NOWRAP, True, 0),
            ("ms/call", NOWRAP, True, 1),
            ("bound ms", NOWRAP, True, 1),
            ("items/s", NOWRAP, True, 0),
            ("items/s CI", NOWRAP, False, 2),
            ("curve", NOWRAP, False, 2),
            ("budget", WRAP, False, 0),
        ),
        rows,
        row_styles=styles,
        title=f"throughput per batch size{budget}",
    )


def throughput_notes(report: OptimizationReport) -> list[str]:
    """What the throughput objective's evidence says besides the curves: the closest
    miss when nothing met the budget, batch sizes dropped for memory, and how each plan
    serves several batch sizes."""
    evidence = getattr(report, "throughput", None)
    if evidence is None:
        return []
    notes = []
    if not evidence.budget_met and evidence.closest_miss:
        notes.append(f"no (plan, batch size) met the budget; closest: {evidence.closest_miss}")
    if evidence.memory_note:
        notes.append(evidence.memory_note)
    notes += [f"shapes: {plan}: {how}" for plan, how in evidence.shapes.items()]
    return notes


def inputs_kind(report: OptimizationReport) -> str | None:
    """Which inputs were raced (``random``, ``factory``, ``npz:FILE``...), when recorded."""
    kind = getattr(getattr(report, "workload", None), "inputs", None)
    return kind if isinstance(kind, str) else None


def providers_table(statuses: Iterable[Any]) -> Table:
    """``dlopt providers``: every plan, where it comes from, whether it runs here and why
    not, and how to get it (``ProbeRecord`` records)."""
    rows, styles = [], []
    for s in statuses:
        available = bool(s.availability.available)
        rows.append(
            (
                s.name,
                s.distribution,
                s.version,
                s.precision,
                "available" if available else "unavailable",
                s.availability.reason or "",
                s.availability.install_hint or "",
            )
        )
        styles.append(None if available else "unavailable")
    return Table.build(
        (
            ("provider", NOWRAP, False),
            ("distribution", NOWRAP, False),
            ("version", NOWRAP, False),
            ("precision", NOWRAP, False),
            ("status", NOWRAP, False),
            ("reason", WRAP, False),
            ("install", FOLD, False),
        ),
        rows,
        row_styles=styles,
    )


def plugin_failures_table(failures: Iterable[Any]) -> Table:
    """Plugins that failed to load: which, from where, at which stage, with what error."""
    return Table.build(
        (
            ("plugin", NOWRAP, False),
            ("distribution", NOWRAP, False),
            ("version", NOWRAP, False),
            ("stage", NOWRAP, False),
            ("error", WRAP, False),
        ),
        [(f.plugin, f.distribution, f.version, f.stage, f.error) for f in failures],
        row_styles=["failed" for _ in failures] if isinstance(failures, Sequence) else (),
        title="plugins that failed to load",
    )


def options_table(options: Iterable[Any]) -> Table:
    """A plan's options (``describe_options`` records): name, type, default, help."""
    return Table.build(
        (
            ("option", NOWRAP, False),
            ("type", WRAP, False),
            ("default", FOLD, False),
            ("help", WRAP, False),
        ),
        [(o.name, o.type, repr(o.default), o.help) for o in options],
        title="options",
    )


def _latency_rows(cand: CandidateEvidence) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for case in getattr(cand, "cases", ()) or ():
        lat = case.latency
        if lat is None:
            rows.append((case.name, case.weight, number(case.first_call_time_s, "{:.4f}")))
            continue
        interval = f"[{number(lat.mean_low_ms)}, {number(lat.mean_high_ms)}]"
        rows.append(
            (
                case.name,
                f"{case.weight:g}",
                number(case.first_call_time_s, "{:.4f}"),
                number(lat.median_ms),
                number(lat.mean_ms),
                interval,
                number(lat.p90_ms),
                number(lat.p99_ms),
                number(lat.min_ms),
                number(lat.stdev_ms, "{:.4f}"),
                f"{lat.samples} x{lat.block_size}" if lat.block_size > 1 else str(lat.samples),
                lat.rounds,
                "yes" if lat.noisy else "no",
            )
        )
    return rows


def latency_table(cand: CandidateEvidence) -> Table:
    """Per workload case: first call and the steady-state latency statistics."""
    columns = (
        ("case", NOWRAP, False),
        ("weight", NOWRAP, True),
        ("1st call s", NOWRAP, True),
        ("median ms", NOWRAP, True),
        ("mean ms", NOWRAP, True),
        ("mean CI ms", WRAP, False),
        ("p90 ms", NOWRAP, True),
        ("p99 ms", NOWRAP, True),
        ("min ms", NOWRAP, True),
        ("stdev ms", NOWRAP, True),
        ("samples", NOWRAP, True),
        ("rounds", NOWRAP, True),
        ("noisy", NOWRAP, False),
    )
    rows = [row + ("",) * (len(columns) - len(row)) for row in _latency_rows(cand)]
    return Table.build(columns, rows, title=f"{cand.name}: latency per case")


def validation_table(cand: CandidateEvidence, which: str = "parity") -> Table | None:
    """Per case and output leaf: the validation metrics against the fp32 reference.

    ``which`` is the report's name of the evidence: ``parity`` (the first calls, before
    the race), ``revalidation`` (its last measured outputs) or ``final_check``.
    """
    result = getattr(cand.validation, VALIDATION_FIELDS.get(which, which), None)
    if result is None:
        return None
    rows: list[tuple[object, ...]] = []
    styles: list[str | None] = []
    for case in result.cases or ():
        if not case.leaves:
            rows.append((case.case, "-", "-", "-", "-", "-", "-", "-", case.reason or case.error))
            styles.append(None if case.passed else "failed")
        for leaf in case.leaves:
            problems = "; ".join([*leaf.failures, *leaf.notes])
            rows.append(
                (
                    case.case,
                    leaf.path,
                    f"{leaf.candidate_dtype}{list(leaf.shape)}",
                    number(leaf.max_abs_error, "{:.3g}"),
                    number(leaf.rel_l2, "{:.3g}"),
                    number(leaf.cosine, "{:.6f}"),
                    number(
                        leaf.outside_fraction
                        if leaf.outside_fraction is not None
                        else leaf.mismatch_fraction,
                        "{:.3g}",
                    ),
                    "ok" if leaf.passed else "failed",
                    problems or (leaf.limits_label or ""),
                )
            )
            styles.append(None if leaf.passed else "failed")
    return Table.build(
        (
            ("case", NOWRAP, False),
            ("output", WRAP, False),
            ("dtype/shape", FOLD, False),
            ("max abs err", NOWRAP, True),
            ("rel L2", NOWRAP, True),
            ("cosine", NOWRAP, True),
            ("outside", NOWRAP, True),
            ("result", NOWRAP, False),
            ("limits / notes", WRAP, False),
        ),
        rows,
        row_styles=styles,
        title=f"{cand.name}: {which.replace('_', ' ')}",
    )


#: The validation evidence of a plan, in the order it was taken, by its report names.
VALIDATION_STAGES = ("parity", "revalidation", "final_check")
#: Report name -> the ``ValidationEvidence`` field that holds it.
VALIDATION_FIELDS = {"parity": "first_calls"}


def evidence_tables(cand: CandidateEvidence) -> list[Table]:
    """One plan's evidence per case, as every view of a report shows it: its latency
    statistics (when it was measured), then each validation it went through
    (:data:`VALIDATION_STAGES`)."""
    tables: list[Table] = []
    if any(case.latency is not None for case in cand.cases or ()):
        tables.append(latency_table(cand))
    for which in VALIDATION_STAGES:
        table = validation_table(cand, which)
        if table is not None:
            tables.append(table)
    return tables


def candidate_summary(cand: CandidateEvidence) -> list[tuple[str, str]]:
    """One plan's headline facts as ``(field, value)`` pairs."""
    pairs = [
        ("plan", cand.name),
        ("status", status_text(cand)),
        ("role", str(getattr(cand, "role", "-"))),
        ("precision", cand.precision),
        ("provider", " ".join(text(v) for v in (cand.distribution, cand.version) if v) or "-"),
        ("options", text(cand.options) if cand.options else "-"),
        ("speedup vs eager [CI]", speedup_text(cand)),
        ("confidence gate", gate_text(cand)),
        ("parity", parity_text(cand, detail=True)),
        ("verdict", text(cand.race.verdict)),
        (
            "setup s / 1st call s",
            f"{number(cand.lifecycle.setup_time_s)} / {number(cand.lifecycle.first_call_time_s)}",
        ),
        ("peak memory MB", number(cand.memory.peak_mb, "{:.1f}")),
    ]
    error = getattr(cand, "error", None)
    if error is not None:
        pairs.append(("error", f"{error.stage}: {error.message}"))
    if cand.status == "unavailable":
        pairs.append(("unavailable", text(cand.availability_reason)))
        pairs.append(("install", text(cand.install_hint)))
    note = notes_text(cand)
    if note and error is None:
        pairs.append(("notes", note))
    return pairs


__all__ = [
    "CLIP",
    "FOLD",
    "NOWRAP",
    "PAGE_FAULT_HINT_THRESHOLD",
    "VALIDATION_STAGES",
    "WRAP",
    "Table",
    "candidate_summary",
    "candidates_table",
    "decision_lines",
    "evidence_tables",
    "gate_text",
    "headline",
    "inputs_kind",
    "latency_table",
    "measurement_line",
    "notes_text",
    "number",
    "options_table",
    "plugin_failures_table",
    "providers_table",
    "parity_text",
    "quantized_share",
    "race_notes",
    "speedup_text",
    "status_text",
    "text",
    "throughput_notes",
    "throughput_table",
    "unavailable_summary_table",
    "unavailable_table",
    "validation_table",
]
