"""Reading a selection's evidence: tables, progress, labels (reports side by side),
exports (CSV, LaTeX, provenance, figures) and a self-contained HTML page, all from saved
:class:`~dlopt.evidence.report.OptimizationReport` values. Figures need matplotlib
(``pip install "dlopt-core[plots]"``), imported only when a figure is drawn.
"""
