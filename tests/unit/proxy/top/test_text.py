"""`top`'s words alone: numbers as an operator reads them, a principal's row as the screen and
the table word it, and the bus's members with how long ago each was heard."""

from __future__ import annotations

from localkafka.inprocess import samples
from protocol.fleet_records import Publication
from proxy.top.text import COLUMNS, bus_state, human, row_cells, table
from proxy.top.view import DEMAND, LiveView, Measure
from quotas.entities import QuotaEntity, QuotaType


def test_numbers_are_worded_with_their_scale() -> None:
    words = [human(v, "B") for v in (0, 0.5, 42, 1_500, 2_500_000, 3e9)]
    assert words == ["0B", "0.50B", "42B", "1.5kB", "2.5MB", "3.0GB"]


def test_a_row_has_a_word_per_column_and_the_table_says_the_same() -> None:
    view = LiveView()
    view.add([samples.sample("ANONYMOUS", "flood", 0, 0, proxy="a", bytes_in=30_000_000)])
    (row,) = view.rows(Measure.PRODUCE)
    cells = row_cells(row, Measure.PRODUCE)
    assert len(cells) == len(COLUMNS)
    assert cells[:3] == ["ANONYMOUS", "flood", "3.0M"] and cells[3] == "-"  # no quota
    heading, line = table(view, "produce")
    assert "produce B/s" in heading and line.split()[:3] == ["ANONYMOUS", "flood", "3.0M"]


def test_the_bus_names_each_member_and_when_it_was_heard() -> None:
    view = LiveView()
    assert bus_state(view, "", 0) == "bus (none): no member heard"
    view.add_publication(Publication("proxy-1:9192/w0/7", 0, 0, [], {}), 1_000)
    assert bus_state(view, "kafka-quota-proxy-fleet.f", 3_500) == (
        "bus kafka-quota-proxy-fleet.f: members proxy-1:9192/w0/7 (2.5 s ago)"
    )


def test_by_demand_a_rate_names_its_measure_and_a_lower_bound_is_marked() -> None:
    view = LiveView(span_ms=10_000)
    held = samples.sample("ANONYMOUS", "consumer", 1, 0, proxy="a", bytes_out=5_000_000)
    view.add([held._replace(window_ms=10_000, held_ms=9_800)])
    view.set_quotas({QuotaType.FETCH: {QuotaEntity(client_id="consumer"): 500_000.0}})
    heading, line = table(view, DEMAND)
    assert heading.split()[:3] == ["user", "client_id", "rate"]
    assert line.split()[:7] == [
        "ANONYMOUS",
        "consumer",
        "500.0k",
        "fetch",
        "500.0k",
        "1.00",
        "20.00+",
    ]
