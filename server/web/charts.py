"""Small inline SVG charts, drawn on the server: no chart library to ship, nothing fetched by the page."""

from __future__ import annotations

from html import escape


def bars(
    points: list[tuple[str, float | None]],
    *,
    width: int = 520,
    height: int = 160,
    unit: str = "",
    top: float | None = None,
    label: str = "",
) -> str:
    """A bar chart of (label, value); None draws no bar. `top`: the value axis' maximum (e.g. 1 for rates)."""
    if not points:
        return '<p class="empty">no data yet</p>'
    values = [v for _, v in points if v is not None]
    peak = top if top is not None else max(values, default=0) or 1
    gap, pad = 4, 18
    slot = (width - gap) / len(points)
    out = [f'<svg class="chart" viewBox="0 0 {width} {height + pad * 2}" role="img" aria-label="{escape(label)}">']
    for n, (name, value) in enumerate(points):
        w = min(max(slot - gap, 1), 64)  # a few points stay bars, not blocks
        x = gap + n * slot + (slot - gap - w) / 2
        if value is not None:
            h = (value / peak) * height if peak else 0
            y = pad + height - h
            shown = f"{value:.0%}" if unit == "%" else f"{value:g}{unit}"
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}"><title>{escape(name)}: '
                f"{shown}</title></rect>"
            )
            if len(points) <= 16:
                out.append(f'<text x="{x + w / 2:.1f}" y="{y - 3:.1f}" class="v">{shown}</text>')
        if len(points) <= 16 or n in (0, len(points) - 1):
            out.append(f'<text x="{x + w / 2:.1f}" y="{pad * 2 + height - 4:.1f}" class="k">{escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def line(values: list[float], *, width: int = 220, height: int = 60, top: float = 10, label: str = "") -> str:
    """A small line chart (e.g. the review score round by round)."""
    if not values:
        return ""
    pad = 8
    step = (width - 2 * pad) / max(len(values) - 1, 1)
    pts = [(pad + n * step, pad + (height - 2 * pad) * (1 - min(v, top) / top)) for n, v in enumerate(values)]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3"><title>round {n}: {v:g}</title></circle>'
        f'<text x="{x:.1f}" y="{max(y - 5, 8):.1f}" class="v">{v:g}</text>'
        for n, ((x, y), v) in enumerate(zip(pts, values), 1)
    )
    return (
        f'<svg class="spark" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">'
        f'<polyline points="{path}"/>{dots}</svg>'
    )
