"""The report as one self-contained HTML file: inline SVG charts, no scripts or fonts to fetch,
so it opens from a mail attachment or an air-gapped host.

Each principal gets one chart: its use of every quota that limits it, per sampling window,
as a share of that quota (1.0 is the quota), so byte rates, request time and mutations share
one axis. The what-if is written under the chart.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

_WIDTH, _HEIGHT = 760, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 12, 12, 28
_COLOURS = {
    "producer_byte_rate": "#1f77b4",
    "consumer_byte_rate": "#2ca02c",
    "request_percentage": "#ff7f0e",
    "controller_mutation_rate": "#9467bd",
    "producer_ids_rate": "#8c564b",
}
#: shares of the quota above this are drawn at the top edge
_CEILING = 3.0


@dataclass
class PrincipalChart:
    user: str
    client_id: str
    #: quota key -> (window start ms, rate in the quota's unit), time-ordered
    series: Mapping[str, Sequence[tuple[int, float]]]
    #: quota key -> the quota the what-if applied (recommended, or from the quota file)
    limits: Mapping[str, float]
    #: quota key -> (share of windows throttled, share of use throttled)
    what_if: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    #: quota key -> (p50, p95, p99, max) of its rate over active windows
    percentiles: Mapping[str, tuple[float, float, float, float]] = field(default_factory=dict)


def _number(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e3:
        return f"{value / 1e3:.1f} k"
    return f"{value:.3g}"


def _chart(chart: PrincipalChart, start_ms: int, end_ms: int) -> str:
    plotted = {key: points for key, points in chart.series.items() if chart.limits.get(key)}
    shares = [rate / chart.limits[key] for key, points in plotted.items() for _, rate in points]
    top = min(max([1.2, *(s * 1.1 for s in shares)]), _CEILING)
    span = max(end_ms - start_ms, 1)
    inner_w, inner_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def x(t: int) -> float:
        return _LEFT + (t - start_ms) / span * inner_w

    def y(share: float) -> float:
        return _TOP + inner_h - min(share, top) / top * inner_h

    parts = [
        f'<svg class="chart" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{inner_w}" height="{inner_h}" fill="#fafafa" '
        'stroke="#ccc"/>',
        f'<line x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{y(1):.1f}" y2="{y(1):.1f}" '
        'stroke="#d62728" stroke-dasharray="6 4"/>',
        f'<text x="{_LEFT - 6}" y="{y(1) + 4:.1f}" text-anchor="end" class="axis">quota</text>',
        f'<text x="{_LEFT - 6}" y="{_TOP + 10}" text-anchor="end" class="axis">{top:.1f}x</text>',
        f'<text x="{_LEFT - 6}" y="{_TOP + inner_h}" text-anchor="end" class="axis">0</text>',
        f'<text x="{_LEFT}" y="{_HEIGHT - 8}" class="axis">{clock(start_ms)}</text>',
        f'<text x="{_WIDTH - _RIGHT}" y="{_HEIGHT - 8}" text-anchor="end" class="axis">'
        f"{clock(end_ms)}</text>",
    ]
    for key, points in plotted.items():
        limit = chart.limits[key]
        path = " ".join(f"{x(t):.1f},{y(rate / limit):.1f}" for t, rate in points)
        colour = _COLOURS.get(key, "#333")
        if len(points) == 1:
            ((t, rate),) = points
            parts.append(
                f'<circle cx="{x(t):.1f}" cy="{y(rate / limit):.1f}" r="3" fill="{colour}"/>'
            )
        else:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>'
            )
    if not plotted:
        parts.append(
            f'<text x="{_WIDTH / 2}" y="{_HEIGHT / 2}" text-anchor="middle">'
            "no quota limits this principal</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def clock(ms: int) -> str:
    """A sample's wall-clock time as the report prints it."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + " UTC"


def _table(chart: PrincipalChart) -> str:
    rows = []
    for key in _COLOURS:
        limit = chart.limits.get(key)
        stats = chart.percentiles.get(key)
        if limit is None and stats is None:
            continue
        p50, p95, p99, peak = stats or (0.0, 0.0, 0.0, 0.0)
        windows, used = chart.what_if.get(key, (0.0, 0.0))
        rows.append(
            f'<tr><td><span class="key" style="background:{_COLOURS[key]}"></span>{key}</td>'
            f"<td>{_number(p50)}</td><td>{_number(p95)}</td><td>{_number(p99)}</td>"
            f"<td>{_number(peak)}</td><td>{'-' if limit is None else _number(limit)}</td>"
            f"<td>{windows:.1%}</td><td>{used:.1%}</td></tr>"
        )
    return (
        "<table><tr><th>quota</th><th>p50</th><th>p95</th><th>p99</th><th>max</th>"
        "<th>quota value</th><th>windows throttled</th><th>use throttled</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def render(
    charts: Sequence[PrincipalChart],
    summary: Sequence[tuple[str, str]],
    offenders: Mapping[str, Sequence[tuple[str, str, float]]],
) -> str:
    """The whole page: a summary, the top users of each quota, then a chart per principal."""
    times = [t for chart in charts for points in chart.series.values() for t, _ in points]
    start, end = (min(times), max(times)) if times else (0, 1)
    summary_rows = "".join(
        f"<tr><th>{html.escape(name)}</th><td>{html.escape(value)}</td></tr>"
        for name, value in summary
    )
    offender_lists = "".join(
        f"<h3>{html.escape(key)}</h3><ol>"
        + "".join(
            f"<li>{html.escape(user)} / {html.escape(client or '*')}: {_number(rate)}</li>"
            for user, client, rate in ranked
        )
        + "</ol>"
        for key, ranked in offenders.items()
    )
    sections = "".join(
        f'<section class="principal" data-user="{html.escape(c.user)}" '
        f'data-client-id="{html.escape(c.client_id)}">'
        f"<h3>User:{html.escape(c.user)} client-id {html.escape(c.client_id)}</h3>"
        f"{_chart(c, start, end)}{_table(c)}</section>"
        for c in charts
    )
    legend = "".join(
        f'<span class="key" style="background:{colour}"></span>{key} '
        for key, colour in _COLOURS.items()
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>kafka-quota-proxy usage report</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin: 6px 0 18px; }}
td, th {{ border: 1px solid #ddd; padding: 2px 8px; text-align: right; }}
th {{ background: #f3f3f3; }}
td:first-child, th:first-child {{ text-align: left; }}
.axis {{ font-size: 10px; fill: #666; }}
.key {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
section.principal {{ margin-bottom: 12px; }}
</style></head><body>
<h1>kafka-quota-proxy usage report</h1>
<table>{summary_rows}</table>
<h2>Top users of each quota</h2>{offender_lists}
<h2>Principals</h2>
<p>Each chart shows a principal's use per sampling window as a share of its quota (the dashed
line); the table gives the rate's percentiles over its active windows, in the quota's unit,
and what share of its windows and of its use the quota would have throttled.</p>
<p>{legend}</p>
{sections}
</body></html>
"""
