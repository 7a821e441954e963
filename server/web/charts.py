"""The board's charts. The server writes each chart's numbers twice: as a spec on a <canvas> that
`static/charts.js` draws with the vendored Chart.js (`static/VENDOR.md`), and as a table, which is the
chart for a page without script or a screen reader. Nothing is fetched from another site."""

from __future__ import annotations

import re
from html import escape
from typing import Literal

from pydantic import BaseModel

# once per page that has charts, after its figures (deferred: they run in order once the page is parsed)
SCRIPTS = '<script src="/static/chart.umd.min.js" defer></script><script src="/static/charts.js" defer></script>'


class Spec(BaseModel):
    """What `static/charts.js` draws: the contract between this module and that script."""

    kind: Literal["bar", "line"]
    labels: list[str]
    values: list[float | None]  # None: no bar or point
    unit: str  # after each value: "%", " s", ""
    top: float | None  # the value axis' maximum, when it has one (100 %, a score of 10)
    x: str  # the category axis' title
    y: str  # the value axis' title
    horizontal: bool = False  # categories down the side: long names stay readable
    whole: bool = False  # counts: ticks at whole numbers only


def _shown(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "%":
        return f"{value:.0%}"
    return f"{round(value, 2):g}{unit}"


def chart(
    title: str,
    points: list[tuple[str, float | None]],
    *,
    x: str,
    y: str,
    kind: Literal["bar", "line"] = "bar",
    unit: str = "",
    top: float | None = None,
    horizontal: bool = False,
    whole: bool = False,
) -> str:
    """A figure of (label, value) points: the canvas to draw on, and the same numbers as a table.

    Rates come as fractions with unit "%" (0.5 is 50 %); `top` is then 1."""
    if not points:
        return (
            f'<figure class="chart"><figcaption>{escape(title)}</figcaption><p class="empty">no data yet</p></figure>'
        )
    scale = 100 if unit == "%" else 1
    spec = Spec(
        kind=kind,
        labels=[name for name, _ in points],
        values=[None if v is None else round(v * scale, 4) for _, v in points],
        unit=unit,
        top=None if top is None else top * scale,
        x=x,
        y=y,
        horizontal=horizontal,
        whole=whole,
    )
    key = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    described = ", ".join(f"{name} {_shown(v, unit)}" for name, v in points[:20])
    rows = "".join(f"<tr><th>{escape(name)}</th><td>{_shown(v, unit)}</td></tr>" for name, v in points)
    # horizontal charts grow with their rows so each name keeps a readable line (static/charts.js sets the
    # height from data-rows: the pages' Content-Security-Policy allows no style attribute)
    size = f' data-rows="{len(points)}"' if horizontal else ""
    return (
        f'<figure class="chart" data-key="{key}"><figcaption>{escape(title)}</figcaption>'
        f'<div class="plot{" rows" if horizontal else ""}"{size}><canvas role="img" '
        f'aria-label="{escape(title)}: {escape(described)}" data-chart="{escape(spec.model_dump_json())}">'
        f"</canvas></div>"
        # open until the chart is drawn: without script (or before it runs) the table is the chart
        f'<details class="data" open><summary>the numbers</summary><table><tr><th>{escape(x)}</th>'
        f"<th>{escape(y)}</th></tr>{rows}</table></details></figure>"
    )


def line(values: list[float], *, top: float = 10, label: str = "") -> str:
    """The review score round by round, on a card's page (its only chart, so it brings the scripts)."""
    if not values:
        return ""
    points = [(str(n), v) for n, v in enumerate(values, 1)]
    title = label[:1].upper() + label[1:]
    return chart(title, points, x="review round", y=f"score (0–{top:g})", kind="line", top=top) + SCRIPTS
