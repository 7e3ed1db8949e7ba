"""A report as one self-contained HTML page: opens offline, loads nothing from anywhere.

The page holds the decision and its reason, the candidates table, the plans unavailable
here, the figures (inline SVG, when matplotlib is installed), each plan's evidence per
case (latency statistics and validation metrics, in ``<details>``) and the provenance.
CSS is inline; there is no script.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from dlopt.reporting.tables import (
    Table,
    candidate_summary,
    candidates_table,
    evidence_tables,
    headline,
    inputs_kind,
    measurement_line,
    race_notes,
    status_text,
    throughput_notes,
    throughput_table,
    unavailable_table,
)

if TYPE_CHECKING:
    from dlopt.evidence.report import OptimizationReport

_CSS = """
:root { color-scheme: light; --fg: #1d2430; --muted: #5b6472; --line: #d8dde5;
  --ok: #1b7f3b; --bad: #b42318; --bg-sel: #e8f6ec; --bg-bad: #fdecea; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--fg); margin: 0 auto; padding: 24px; max-width: 1440px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line);
  padding-bottom: 4px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
.muted { color: var(--muted); }
.decision { border: 1px solid var(--line); border-left: 4px solid var(--ok);
  padding: 10px 14px; background: #f7fbf8; border-radius: 4px; }
.decision .selected { font-size: 16px; font-weight: 600; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { background: #f3f5f8; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.nowrap { white-space: nowrap; }
td.fold { word-break: break-all; min-width: 14em; }
td.wrap { overflow-wrap: anywhere; min-width: 16em; }
tr.selected td { background: var(--bg-sel); font-weight: 600; }
tr.failed td { background: var(--bg-bad); }
tr.unavailable td { color: var(--muted); }
figure { margin: 12px 0; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 12px; }
details { margin: 6px 0; border: 1px solid var(--line); border-radius: 4px;
  padding: 4px 10px; }
summary { cursor: pointer; font-weight: 600; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; }
"""


@frozen
class HtmlResult:
    """The page written, and why figures are missing from it (or ``None``)."""

    path: Path
    missing_figures: str | None = None


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def table_html(table: Table) -> str:
    """``table`` as an HTML ``<table>`` (classes carry the row styles)."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in table.headers)
    body = []
    styles = list(table.row_styles) + [None] * (len(table.rows) - len(table.row_styles))
    for row, style in zip(table.rows, styles):
        cells = []
        for cell, overflow, numeric in zip(row, table.overflow, table.numeric):
            cls = "num" if numeric else {"none": "nowrap", "fold": "fold"}.get(overflow, "wrap")
            attr = f' class="{cls}"' if cls else ""
            cells.append(f"<td{attr}>{_esc(cell)}</td>")
        row_attr = f' class="{_esc(style)}"' if style else ""
        body.append(f"<tr{row_attr}>{''.join(cells)}</tr>")
    caption = f"<h3>{_esc(table.title)}</h3>" if table.title else ""
    return (
        f'{caption}<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _pairs_html(pairs: Sequence[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in pairs)
    return f'<div class="scroll"><table><tbody>{rows}</tbody></table></div>'


_SVG_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.S)
_SVG_METADATA = re.compile(r"<metadata>.*?</metadata>", re.S)


_SVG_ID = re.compile(r'(\bid="|url\(#|href="#)([^")]+)')


def inline_svg(svg: str, prefix: str = "") -> str:
    """An SVG document ready to sit inside HTML: no XML prolog, DOCTYPE or metadata; with
    ``prefix`` its ids (and the references to them) are made unique on the page."""
    svg = _SVG_METADATA.sub("", _SVG_PROLOG.sub("", svg, count=1))
    if prefix:
        svg = _SVG_ID.sub(lambda m: f"{m.group(1)}{prefix}{m.group(2)}", svg)
    return svg


def _budget_text(m: Any) -> str:
    """The race's budget: the one it had, and whether it was fixed or scaled to the model."""
    fixed = m.policy.max_time_s
    had = getattr(m, "budget_s", None)
    if fixed is not None:
        return f"{fixed:g} (fixed)"
    return f"{had:.0f} (scaled to the model)" if had else "scaled to the model"


def _provenance_pairs(report: OptimizationReport) -> list[tuple[str, str]]:
    rt = report.runtime
    cpu = getattr(rt, "cpu", None)
    m = getattr(report, "measurement", None)
    pairs = [
        ("dlopt", report.dlopt_version),
        ("report written", report.created_at),
        ("schema version", str(report.schema_version)),
        ("device", f"{rt.device} ({rt.device_name})"),
        ("python / platform", f"{rt.python} / {rt.platform}"),
        ("torch / cuda / cudnn", f"{rt.torch} / {rt.cuda or '-'} / {rt.cudnn or '-'}"),
    ]
    if cpu is not None:
        pairs += [
            ("cpu", f"{cpu.model}, {cpu.logical_cores} logical cores, {cpu.torch_threads} threads"),
            ("cpu isa", ", ".join(cpu.isa_flags) or "-"),
        ]
    gpu = getattr(rt, "cuda_device", None)
    if gpu is not None:
        pairs.append(("gpu", f"{gpu.name}, sm {gpu.compute_capability}"))
    pairs += [
        ("objective", str(report.objective)),
        ("min_speedup", f"{report.constraints.min_speedup:g}"),
        ("expected calls", str(report.constraints.expected_calls or "-")),
    ]
    if m is not None:
        pairs += [
            ("seed", str(m.seed)),
            ("confidence", f"{m.confidence:g}"),
            ("budget (s)", _budget_text(m)),
        ]
    pairs.append(("inputs", inputs_kind(report) or "-"))
    for case in report.workload.cases:
        pairs.append((f"case {case.name} (weight {case.weight:g})", case.inputs))
    return pairs


def _at_batch(report: OptimizationReport) -> str:
    """`` at batch 8`` under the throughput objective, else nothing."""
    return f" at batch {report.batch_size}" if report.throughput is not None else ""


def _page_head(title: str) -> list[str]:
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
    ]


def _decision_html(report: OptimizationReport, anchor: str | None = None) -> list[str]:
    """The decision box: the selected plan, the reason, the race's summary and notes."""
    anchor_attr = f' id="{_esc(anchor)}"' if anchor else ""
    parts = [
        f'<section class="decision"{anchor_attr}>',
        f'<div class="selected">selected: {_esc(report.selected_plan)}{_esc(_at_batch(report))} '
        f'<span class="muted">(baseline {_esc(report.baseline)})</span></div>',
        f"<p>{_esc(report.selection_reason)}</p>",
    ]
    line = measurement_line(report)
    if line:
        parts.append(f'<p class="muted">{_esc(line)}</p>')
    notes = race_notes(report)
    if notes:
        parts.append("<ul>" + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>")
    parts.append("</section>")
    return parts


def fleet_page(title: str, table: Table, reports: Sequence[tuple[str, OptimizationReport]]) -> str:
    """A fleet's page: its table across jobs and machine kinds, then per race (labelled
    ``job@kind``) the decision and the candidates table, as a single report shows them."""
    parts = [*_page_head(title), table_html(table)]
    for label, report in reports:
        parts.append(f'<h2 id="{_esc(label)}">{_esc(label)}</h2>')
        parts.append(f'<p class="muted">{_esc(headline(report))}</p>')
        parts.extend(_decision_html(report))
        parts.append(table_html(candidates_table(report, include_unavailable=False)))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_html(report: OptimizationReport, figures: Sequence[tuple[str, str]] = ()) -> str:
    """The page as text; ``figures`` are ``(title, svg)`` pairs to inline."""
    from dlopt.platform.serialization import dumps, strict_jsonable

    title = f"dlopt report: {report.workload.name}"
    parts = [*_page_head(title), f'<p class="muted">{_esc(headline(report))}</p>']
    parts.extend(_decision_html(report, anchor="decision"))
    parts.append('<h2 id="candidates">Candidates</h2>')
    parts.append(table_html(candidates_table(report, include_unavailable=False)))
    curves = throughput_table(report)
    if curves is not None:
        parts.append('<h2 id="throughput">Throughput per batch size</h2>')
        parts.append(table_html(curves))
        notes = throughput_notes(report)
        if notes:
            parts.append("<ul>" + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>")
    unavailable = unavailable_table(report)
    if unavailable is not None:
        parts.append(table_html(unavailable))
    if figures:
        parts.append('<h2 id="figures">Figures</h2>')
        for number, (fig_title, svg) in enumerate(figures, 1):
            parts.append(
                f'<figure class="figure">{inline_svg(svg, f"fig{number}-")}'
                f"<figcaption>{_esc(fig_title)}</figcaption></figure>"
            )
    parts.append('<h2 id="evidence">Evidence per plan</h2>')
    for cand in report.candidates:
        inner = [_pairs_html(candidate_summary(cand))]
        inner.extend(table_html(table) for table in evidence_tables(cand))
        opened = " open" if cand.name == report.selected_plan else ""
        parts.append(
            f'<details class="candidate"{opened}><summary>{_esc(cand.name)} '
            f'<span class="muted">({_esc(status_text(cand))})</span></summary>{"".join(inner)}'
            "</details>"
        )
    parts.append('<h2 id="provenance">Provenance</h2>')
    parts.append(_pairs_html(_provenance_pairs(report)))
    parts.append(
        "<details><summary>policy and tolerances (JSON)</summary><pre>"
        + _esc(
            dumps(
                strict_jsonable(
                    {
                        "constraints": report.constraints,
                        "quality": report.quality,
                        "measurement": None
                        if report.measurement is None
                        else report.measurement.policy,
                    }
                )
            )
        )
        + "</pre></details>"
    )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_html(report: OptimizationReport, path: str | os.PathLike[str]) -> HtmlResult:
    """Write the page to ``path`` (atomically); figures when matplotlib is installed."""
    from dlopt.platform.serialization import atomic_write_text
    from dlopt.reporting.figures import FiguresUnavailable, report_figures

    missing = None
    try:
        figures = [(f.title, f.svg) for f in report_figures(report)]
    except FiguresUnavailable as exc:
        figures, missing = [], str(exc)
    written = atomic_write_text(path, render_html(report, figures))
    return HtmlResult(written, missing)
