"""The board's charts as the server writes them (server/web/charts.py), and the vendored chart library
they need shipping inside the package. tests/server/test_web_browser.py draws them in chromium."""

from __future__ import annotations

import hashlib
import re
import tomllib
from html import unescape
from importlib import resources
from pathlib import Path

from hiveboard.server.web import charts
from hiveboard.server.web.app import STATIC

STATIC_DIR = resources.files("hiveboard.server.web").joinpath("static")
ROOT = Path(__file__).resolve().parents[2]


def spec_of(html: str) -> charts.Spec:
    found = re.search(r'data-chart="([^"]+)"', html)
    assert found, html
    return charts.Spec.model_validate_json(unescape(found.group(1)))


def test_a_chart_carries_its_numbers_for_the_script_and_as_a_table():
    html = charts.chart(
        "Per-critic contribution",
        [("ruff/style", 0.5), ("bandit/security", None)],
        x="critic/lens",
        y="rounds its blocking input decided",
        unit="%",
        top=1,
        horizontal=True,
    )
    spec = spec_of(html)
    assert spec.values == [50, None] and spec.top == 100 and spec.unit == "%" and spec.horizontal
    assert spec.labels == ["ruff/style", "bandit/security"]
    # the same numbers a person reads without script (or with a screen reader)
    assert "<tr><th>ruff/style</th><td>50%</td></tr>" in html and "<tr><th>bandit/security</th><td>—</td></tr>" in html
    assert 'aria-label="Per-critic contribution: ruff/style 50%, bandit/security —"' in html
    assert '<details class="data" open>' in html  # open until static/charts.js has drawn the chart
    assert 'data-rows="2"' in html and "style=" not in html  # grows with its rows; the CSP allows no style attribute


def test_hostile_labels_stay_text():
    html = charts.chart("Scores", [("<img src=x onerror=alert(1)>", 3.0)], x="'\"<b>", y="score")
    assert "<img" not in html and "<b>" not in html
    assert spec_of(html).labels == ["<img src=x onerror=alert(1)>"]  # the script draws it on a canvas, as text


def test_no_points_is_said_not_drawn():
    html = charts.chart("Rounds per card", [], x="rounds", y="cards")
    assert "no data yet" in html and "<canvas" not in html


def test_the_score_by_round_brings_its_scripts_once():
    html = charts.line([2.0, 10.0], label="score by round")
    spec = spec_of(html)
    assert spec.kind == "line" and spec.values == [2, 10] and spec.top == 10 and spec.labels == ["1", "2"]
    assert html.count('src="/static/chart.umd.min.js"') == 1 and html.count('src="/static/charts.js"') == 1
    assert charts.line([]) == ""


def test_the_served_static_files_ship_in_the_package():
    """Every file the app serves is in static/, and pyproject's package-data pattern takes all of
    static/ (a nested folder would fall outside "static/*")."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "static/*" in patterns["hiveboard.server.web"]
    assert {"chart.umd.min.js", "charts.js"} <= set(STATIC)
    for name in STATIC:
        assert STATIC_DIR.joinpath(name).is_file(), name
    assert not [p.name for p in STATIC_DIR.iterdir() if p.is_dir()]


def test_the_vendored_chart_library_is_the_one_vendor_md_records():
    """VENDOR.md names the version and checksum of the vendored Chart.js: an update that forgets the
    record (or a hand-edited file) fails here."""
    body = STATIC_DIR.joinpath("chart.umd.min.js").read_bytes()
    record = STATIC_DIR.joinpath("VENDOR.md").read_text()
    version = re.search(rb"Chart\.js v(\d+\.\d+\.\d+)", body[:200]).group(1).decode()
    row = next(line for line in record.splitlines() if line.startswith("| `chart.umd.min.js`"))
    assert f"| {version} " in row and "| MIT |" in row, row
    assert hashlib.sha256(body).hexdigest() in record
