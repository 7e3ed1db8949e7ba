"""Reports side by side: each with the label its rows, columns and figures carry."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    from dlopt.evidence.report import OptimizationReport


@frozen
class LabelledReport:
    """One report and the label its rows and columns carry (the file's stem by default)."""

    label: str
    report: OptimizationReport
    source: str | None = None


def label_runs(
    reports: Sequence[OptimizationReport], sources: Sequence[str | None] | None = None
) -> list[LabelledReport]:
    """Runs labelled by their file stems, made unique (``r``, ``r-2``); ``run-N`` when a
    report has no file."""
    sources = list(sources) if sources is not None else [None] * len(reports)
    labels: list[str] = []
    for index, source in enumerate(sources):
        base = Path(source).stem if source else f"run-{index + 1}"
        label, n = base, 2
        while label in labels:
            label, n = f"{base}-{n}", n + 1
        labels.append(label)
    return [LabelledReport(lab, rep, src) for lab, rep, src in zip(labels, reports, sources)]
