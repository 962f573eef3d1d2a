"""The full screen of `kafka-quota-proxy top`, on Textual (Textualize's terminal UI library:
a table widget that redraws only what changed, key bindings, an input line, and it runs in
any terminal tmux can drive). Every second it reads what arrived (proxy/top/feed.py) and
redraws the ranking (proxy/top/view.py). The only module of the house that imports Textual:
the `top` extra.

Keys: s / S the next / previous sort (each measure, then demand), d by demand, / a filter
on names, p pause, enter one principal's detail (what applies to it and why, as `explain`
words it, its APIs, the members serving it, its client addresses, its user's client-ids and
a sparkline of its history), escape back, q quit.
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Input, Static

from proxy.control.own_topic import UNREACHABLE
from proxy.observability.explaining import brief, store_sources
from proxy.top.feed import LiveFeed, feed_view, now_ms, view_of
from proxy.top.text import COLUMNS, bus_state, human, row_cells
from proxy.top.view import DEMAND, MEASURES, SORTS, Measure, UserClient, ranked
from quotas.explain import Query, explain
from quotas.settings import QuotaConfig

_SPARK = "▁▂▃▄▅▆▇█"
#: refreshes of history kept per principal, for its sparkline
_HISTORY = 60
#: rows drawn: the ranking is over every principal, a screen shows the first ones
SHOWN_ROWS = 100
#: topics under a quota shown beneath the principals, the busiest first
TOPIC_ROWS = 8
#: a user's client-ids named in a principal's detail, the busiest first (ANONYMOUS may
#: have thousands)
DETAIL_CLIENT_IDS = 10
#: the longest a refresh reads before it draws: a backlog is read over a few refreshes
READ_BUDGET_S = 0.5


def _heading(sort: str) -> str:
    return (
        "demand (share of the quota that holds it back most)"
        if sort == DEMAND
        else (MEASURES[sort].heading)
    )


def sparkline(values: list[float]) -> str:
    top = max(values, default=0.0)
    if top <= 0:
        return _SPARK[0] * len(values)
    return "".join(_SPARK[min(int(v / top * (len(_SPARK) - 1)), len(_SPARK) - 1)] for v in values)


class TopApp(App[int]):
    TITLE = "kafka-quota-proxy top"
    CSS = (
        "#header { height: auto; } #rows { height: 1fr; }"
        " #topics { height: auto; max-height: 10; }"
        " #detail { height: auto; } Input { display: none; }"
    )
    BINDINGS: ClassVar = [
        Binding("s", "sort(1)", "next sort"),
        Binding("S", "sort(-1)", "previous sort", show=False),
        Binding("d", "demand", "by demand"),
        Binding("slash", "filter", "filter"),
        Binding("p", "pause", "pause"),
        Binding("escape", "close_detail", "back", show=False),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, feed: LiveFeed, args: argparse.Namespace, refresh_s: float = 1.0) -> None:
        super().__init__()
        self.feed = feed
        self.refresh_s = refresh_s
        self.args = args
        self.view = view_of(feed)
        self.sort: str = args.sort
        #: the measure each principal shown is ranked by (under DEMAND, each its own)
        self.measure_of: dict[UserClient, Measure] = {}
        self.name_filter = args.filter
        self.paused = False
        self.detail: UserClient | None = None
        self.history: dict[UserClient, deque[float]] = {}
        self.shown: list[UserClient] = []
        self.refreshing = False

    def compose(self) -> ComposeResult:
        yield Static("reading the cluster...", id="header")
        yield DataTable(id="rows", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="topics", cursor_type="none")
        yield Static("", id="detail")
        yield Input(placeholder="filter on user or client_id, enter to apply", id="filter")
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#topics", DataTable).add_columns("topic", "rate", "quota", "share")
        table = self.query_one("#rows", DataTable)
        table.add_columns(*COLUMNS)
        try:
            await self.feed.start(int(time.time() * 1000 - self.feed.read_back_s * 1000))
        except UNREACHABLE as exc:
            self.exit(2, message=f"the cluster cannot be read: {exc!r}")
            return
        await self.refresh_view()
        self.set_interval(self.refresh_s, self.refresh_view)

    async def refresh_view(self) -> None:
        """Read what arrived (a backlog a fetch at a time, for up to half a second), then
        rank and draw once; a refresh asked for while one runs is that one."""
        if self.refreshing:
            return
        self.refreshing = True
        try:
            await self._refresh()
        finally:
            self.refreshing = False

    async def _refresh(self) -> None:
        deadline = time.monotonic() + READ_BUDGET_S
        timeout_ms = 200
        while True:
            update = await self.feed.poll(timeout_ms=timeout_ms)
            feed_view(self.view, self.feed, update)
            if not update.samples or time.monotonic() > deadline:
                break
            timeout_ms = 0
        if self.paused:  # the numbers stay as they were; the header says so
            self._draw_header(len(self.shown))
            return
        ranking = ranked(self.view, self.sort, self.name_filter)
        rows = ranking[:SHOWN_ROWS]
        # history for the principals shown and the one in detail: the others' is dropped
        history = {}
        for row, measure in rows:
            kept = history[row.principal] = self.history.get(row.principal) or deque(
                maxlen=_HISTORY
            )
            kept.append(row.usage.rate(measure))
        self.measure_of = {row.principal: measure for row, measure in rows}
        if self.detail in self.history and self.detail not in history:
            history[self.detail] = self.history[self.detail]
        self.history = history
        self._draw_header(len(ranking))
        self._draw_topics()
        table = self.query_one("#rows", DataTable)
        # clear() puts the cursor and the scroll back at the top: where the person left
        # them, they stay, so a row can be walked to and opened while the ranks update
        cursor, scrolled = table.cursor_row, table.scroll_y
        table.clear()
        self.shown = [row.principal for row, _ in rows]
        for row, measure in rows:
            table.add_row(*row_cells(row, measure, named=self.sort == DEMAND))
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1), scroll=False)
            table.scroll_y = scrolled
        self._draw_detail()

    def _draw_topics(self) -> None:
        topics = self.query_one("#topics", DataTable)
        if self.sort == DEMAND:  # a topic's demand is not known: its use is
            topics.display = False
            return
        rows = self.view.topic_rows(MEASURES[self.sort], now_ms())[:TOPIC_ROWS]
        topics.display = bool(rows)
        topics.clear()
        for row in rows:
            topics.add_row(
                row.topic,
                human(row.rate),
                "-" if row.quota is None else human(row.quota),
                "-" if row.share is None else f"{row.share:.2f}",
            )

    def _draw_header(self, count: int) -> None:
        totals = {m: sum(u.rate(m) for u in self.view.usage().values()) for m in Measure}
        lines = [
            f"sort: {_heading(self.sort)} | principals: {count}"
            + (f" | filter: {self.name_filter}" if self.name_filter else "")
            + (" | PAUSED" if self.paused else ""),
            "cluster: " + "  ".join(f"{m.heading} {human(totals[m])}" for m in Measure),
            bus_state(self.view, self.feed.fleet_topic, now_ms())
            + (f" | {'; '.join(self.feed.problems)}" if self.feed.problems else ""),
        ]
        self.query_one("#header", Static).update("\n".join(lines))

    def _draw_detail(self) -> None:
        detail = self.query_one("#detail", Static)
        principal = self.detail
        if principal is None:
            detail.update("")
            return
        measure = self.measure_of.get(principal, Measure.PRODUCE)
        usage_of = self.view.usage()
        usage = usage_of.get(principal)
        apis = (
            ""
            if usage is None
            else ", ".join(f"{api} {rate:.1f}/s" for api, rate in sorted(usage.apis.items()))
        )
        members = "" if usage is None else ", ".join(sorted(usage.members))
        addresses = "" if usage is None else ", ".join(sorted(usage.addresses))
        # the user's client-ids, busiest first: a user quota charges them together
        clients = sorted(
            ((-u.rate(measure), p.client_id) for p, u in usage_of.items()
             if p.user == principal.user),
        )  # fmt: skip
        client_ids = ", ".join(
            f"{c or '(none)'} {human(-rate)}" for rate, c in clients[:DETAIL_CLIENT_IDS]
        ) + (
            f" and {len(clients) - DETAIL_CLIENT_IDS} more"
            if len(clients) > DETAIL_CLIENT_IDS
            else ""
        )
        history = list(self.history.get(principal, ()))
        store = self.feed.store
        answer = explain(
            Query(principal.user, principal.client_id),
            QuotaConfig(self.feed.settings, store.limits()),
            store_sources(store, self.feed.config_file or "the config file"),
        ).as_json()
        applies = "\n".join(f"  {line}" for line in brief(answer)) or "  no quota applies"
        detail.update(
            f"{principal}\nwhat applies (kafka-quota-proxy explain --user"
            f" {principal.user!r} --client-id {principal.client_id!r}):\n{applies}\n"
            f"APIs: {apis}\nserved by: {members}\nfrom: {addresses}\n"
            f"client-ids of user {principal.user} ({measure.heading}): {client_ids}\n"
            f"{measure.heading}: {sparkline(history)}"
        )

    def action_sort(self, step: int) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + step) % len(SORTS)]
        self.history.clear()
        self.call_later(self.refresh_view)

    def action_demand(self) -> None:
        self.sort = DEMAND
        self.history.clear()
        self.call_later(self.refresh_view)

    def action_filter(self) -> None:
        box = self.query_one(Input)
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.name_filter = event.value
        event.input.display = False
        self.query_one("#rows", DataTable).focus()
        self.call_later(self.refresh_view)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.call_later(self.refresh_view)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if 0 <= event.cursor_row < len(self.shown):
            self.detail = self.shown[event.cursor_row]
            self._draw_detail()

    def action_close_detail(self) -> None:
        self.detail = None
        self._draw_detail()

    async def on_unmount(self) -> None:
        await self.feed.close()
