"""The report as one self-contained HTML file: inline SVG charts, no scripts or fonts to fetch,
so it opens from a mail attachment or an air-gapped host.

The page leads with what an operator asks first: how much of each quota the cluster used over
the span, and who the quotas (recommended, or a candidate file) would have throttled, ranked
by how much. Then a chart for each of the top principals: its use of every quota that limits
it, per sampling window, as a share of that quota (1.0 is the quota), so byte rates, request
time and mutations share one axis. Every principal is in one table at the end; a chart each
for a thousand principals made a page of 7.6 MB in no particular order.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.whatif import WhatIf

_WIDTH, _HEIGHT = 760, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 12, 12, 28
_COLOURS = {
    "producer_byte_rate": "#1f77b4",
    "consumer_byte_rate": "#2ca02c",
    "request_percentage": "#ff7f0e",
    "controller_mutation_rate": "#9467bd",
    "producer_ids_rate": "#8c564b",
}
#: rows of the throttled ranking shown open; the rest are one click away
_THROTTLED_SHOWN = 20
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


#: what each quota's use is counted in, and its rate
_UNITS = {
    "producer_byte_rate": ("B", "B/s"),
    "consumer_byte_rate": ("B", "B/s"),
    "request_percentage": ("ms", "% of a thread"),
    "controller_mutation_rate": ("partitions", "/s"),
    "producer_ids_rate": ("ids", "per producer-id window"),
}


@dataclass
class QuotaTotal:
    """The cluster's use of one quota over the span, and what the what-if throttled of it."""

    key: str
    #: in _UNITS' first unit
    used: float
    #: (bucket start ms, the cluster's rate over the bucket), time-ordered
    series: Sequence[tuple[int, float]]
    #: principals (users, for producer ids) that used it
    principals: int
    throttled: float = 0.0
    throttled_principals: int = 0


@dataclass
class Throttled:
    """A principal the what-if throttled under one quota, with its rank's measure."""

    result: WhatIf
    #: the throttled use in seconds of the principal's quota (pipeline.whatif)
    seconds: float


def _number(value: float) -> str:
    if value >= 1e12:
        return f"{value / 1e12:.2f} T"
    if value >= 1e9:
        return f"{value / 1e9:.2f} G"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e3:
        return f"{value / 1e3:.1f} k"
    return f"{value:.3g}"


def _svg(
    lines: Mapping[str, Sequence[tuple[int, float]]],
    top: float,
    reference: str,
    start_ms: int,
    end_ms: int,
) -> str:
    """Lines of shares over time, on an axis from 0 to `top` with a dashed line at 1.0."""
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
        f'<text x="{_LEFT - 6}" y="{y(1) + 4:.1f}" text-anchor="end" class="axis">'
        f"{reference}</text>",
        f'<text x="{_LEFT - 6}" y="{_TOP + 10}" text-anchor="end" class="axis">{top:.1f}x</text>',
        f'<text x="{_LEFT - 6}" y="{_TOP + inner_h}" text-anchor="end" class="axis">0</text>',
        f'<text x="{_LEFT}" y="{_HEIGHT - 8}" class="axis">{clock(start_ms)}</text>',
        f'<text x="{_WIDTH - _RIGHT}" y="{_HEIGHT - 8}" text-anchor="end" class="axis">'
        f"{clock(end_ms)}</text>",
    ]
    for key, points in lines.items():
        colour = _COLOURS.get(key, "#333")
        if len(points) == 1:
            ((t, share),) = points
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(share):.1f}" r="3" fill="{colour}"/>')
        else:
            path = " ".join(f"{x(t):.1f},{y(share):.1f}" for t, share in points)
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>'
            )
    if not lines:
        parts.append(
            f'<text x="{_WIDTH / 2}" y="{_HEIGHT / 2}" text-anchor="middle">'
            "no quota limits this principal</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _chart(chart: PrincipalChart, start_ms: int, end_ms: int) -> str:
    lines = {
        key: [(t, rate / chart.limits[key]) for t, rate in points]
        for key, points in chart.series.items()
        if chart.limits.get(key)
    }
    top = min(max([1.2, *(s * 1.1 for points in lines.values() for _, s in points)]), _CEILING)
    return _svg(lines, top, "quota", start_ms, end_ms)


def _cluster_chart(totals: Sequence[QuotaTotal], start_ms: int, end_ms: int) -> str:
    """Each quota's cluster rate as a share of its own peak: one picture of the day's shape."""
    lines = {}
    for total in totals:
        peak = max((rate for _, rate in total.series), default=0.0)
        if peak > 0:
            lines[total.key] = [(t, rate / peak) for t, rate in total.series]
    return _svg(lines, 1.1, "peak", start_ms, end_ms)


def clock(ms: int) -> str:
    """A sample's wall-clock time as the report prints it."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + " UTC"


def _cells(chart: PrincipalChart) -> list[str]:
    """A principal's row of each quota it used or is limited by: name cell, then figures."""
    rows = []
    for key in _COLOURS:
        limit = chart.limits.get(key)
        stats = chart.percentiles.get(key)
        if limit is None and stats is None:
            continue
        p50, p95, p99, peak = stats or (0.0, 0.0, 0.0, 0.0)
        windows, used = chart.what_if.get(key, (0.0, 0.0))
        rows.append(
            f'<td><span class="key" style="background:{_COLOURS[key]}"></span>{key}</td>'
            f"<td>{_number(p50)}</td><td>{_number(p95)}</td><td>{_number(p99)}</td>"
            f"<td>{_number(peak)}</td><td>{'-' if limit is None else _number(limit)}</td>"
            f"<td>{windows:.1%}</td><td>{used:.1%}</td>"
        )
    return rows


_FIGURES = (
    "<th>p50</th><th>p95</th><th>p99</th><th>max</th><th>quota value</th>"
    "<th>windows throttled</th><th>use throttled</th>"
)


def _table(chart: PrincipalChart) -> str:
    rows = "".join(f"<tr>{cells}</tr>" for cells in _cells(chart))
    return f"<table><tr><th>quota</th>{_FIGURES}</tr>{rows}</table>"


def _everyone(principals: Sequence[PrincipalChart]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(p.user)}</td><td>{html.escape(p.client_id)}</td>{cells}</tr>"
        for p in sorted(principals, key=lambda p: (p.user, p.client_id))
        for cells in _cells(p)
    )
    return (
        '<table class="everyone"><tr><th>user</th><th>client-id</th><th>quota</th>'
        f"{_FIGURES}</tr>{rows}</table>"
    )


def _totals_table(totals: Sequence[QuotaTotal], span_ms: int) -> str:
    rows = []
    for total in totals:
        unit, rate = _UNITS[total.key]
        peak = max((r for _, r in total.series), default=0.0)
        share = total.throttled / total.used if total.used else 0.0
        rows.append(
            f'<tr><td><span class="key" style="background:{_COLOURS[total.key]}"></span>'
            f"{total.key}</td><td>{_number(total.used)} {unit}</td>"
            f"<td>{_number(total.used / max(span_ms, 1) * 1000)} {unit}/s</td>"
            f"<td>{_number(peak)} {rate}</td><td>{total.principals}</td>"
            f"<td>{total.throttled_principals}</td><td>{share:.2%}</td></tr>"
        )
    return (
        "<table><tr><th>quota</th><th>use over the span</th><th>mean</th>"
        "<th>peak (chart bucket)</th><th>principals</th><th>throttled</th>"
        "<th>use throttled</th></tr>" + "".join(rows) + "</table>"
    )


def _throttled_table(throttled: Sequence[Throttled]) -> str:
    if not throttled:
        return "<p>No principal would have been throttled.</p>"
    head = (
        '<table class="throttled"><tr><th>#</th><th>user</th><th>client-id</th><th>quota</th>'
        "<th>quota value</th><th>use throttled</th><th>at the quota</th><th>of its use</th>"
        "<th>windows throttled</th></tr>"
    )
    rows = []
    for rank, found in enumerate(throttled, 1):
        r = found.result
        unit = _UNITS[r.quota][0]
        rows.append(
            f"<tr><td>{rank}</td><td>{html.escape(r.user)}</td>"
            f"<td>{html.escape(r.client_id)}</td><td>{r.quota}</td><td>{_number(r.limit)}</td>"
            f"<td>{_number(r.throttled)} {unit}</td><td>{found.seconds:,.0f} s</td>"
            f"<td>{r.throttled / r.used if r.used else 0.0:.1%}</td>"
            f"<td>{r.throttled_windows} of {r.windows}</td></tr>"
        )
    shown = f"{head}{''.join(rows[:_THROTTLED_SHOWN])}</table>"
    if len(rows) <= _THROTTLED_SHOWN:
        return shown
    # the rest folded (no script needed), so the charts stay near the top
    return (
        f"{shown}<details><summary>{len(rows) - _THROTTLED_SHOWN:,} more</summary>"
        f"{head.replace('throttled', 'throttled more', 1)}{''.join(rows[_THROTTLED_SHOWN:])}"
        "</table></details>"
    )


def render(
    principals: Sequence[PrincipalChart],
    summary: Sequence[tuple[str, str]],
    offenders: Mapping[str, Sequence[tuple[str, str, float]]],
    totals: Sequence[QuotaTotal],
    throttled: Sequence[Throttled],
    span: tuple[int, int],
    charts: int,
) -> str:
    """The whole page: the summary, the cluster's use per quota, who would be throttled,
    the top users of each quota, charts of the first `charts` principals (in the order
    given), and every principal in one table."""
    start, end = span
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
    charted = principals[:charts]
    sections = "".join(
        f'<section class="principal" data-user="{html.escape(c.user)}" '
        f'data-client-id="{html.escape(c.client_id)}">'
        f"<h3>User:{html.escape(c.user)} client-id {html.escape(c.client_id)}</h3>"
        f"{_chart(c, start, end)}{_table(c)}</section>"
        for c in charted
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
td, th {{ border: 1px solid #ddd; padding: 2px 8px; text-align: right; white-space: nowrap; }}
th {{ background: #f3f3f3; }}
td:first-child, th:first-child {{ text-align: left; }}
table.everyone td:nth-child(-n+3), table.throttled td:nth-child(-n+4) {{ text-align: left; }}
.axis {{ font-size: 10px; fill: #666; }}
.key {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
section.principal {{ margin-bottom: 12px; }}
</style></head><body>
<h1>kafka-quota-proxy usage report</h1>
<table>{summary_rows}</table>
<h2 id="cluster">The cluster's use of each quota</h2>
{_totals_table(totals, end - start)}
<section class="cluster">{_cluster_chart(totals, start, end)}</section>
<p>{legend}</p>
<h2 id="throttled">Would be throttled, most first</h2>
<p>Ranked by the use the quota would have throttled, counted in seconds of that quota (the
time the quota takes to admit it), so bytes, request time and partitions rank together.</p>
{_throttled_table(throttled)}
<h2 id="top">Top users of each quota</h2>{offender_lists}
<h2 id="charts">The top {len(charted)} of {len(principals)} principals</h2>
<p>The throttled first, in the order above, then by their p99 as a share of their quota.
Each chart shows a principal's use per sampling window as a share of its quota (the dashed
line); the table gives the rate's percentiles over its active windows, in the quota's unit,
and what share of its windows and of its use the quota would have throttled.</p>
{sections}
<h2 id="everyone">Every principal</h2>
{_everyone(principals)}
</body></html>
"""
