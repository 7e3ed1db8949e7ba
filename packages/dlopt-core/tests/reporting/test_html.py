"""The HTML page: self-contained, complete, and rendered by a real browser without errors."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dlopt.reporting.figures import report_figures
from dlopt.reporting.html import inline_svg, render_html, write_html

#: Figures need the optional [plots] extra; `nox -s tests` installs it, `tests-core` does not.
needs_plots = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason='matplotlib is not installed (pip install "dlopt-core[plots]")',
)

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class _Page(HTMLParser):
    """Tags and attributes of a page, and every attribute that could load something."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.loads: list[tuple[str, str, str]] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in_title = tag == "title"
        for name, value in attrs:
            if name in {"src", "href", "srcset", "data", "action", "xlink:href"} and value:
                self.loads.append((tag, name, value))

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False


def _page(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


@needs_plots
def test_figures_are_svg_documents(race_report, lifecycle_report):
    figures = report_figures(race_report)
    assert [f.name for f in figures] == ["latency", "speedup"]
    for figure in figures + report_figures(lifecycle_report):
        ET.fromstring(figure.svg.encode())  # well-formed XML
    (lifecycle,) = [f for f in report_figures(lifecycle_report) if f.name == "lifecycle"]
    assert "break-even" in lifecycle.svg or "break" in lifecycle.svg


@needs_plots
def test_the_page_loads_nothing_from_anywhere(race_report):
    figures = [(f.title, f.svg) for f in report_figures(race_report)]
    text = render_html(race_report, figures)
    page = _page(text)
    # Every reference stays inside the page (fragment links only).
    assert all(value.startswith("#") for _, _, value in page.loads), page.loads
    assert "link" not in page.tags and "script" not in page.tags and "iframe" not in page.tags
    assert all(ref.startswith("#") for ref in re.findall(r"url\(([^)]*)\)", text))
    assert "@import" not in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))  # two figures never share an id
    assert page.title == f"dlopt report: {race_report.workload.name}"
    assert page.tags.count("svg") == len(figures) == 2
    assert "<!DOCTYPE svg" not in text and "<?xml" not in text


def test_inline_svg_drops_prolog_and_metadata_and_prefixes_ids():
    svg = '<?xml version="1.0"?>\n<!DOCTYPE svg>\n<svg x="1"><metadata>m</metadata><g/></svg>'
    assert inline_svg(svg) == '<svg x="1"><g/></svg>'
    ided = '<svg><path id="a"/><g clip-path="url(#a)"><use xlink:href="#a"/></g></svg>'
    assert inline_svg(ided, "f1-") == (
        '<svg><path id="f1-a"/><g clip-path="url(#f1-a)"><use xlink:href="#f1-a"/></g></svg>'
    )


def test_edge_cases_make_a_page(edge_report):
    _, report = edge_report
    page = _page(render_html(report))
    assert page.title.startswith("dlopt report:")
    assert page.tags.count("details") >= len(report.candidates)


def _browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@needs_plots
def test_the_page_renders_in_headless_chromium(tmp_path: Path, race_report):
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium installed (Debian: apt-get install chromium)")
    result = write_html(race_report, tmp_path / "report.html")
    assert result.missing_figures is None
    url = result.path.resolve().as_uri()
    common = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = _page(dom.stdout)
    assert page.title == f"dlopt report: {race_report.workload.name}"
    first_table = dom.stdout.split("<table>", 2)[1]
    rows = re.findall(r"<tr[ >]", first_table.split("</table>")[0])
    measured = [c for c in race_report.candidates if c.status != "unavailable"]
    assert len(rows) == 1 + len(measured)  # the header and one row per plan
    assert page.tags.count("svg") == 2
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    shot = tmp_path / "page.png"
    done = subprocess.run(
        [*common, "--window-size=1280,2000", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 10_000


def test_a_budget_scaled_to_the_model_is_shown_as_such(race_report, tmp_path) -> None:
    # MeasurementPolicy(max_time_s=None): the budget the race had, not a crash.
    import attrs

    from dlopt.reporting.html import render_html

    assert race_report.measurement is not None
    measurement = attrs.evolve(
        race_report.measurement,
        policy=attrs.evolve(race_report.measurement.policy, max_time_s=None),
        budget_s=42.0,
    )
    page = render_html(attrs.evolve(race_report, measurement=measurement), [])
    assert "42 (scaled to the model)" in page


@needs_plots
def test_figures_raise_no_deprecation_warning(sampled_report) -> None:
    """dlopt's own figures use no Matplotlib argument the installed version deprecates
    (boxplot's ``vert=`` since 3.10)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", PendingDeprecationWarning)
        figures = report_figures(sampled_report)
    assert [f.name for f in figures] == ["latency", "speedup"]
    assert "<svg" in figures[0].svg
