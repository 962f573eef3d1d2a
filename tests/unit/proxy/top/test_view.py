"""`top`'s view of the fleet: each proxy's latest whole window, summed per principal, ranked,
beside the quota each measure is held to."""

from __future__ import annotations

import pytest

from localkafka.inprocess import samples
from protocol.fleet_records import Publication, Totals
from protocol.quota_records import read_record
from proxy.top.view import DEMAND, LiveView, Measure, UserClient, ranked, snapshot
from quotas.entities import DEFAULT, KAFKA_QUOTA_TYPES, QuotaEntity, QuotaType
from quotas.usage_samples import UsageSample

WINDOW_MS = samples.INTERVAL_MS


def sample(
    proxy: str,
    client_id: str,
    api: str = "Produce",
    start: int = 0,
    bytes_in: int = 0,
    bytes_out: int = 0,
    throttle: int = 0,
    address: str = "10.0.0.1",
) -> UsageSample:
    """localkafka/inprocess/samples.py's sample, its window starting `start` ms into the epoch."""
    made = samples.sample(
        "ANONYMOUS", client_id, 0 if api == "Produce" else 1, 0, proxy=proxy, requests=10,
        bytes_in=bytes_in, bytes_out=bytes_out, request_time_ms=5.0, throttle_time_ms=throttle,
        throttled_requests=1 if throttle else 0, client_ip=address,
    )  # fmt: skip
    return made._replace(window_start_ms=start)


def test_a_principal_served_by_two_proxies_is_summed_from_each_ones_latest_window() -> None:
    view = LiveView()
    view.add([sample("a", "flood", start=0, bytes_in=1_000_000)])
    view.add(
        [
            sample("a", "flood", start=WINDOW_MS, bytes_in=30_000_000, throttle=900),
            sample("b", "flood", start=WINDOW_MS + 3000, bytes_in=20_000_000, address="10.0.0.2"),
            sample("b", "quiet", start=WINDOW_MS + 3000, bytes_in=100_000),
            sample("a", "flood", start=0, bytes_in=999),  # late, of a window already replaced
        ]
    )
    usage = view.usage()
    flood = usage[UserClient("ANONYMOUS", "flood")]
    assert flood.rate(Measure.PRODUCE) == 5_000_000.0  # 50 MB over 10 s
    assert flood.members == {"a", "b"} and flood.addresses == {"10.0.0.1", "10.0.0.2"}
    assert flood.throttle_time_ms == 900 and flood.throttled_requests == 1
    assert flood.rate(Measure.REQUEST) == pytest.approx(0.1)  # 2 x 5 ms per 10 s: 0.1 %
    assert view.proxies() == {"a": WINDOW_MS, "b": WINDOW_MS + 3000}


def test_rows_are_ranked_by_the_chosen_measure_beside_their_quota() -> None:
    view = LiveView()
    view.add(
        [
            sample("a", "flood", bytes_in=30_000_000),
            sample("a", "reader", api="Fetch", bytes_out=90_000_000),
            sample("a", "quiet", bytes_in=10_000),
        ]
    )
    view.set_quotas(
        {
            QuotaType.PRODUCE: {
                QuotaEntity(client_id="flood"): 1_000_000.0,
                QuotaEntity(client_id=DEFAULT): 2_000_000.0,
                QuotaEntity(topic="t"): 5.0,  # a topic's quota is no principal's
            }
        }
    )
    produce = view.rows(Measure.PRODUCE)
    assert [row.principal.client_id for row in produce] == ["flood", "quiet", "reader"]
    assert (produce[0].quota, produce[0].share) == (1_000_000.0, 3.0)
    assert (produce[1].quota, produce[1].share) == (2_000_000.0, 0.0005)
    fetch = view.rows(Measure.FETCH)
    assert fetch[0].principal.client_id == "reader" and fetch[0].quota is None
    assert [r.principal.client_id for r in view.rows(Measure.PRODUCE, "qui")] == ["quiet"]


def test_a_snapshot_holds_the_numbers_the_screen_shows() -> None:
    view = LiveView()
    view.add([sample("a", "flood", bytes_in=30_000_000, throttle=1200)])
    view.members = {"a": 1, "b": 2}
    shown = snapshot(view, "produce", 0)
    assert shown["members"] == ["a", "b"] and shown["sort"] == "produce"
    principals = shown["principals"]
    assert isinstance(principals, list)
    (row,) = principals
    assert row["rates"]["produce"] == 3_000_000.0 and row["throttle_time_ms"] == 1200


def test_a_held_principal_s_demand_is_its_use_over_the_time_it_was_not_held() -> None:
    """Held half the span on one proxy, not at all on the other: what it got there is what
    it asks there, and what it got on the first is half what it asks."""
    view = LiveView(span_ms=10_000)
    view.add(
        [
            sample("a", "flood", start=0, bytes_in=5_000_000)._replace(
                window_ms=10_000, held_ms=5_000
            ),
            # Fetch and Produce in one window: its hold counted once
            sample("a", "flood", api="Fetch", start=0, bytes_out=100)._replace(
                window_ms=10_000, held_ms=5_000
            ),
            sample("b", "flood", start=0, bytes_in=1_000_000)._replace(window_ms=10_000),
        ]
    )
    view.set_quotas({QuotaType.PRODUCE: {QuotaEntity(client_id="flood"): 500_000.0}})
    [row] = view.rows(Measure.PRODUCE)
    assert row.usage.rate(Measure.PRODUCE) == 600_000.0
    assert row.usage.demand[Measure.PRODUCE.index] == 1_100_000.0  # 1 MB/s + 100 kB/s
    assert (row.share, row.demand, row.usage.held_ms) == (1.2, 2.2, 5_000)
    assert not row.usage.demand_bounded


def test_by_demand_each_principal_is_ranked_at_the_quota_holding_it_back_most() -> None:
    """`--sort demand`: a consumer held on its fetches ranks above a producer held less on
    its produce, each at its own measure; a principal no quota applies to is not ranked."""
    view = LiveView(span_ms=10_000)
    view.add(
        [
            sample("a", "producer", start=0, bytes_in=5_000_000)._replace(
                window_ms=10_000, held_ms=2_000
            ),
            sample("a", "consumer", api="Fetch", start=0, bytes_out=5_000_000)._replace(
                window_ms=10_000, held_ms=9_800
            ),
            sample("a", "free", start=0, bytes_in=90_000_000)._replace(window_ms=10_000),
        ]
    )
    view.set_quotas(
        {
            QuotaType.PRODUCE: {QuotaEntity(client_id="producer"): 500_000.0},
            QuotaType.FETCH: {QuotaEntity(client_id="consumer"): 500_000.0},
        }
    )
    rows = ranked(view, DEMAND)
    assert [(r.row.principal.client_id, r.measure) for r in rows] == [
        ("consumer", Measure.FETCH),
        ("producer", Measure.PRODUCE),
    ]
    assert rows[0].row.demand == pytest.approx(20.0) and rows[0].row.usage.demand_bounded
    assert rows[1].row.demand == pytest.approx(1.25)
    shown = snapshot(view, DEMAND, 0)
    assert [(p["client_id"], p["measure"]) for p in shown["principals"]] == [  # type: ignore[attr-defined]
        ("consumer", "fetch"),
        ("producer", "produce"),
    ]
    assert shown["topics"] == []


def test_a_principal_held_all_the_time_asks_at_most_twenty_times_what_it_got() -> None:
    view = LiveView(span_ms=10_000)
    view.add([sample("a", "flood", bytes_in=1_000_000)._replace(held_ms=12_000)])
    [row] = view.rows(Measure.PRODUCE)
    assert row.usage.demand[Measure.PRODUCE.index] == pytest.approx(2_000_000.0)
    assert row.usage.demand_bounded


def test_a_principal_held_on_its_fetches_asks_no_more_to_produce() -> None:
    view = LiveView(span_ms=10_000)
    view.add(
        [
            sample("a", "app", bytes_in=1_000_000)._replace(window_ms=10_000),
            sample("a", "app", api="Fetch", bytes_out=1_000_000)._replace(
                window_ms=10_000, held_ms=5_000
            ),
        ]
    )
    usage = view.usage()[UserClient("ANONYMOUS", "app")]
    assert usage.demand[Measure.PRODUCE.index] == 100_000.0
    assert usage.demand[Measure.FETCH.index] == 200_000.0


def test_a_window_reaching_back_past_the_span_counts_its_whole_length() -> None:
    """Windows of 3 s over a 10 s span: the oldest one kept began 12 s before the newest
    ended, and its use is spread over those 12 s, not 10."""
    view = LiveView(span_ms=10_000)
    view.add(
        sample("a", "app", start=start, bytes_in=300_000)._replace(window_ms=3_000, held_ms=1_500)
        for start in range(0, 15_000, 3_000)
    )
    usage = view.usage()[UserClient("ANONYMOUS", "app")]
    assert usage.rate(Measure.PRODUCE) == 100_000.0
    assert usage.demand[Measure.PRODUCE.index] == 200_000.0  # held half the time


def test_connections_are_each_proxys_latest_count_per_client_address() -> None:
    view = LiveView(span_ms=3 * WINDOW_MS)
    view.add(
        [
            sample("a", "app", start=0)._replace(connections=9),  # older: replaced
            sample("a", "app", start=WINDOW_MS)._replace(connections=3),
            sample("a", "app", api="Fetch", start=WINDOW_MS)._replace(connections=3),
            sample("a", "app", start=0, address="10.0.0.2")._replace(connections=2),
            sample("b", "app", start=WINDOW_MS)._replace(connections=4),
        ]
    )
    assert view.usage()[UserClient("ANONYMOUS", "app")].connections == 3 + 2 + 4


def test_a_sample_is_read_back_as_written_and_a_foreign_one_is_refused() -> None:
    written = sample("a", "flood", bytes_in=7)._replace(
        connections=3, held_ms=250, connections_refused=4
    )
    assert UsageSample.from_json(written.to_json()) == written
    three = (
        written.to_json().replace('"schema":4', '"schema":3')
        .replace(',"connections_refused":4', "")
    )  # fmt: skip
    assert UsageSample.from_json(three) == written._replace(schema=3, connections_refused=0)
    two = (
        three.replace('"schema":3', '"schema":2').replace(',"connections":3', "")
        .replace(',"held_ms":250', "")
    )  # fmt: skip
    assert UsageSample.from_json(two) == written._replace(
        schema=2, connections=0, held_ms=0, connections_refused=0
    )
    one = two.replace('"schema":2', '"schema":1').replace(',"client_ip":"10.0.0.1"', "")
    assert UsageSample.from_json(one).client_ip == ""
    for text in (
        '{"schema":5}',
        "[]",
        written.to_json().replace('"user":"ANONYMOUS"', '"user":null'),
        # a field of version 4 is not optional in version 4
        written.to_json().replace(',"connections_refused":4', ""),
    ):
        with pytest.raises(ValueError):
            UsageSample.from_json(text)


def test_short_windows_are_averaged_over_the_span() -> None:
    """A throttled client's use comes in bursts: one 1 s window swings, ten do not."""
    view = LiveView(span_ms=5_000)
    bursts = [400_000, 0, 0, 300_000, 300_000, 0, 500_000]  # bytes per 1 s window
    view.add(
        sample("a", "flood", start=index * 1000, bytes_in=size)._replace(window_ms=1000)
        for index, size in enumerate(bursts)
    )
    # the last five windows: 300 + 300 + 0 + 500 kB and an empty one, over 5 s
    assert view.usage()[UserClient("ANONYMOUS", "flood")].rate(Measure.PRODUCE) == 220_000.0


def test_a_window_without_samples_counts_as_a_window_without_use() -> None:
    view = LiveView(span_ms=5_000)
    view.add(
        sample("a", "flood", start=start, bytes_in=500_000)._replace(window_ms=1000)
        for start in (1000, 4000)  # nothing in the windows at 2 and 3 s
    )
    assert view.usage()[UserClient("ANONYMOUS", "flood")].rate(Measure.PRODUCE) == 250_000.0


def test_topics_under_a_quota_are_ranked_from_the_buss_publications() -> None:
    """Each member publishes the bytes its topic sensors charged; the view sums them over
    the span, on the reader's clock."""
    view = LiveView(span_ms=5_000)
    view.set_quotas({QuotaType.PRODUCE: {QuotaEntity(topic="clicks"): 1_000_000.0,
                                         QuotaEntity(topic=DEFAULT): 5_000_000.0}})  # fmt: skip
    produce, fetch = len(KAFKA_QUOTA_TYPES), len(KAFKA_QUOTA_TYPES) + 1
    for second in range(10):
        for member in ("a", "b"):
            uses = [(produce, "clicks", "", 600_000.0), (produce, "views", "", 50_000.0),
                    (fetch, "clicks", "", 1.0), (0, "app", "", 9e9)]  # fmt: skip
            view.add_publication(Publication(member, second, 0, uses, {}), second * 1000)
    rows = view.topic_rows(Measure.PRODUCE, 9_000)
    assert [(r.topic, r.rate, r.quota) for r in rows] == [
        ("clicks", 1_200_000.0, 1_000_000.0),  # 2 members x 600 kB a second
        ("views", 100_000.0, 5_000_000.0),  # the default topic's quota
    ]
    assert rows[0].share == 1.2 and set(view.members) == {"a", "b"}
    assert view.topic_rows(Measure.REQUEST, 9_000) == []


def test_a_fleet_of_owners_topics_come_from_the_totals_and_its_members_from_the_group() -> None:
    """An owner's totals add up every member's use of its partition's topics; an idle
    member publishes nothing, and the owners' group names it."""
    view = LiveView(span_ms=5_000)
    view.set_quotas({QuotaType.PRODUCE: {QuotaEntity(topic="clicks"): 1_000_000.0}})
    produce = len(KAFKA_QUOTA_TYPES)
    for second in range(10):
        uses = [(produce, "clicks", "", 1_200_000.0), (0, "app", "", 9e9)]
        view.add_totals(Totals("a", 7, 2, second, {0: 1, 1: 1}, uses, []), second * 1000)
    view.add_members(["a", "b", "idle"], 9_000)
    rows = view.topic_rows(Measure.PRODUCE, 9_000)
    assert [(r.topic, r.rate) for r in rows] == [("clicks", 1_200_000.0)]
    assert set(view.members) == {"a", "b", "idle"}


def test_a_proxy_gone_quiet_and_a_member_gone_silent_are_forgotten() -> None:
    view = LiveView(span_ms=10_000)
    view.add([sample("p1", "bulk", start=0, bytes_in=50_000_000)])
    view.add([sample("p2", "app", start=600_000, bytes_in=1_000)])
    view.add_publication(Publication("m1", 0, 0, [], {}), 1_000)
    view.add_publication(Publication("m2", 0, 0, [], {}), 9_000)
    view.expire(wall_ms=610_000, received_ms=10_000)
    assert set(view.usage()) == {UserClient("ANONYMOUS", "app")}  # p1 wrote nothing since
    assert set(view.members) == {"m2"}


def test_the_span_covered_is_the_proxys_own_not_the_oldest_sample_in_it() -> None:
    """Another principal's old sample does not stretch the time a burst is averaged over."""
    alone, beside = LiveView(span_ms=10_000), LiveView(span_ms=10_000)
    burst = sample("a", "x", start=9_000, bytes_in=10_000)._replace(window_ms=1000)
    alone.add([burst])
    beside.add([sample("a", "y", start=0, bytes_in=1)._replace(window_ms=1000), burst])
    x = UserClient("ANONYMOUS", "x")
    assert alone.usage()[x].rate(Measure.PRODUCE) == 10_000.0  # its only second read
    assert beside.usage()[x].rate(Measure.PRODUCE) == 1_000.0  # ten seconds read, one used


def test_principals_that_share_a_sensor_share_its_quota() -> None:
    """Kafka charges a user's client-ids to the user's quota together: each row's share is
    the sensor's."""
    view = LiveView()
    view.add([sample("a", "c1", bytes_in=6_000), sample("a", "c2", bytes_in=6_000)])
    view.set_quotas({QuotaType.PRODUCE: {QuotaEntity(user="ANONYMOUS"): 1_000.0}})
    assert [row.share for row in view.rows(Measure.PRODUCE)] == [1.2, 1.2]


def test_records_nobody_could_have_meant_are_refused_as_values() -> None:
    for text in (b"[" * 100_000, b"[]", b"7"):
        with pytest.raises(ValueError):
            UsageSample.from_json(text)
    for key, value in ((b'{"entity":[["user","a"]],"key":"k"}', b"[]"), (b"[" * 100_000, b"")):
        with pytest.raises(ValueError):
            read_record(key, value)
