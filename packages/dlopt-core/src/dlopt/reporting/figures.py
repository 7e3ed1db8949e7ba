"""Figures of a report, drawn with matplotlib (the optional ``[plots]`` extra) as SVG text.

- latency per candidate and workload case: the raw samples as a box plot where the report
  has them, else the recorded statistics (min to p99, p90, median, mean);
- the paired speedup vs the baseline with its confidence interval, 1x and the
  ``min_speedup`` bar;
- for the lifecycle objective: projected total cost vs number of calls, with each plan's
  break-even point against the baseline;
- for the throughput objective: items per second vs batch size per plan, with intervals,
  the points over the latency budget and the served (plan, batch size).

matplotlib is imported when a figure is drawn, never at import of this module.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen

if TYPE_CHECKING:
    from dlopt.evidence.report import CandidateEvidence, OptimizationReport
    from dlopt.reporting.labels import LabelledReport

INSTALL_HINT = 'pip install "dlopt-core[plots]"'


def _horizontal() -> dict[str, Any]:
    """The boxplot argument that lays boxes on their side: ``orientation=`` since
    Matplotlib 3.10, where ``vert=`` is deprecated; ``vert=`` before it (3.8 and 3.9)."""
    import matplotlib

    if tuple(matplotlib.__version_info__[:2]) >= (3, 10):
        return {"orientation": "horizontal"}
    return {"vert": False}


class FiguresUnavailable(RuntimeError):
    """matplotlib is not installed: everything but the figures can still be written."""


@frozen
class Figure:
    """One drawn figure: a file-safe ``name``, a ``title`` and the SVG document text."""

    name: str
    title: str
    svg: str


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise FiguresUnavailable(
            f"figures need matplotlib, which is not installed: {INSTALL_HINT}"
        ) from None
    matplotlib.use("Agg", force=True)  # files only: never open a window
    import matplotlib.pyplot as plt

    return plt


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "run"


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    # A fixed hash salt and no date: the same report draws the same file.
    import matplotlib
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"svg.hashsalt": "dlopt"}):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def _measured(report: OptimizationReport) -> list[CandidateEvidence]:
    return [c for c in report.candidates if any(cs.latency is not None for cs in c.cases or ())]


def latency_figure(report: OptimizationReport, label: str = "") -> Figure | None:
    """Latency of every measured candidate, one panel per workload case."""
    plt = _pyplot()
    cands = _measured(report)
    if not cands:
        return None
    case_names: list[str] = []
    for c in cands:
        for cs in c.cases:
            if cs.latency is not None and cs.name not in case_names:
                case_names.append(cs.name)
    fig, axes = plt.subplots(
        len(case_names),
        1,
        figsize=(7.5, 0.45 * len(cands) * len(case_names) + 1.2 * len(case_names)),
        squeeze=False,
    )
    for ax, case_name in zip(axes[:, 0], case_names):
        rows = []
        for c in cands:
            found = next((cs for cs in c.cases if cs.name == case_name), None)
            if found is not None and found.latency is not None:
                rows.append((c.name, found.latency))
        for y, (name, lat) in enumerate(rows):
            samples = getattr(lat, "samples_ms", None)
            color = "tab:green" if name == report.selected_plan else "tab:blue"
            if isinstance(samples, (list, tuple)) and samples:
                ax.boxplot(
                    [list(samples)],
                    positions=[y],
                    **_horizontal(),
                    widths=0.6,
                    showfliers=True,
                    flierprops={"markersize": 2},
                    medianprops={"color": color},
                )
            else:
                low = lat.min_ms if lat.min_ms is not None else lat.median_ms
                high = lat.p99_ms if lat.p99_ms is not None else lat.median_ms
                if low is not None and high is not None:
                    ax.hlines(y, low, high, color=color, linewidth=2, alpha=0.5)
                if lat.p90_ms is not None:
                    ax.plot([lat.p90_ms], [y], "|", color=color, markersize=10)
                if lat.median_ms is not None:
                    ax.plot([lat.median_ms], [y], "o", color=color)
                if lat.mean_ms is not None:
                    ax.plot([lat.mean_ms], [y], "x", color="black", markersize=5)
        ax.set_yticks(range(len(rows)), [name for name, _ in rows])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.invert_yaxis()
        ax.set_xlabel("latency per call (ms)")
        ax.set_title(f"case {case_name}", loc="left", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        "Latency per plan (box: raw samples; else min-p99 line, | p90, o median, x mean)",
        fontsize=9,
    )
    fig.tight_layout()
    return Figure(_safe(f"latency-{label}" if label else "latency"), "Latency", _svg(fig))


def _speedup_vs_baseline(report: OptimizationReport, c: CandidateEvidence) -> Any:
    if report.baseline == "eager_fp32" or c.race.speedup_vs_baseline is None:
        return c.race.speedup_vs_reference
    return c.race.speedup_vs_baseline


def speedup_figure(report: OptimizationReport, label: str = "") -> Figure | None:
    """Paired speedup of each challenger vs the baseline, its interval and the bar."""
    plt = _pyplot()
    rows = []
    for c in report.candidates:
        if c.name == report.baseline:
            continue
        interval = _speedup_vs_baseline(report, c)
        if interval is not None and interval.point is not None:
            rows.append((c, interval))
    if not rows:
        return None
    bar = report.constraints.min_speedup
    # The axis follows the points, not the bounds: an interval from a plan's first looks can
    # span decades and would squash every other point; its ends are clipped, marked > or <.
    points = [i.point for _, i in rows] + [bar, 1.0]
    x_min, x_max = min(points) / 1.5, max(points) * 1.5
    wide = x_max / x_min > 20
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.4))
    for y, (c, interval) in enumerate(rows):
        color = "tab:green" if c.name == report.selected_plan else "tab:blue"
        low = interval.low if interval.low is not None else interval.point
        high = interval.high if interval.high is not None else interval.point
        shown_low, shown_high = max(low, x_min), min(high, x_max)
        ax.errorbar(
            [interval.point],
            [y],
            xerr=[[interval.point - shown_low], [shown_high - interval.point]],
            fmt="o",
            color=color,
            capsize=3,
        )
        if low < x_min:
            ax.plot([x_min], [y], marker="<", color=color)
        if high > x_max:
            ax.plot([x_max], [y], marker=">", color=color)
    ax.axvline(1.0, color="grey", linewidth=1)
    ax.axvline(bar, color="tab:red", linestyle="--", linewidth=1, label=f"min_speedup {bar:g}x")
    ax.set_yticks(range(len(rows)), [c.name for c, _ in rows])
    ax.invert_yaxis()
    if wide:
        ax.set_xscale("log")
    ax.set_xlim(x_min, x_max)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    scale = "log scale, " if wide else ""
    ax.set_xlabel(f"speedup vs {report.baseline} ({scale}interval at its confidence; > < clipped)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3, which="both")
    fig.tight_layout()
    return Figure(_safe(f"speedup-{label}" if label else "speedup"), "Speedup", _svg(fig))


def lifecycle_figure(report: OptimizationReport, label: str = "") -> Figure | None:
    """Projected total cost (setup + first calls + calls x steady latency) vs calls."""
    if str(report.objective) != "lifecycle_latency":
        return None
    plt = _pyplot()
    lines = []
    for c in _measured(report):
        per_call = c.latency.mean_ms if c.latency.mean_ms is not None else c.latency.median_ms
        if per_call is None:
            continue
        one_off = 1000.0 * (
            (c.lifecycle.setup_time_s or 0.0) + (c.lifecycle.first_call_time_s or 0.0)
        )
        lines.append((c, one_off, per_call))
    if not lines:
        return None
    horizon = report.constraints.expected_calls or report.workload.expected_calls or 1000
    breaks = [
        c.lifecycle.break_even_calls_vs_baseline
        for c, _, _ in lines
        if c.lifecycle.break_even_calls_vs_baseline
    ]
    x_max = max([float(horizon), *(2.0 * b for b in breaks if b)])
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for c, one_off, per_call in lines:
        color = "tab:green" if c.name == report.selected_plan else None
        ax.plot(
            [0, x_max],
            [one_off / 1000.0, (one_off + per_call * x_max) / 1000.0],
            label=c.name,
            color=color,
            linewidth=2.5 if c.name == report.selected_plan else 1.2,
        )
        point = c.lifecycle.break_even_calls_vs_baseline
        if point and c.name != report.baseline:
            ax.plot([point], [(one_off + per_call * point) / 1000.0], "o", color=color or "black")
            ax.annotate(
                f"break-even {point:,.0f}",
                (point, (one_off + per_call * point) / 1000.0),
                fontsize=7,
                xytext=(4, -10),
                textcoords="offset points",
            )
    ax.axvline(horizon, color="grey", linestyle=":", label=f"expected calls {horizon:,}")
    ax.set_xlabel("calls served")
    ax.set_ylabel("projected total time (s)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return Figure(
        _safe(f"lifecycle-{label}" if label else "lifecycle"), "Lifecycle cost", _svg(fig)
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def throughput_figure(report: OptimizationReport, label: str = "") -> Figure | None:
    """Throughput curves (throughput objective): items per second vs batch size per plan,
    with intervals; points over the latency budget hollow, the served one starred."""
    evidence = getattr(report, "throughput", None)
    if evidence is None or not evidence.points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    plans = list(dict.fromkeys(p.plan for p in evidence.points))
    for plan in plans:
        points = [p for p in evidence.points if p.plan == plan and p.items_per_s is not None]
        if not points:
            continue
        sizes = [p.batch_size for p in points]
        rates = [p.items_per_s for p in points]
        lows = [max(0.0, r - _or(p.items_per_s_low, r)) for p, r in zip(points, rates)]
        highs = [max(0.0, _or(p.items_per_s_high, r) - r) for p, r in zip(points, rates)]
        line = ax.errorbar(sizes, rates, yerr=[lows, highs], capsize=3, label=plan, marker="o")
        color = line[0].get_color()
        refused = [p for p in points if not p.admissible]
        if refused:
            ax.plot(
                [p.batch_size for p in refused],
                [p.items_per_s for p in refused],
                "o",
                markerfacecolor="white",
                markeredgecolor=color,
                markersize=8,
            )
        chosen = [
            p for p in points if (p.plan, p.batch_size) == (report.selected_plan, report.batch_size)
        ]
        if chosen:
            ax.plot(
                [chosen[0].batch_size],
                [chosen[0].items_per_s],
                "*",
                color="tab:green",
                markersize=16,
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(evidence.batch_sizes), [str(b) for b in evidence.batch_sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("items per second (interval at the race's confidence)")
    budget = f"; hollow: over {evidence.budget}" if evidence.budget else ""
    ax.set_title(f"Throughput per batch size (star: served{budget})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return Figure(_safe(f"throughput-{label}" if label else "throughput"), "Throughput", _svg(fig))


def report_figures(report: OptimizationReport, label: str = "") -> list[Figure]:
    """Every figure that applies to ``report`` (:class:`FiguresUnavailable` without
    matplotlib)."""
    _pyplot()
    drawn = [
        latency_figure(report, label),
        speedup_figure(report, label),
        lifecycle_figure(report, label),
        throughput_figure(report, label),
    ]
    return [f for f in drawn if f is not None]


def draw_figures(runs: Sequence[LabelledReport]) -> list[Figure]:
    """Every figure of every run; names carry the run's label when there are several."""
    many = len(runs) > 1
    return [f for run in runs for f in report_figures(run.report, run.label if many else "")]
