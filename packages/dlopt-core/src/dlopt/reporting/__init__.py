"""Reading a selection's evidence, all from saved
:class:`~dlopt.evidence.report.OptimizationReport` values: ``tables`` (a report as tables
of text, for the terminal, the HTML page and exports), ``progress`` (the live display,
fed by events), ``labels`` (reports side by side), ``export`` (CSV, LaTeX, a provenance
manifest), ``figures`` (SVG, with matplotlib: ``pip install "dlopt-core[plots]"``,
imported only when a figure is drawn) and ``html`` (one self-contained page).
"""
