"""`top`'s words: a principal's row, the tables `--once` prints and the bus's state line,
shared by the screen (proxy/top/screen.py) and the plain output (proxy/cli/top.py). Pure:
the time the bus's members are measured against (feed.now_ms) is passed in."""

from __future__ import annotations

from typing import Final

from proxy.top.view import DEMAND, MEASURES, LiveView, Measure, Row, ranked


def bus_state(view: LiveView, fleet_topic: str, now: int) -> str:
    """The fleet's bus as read: its topic, and each member with how long ago it was last
    heard (a member silent for LiveView's GONE_MS is gone)."""
    if not view.members:
        return f"bus {fleet_topic or '(none)'}: no member heard"
    heard = ", ".join(
        f"{m} ({(now - t) / 1000:.1f} s ago)" for m, t in sorted(view.members.items())
    )
    return f"bus {fleet_topic}: members {heard}"


def human(value: float, unit: str = "") -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{suffix}{unit}"
    return f"{value:.0f}{unit}" if value >= 10 or value == 0 else f"{value:.2f}{unit}"


def topic_table(view: LiveView, measure: Measure, now: int) -> list[str]:
    """Topics under a quota, when the measure is bytes (their rows from the fleet's bus)."""
    rows = view.topic_rows(measure, now)
    if not rows:
        return []
    lines = ["", f"{'topic':<37} {measure.heading:>12} {'quota':>9} {'share':>6}"]
    for row in rows:
        quota = "-" if row.quota is None else human(row.quota)
        share = "-" if row.share is None else f"{row.share:.2f}"
        lines.append(f"{row.topic:<37.37} {human(row.rate):>12} {quota:>9} {share:>6}")
    return lines


def table(view: LiveView, sort: str, name_filter: str = "") -> list[str]:
    """The plain table `--once` prints: the screen's row in the same words, with the number
    of client addresses and the members' names. Under DEMAND the rate names its measure."""
    rate = "rate" if sort == DEMAND else MEASURES[sort].heading
    heading = (
        f"{'user':<16} {'client_id':<20} {rate:>12} {'quota':>9} {'share':>6}"
        f" {'demand':>6} {'throttle ms':>11} {'throttled':>9} {'conns':>5} {'addrs':>5}"
        "  members"
    )
    lines = [heading]
    for row, measure in ranked(view, sort, name_filter):
        cells = row_cells(row, measure, named=sort == DEMAND)
        lines.append(
            f"{cells[0]:<16.16} {cells[1]:<20.20} {cells[2]:>12} {cells[3]:>9} {cells[4]:>6}"
            f" {cells[5]:>6} {cells[6]:>11} {cells[7]:>9} {cells[8]:>5}"
            f" {len(row.usage.addresses):>5}  {','.join(sorted(row.usage.members))}"
        )
    return lines


#: the screen's columns of a principal's row, as row_cells gives them
COLUMNS: Final = (
    "user", "client_id", "rate", "quota", "share", "demand", "throttle ms", "throttled",
    "conns", "members",
)  # fmt: skip


def row_cells(row: Row, measure: Measure, named: bool = False) -> list[str]:
    """A principal's row in words (COLUMNS), the screen's and the table's; `named`: the
    rate says which measure it is (rows of several measures in one ranking)."""
    usage = row.usage
    rate = human(usage.rate(measure))
    return [
        row.principal.user,
        row.principal.client_id,
        f"{rate} {measure.key}" if named else rate,
        "-" if row.quota is None else human(row.quota),
        "-" if row.share is None else f"{row.share:.2f}",
        "-" if row.demand is None else f"{row.demand:.2f}{'+' if usage.demand_bounded else ''}",
        f"{usage.throttle_time_ms:.0f}",
        str(usage.throttled_requests),
        f"{usage.connections} ({usage.connections_refused} refused)"
        if usage.connections_refused
        else str(usage.connections),
        str(len(usage.members)),
    ]
