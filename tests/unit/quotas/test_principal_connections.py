"""Open connections per principal: Kafka's entity precedence over the counts, a reload that
finds the connections already open, and a fleet's members that admit at once, read the bus
late and lose publications without passing the limit together
(quotas/principal_connections.py)."""

from __future__ import annotations

import random

from quotas.entities import DEFAULT, QuotaEntity
from quotas.principal_connections import COLD, PrincipalConnections
from tests.support.connection_simulation import LINE_SHARE, TAGS, Bus

ALICE = ("alice", "app")
BOB = ("bob", "app")


def gauge(limits: dict[QuotaEntity, float]) -> PrincipalConnections:
    connections = PrincipalConnections()
    connections.update_limits(limits)
    return connections


def admitted(connections: PrincipalConnections, client: tuple[str, str], tries: int) -> int:
    """Connections of `client` admitted out of `tries`."""
    count = 0
    for _ in range(tries):
        tags = connections.tags(*client)
        limit = connections.limit(tags)
        if limit is None or connections.room(tags, limit):
            connections.connected(client)
            count += 1
    return count


def test_a_user_limit_holds_every_client_id_of_the_user_and_no_one_else() -> None:
    connections = gauge({QuotaEntity(user="alice"): 3})
    assert admitted(connections, ALICE, 5) == 3
    assert admitted(connections, ("alice", "other-app"), 2) == 0
    assert admitted(connections, BOB, 20) == 20
    connections.closed(ALICE)
    assert admitted(connections, ("alice", "other-app"), 2) == 1


def test_the_most_specific_entity_wins_and_defaults_apply_per_principal() -> None:
    connections = gauge({QuotaEntity(user=DEFAULT): 2, QuotaEntity(user="bob"): 4})
    assert admitted(connections, ALICE, 5) == 2
    assert admitted(connections, ("carol", "app"), 5) == 2  # its own <default> budget
    assert admitted(connections, BOB, 5) == 4


def test_a_limit_set_by_a_reload_finds_the_connections_already_open() -> None:
    connections = gauge({})
    assert admitted(connections, ALICE, 4) == 4
    connections.update_limits({QuotaEntity(user="alice"): 5})
    assert connections.here[("alice", "")] == 4
    assert admitted(connections, ALICE, 3) == 1
    for _ in range(5):
        connections.closed(ALICE)
    assert not connections.here


def test_members_admitting_at_once_never_pass_the_limit_together() -> None:
    """300 connections of one principal through two members, limit 50: each admits its
    floor (12) without a word, then what the claims granted in the bus's order allow."""
    bus = Bus(2, 50)
    for _ in range(12):
        for connections in bus.gauges:
            admitted(connections, ALICE, 300 // 12)
            assert bus.total() <= 50
        bus.sync()
    assert bus.total() == 50
    assert [connections.fleet(TAGS) for connections in bus.gauges] == [50, 50]


def test_members_that_read_the_bus_late_and_lose_publications_never_pass_the_limit() -> None:
    """Random admissions, closes, publications (one in twenty lost), reads as far as a
    random point of the bus and buses opened again at its end, on 2, 3 and 5 members: the
    sum never passes the limit, and a storm comes within two of it."""
    for members in (2, 3, 5):
        for seed in range(60):
            rng = random.Random(seed)
            bus = Bus(members, 50)
            most = 0
            for _ in range(2000):
                index = rng.randrange(members)
                connections, draw = bus.gauges[index], rng.random()
                if draw < 0.55:
                    admitted(connections, ALICE, 1)
                elif draw < 0.6 and connections.here[TAGS]:
                    connections.closed(ALICE)
                elif draw < 0.75:
                    bus.publish(index)
                    if rng.random() < 0.05:  # lost
                        bus.records.pop()
                elif draw < 0.76:
                    bus.skip(index)  # its bus opened again at the end of the topic
                else:
                    bus.follow(index, rng.randint(bus.read[index], len(bus.records)))
                most = max(most, bus.total())
                assert bus.total() <= 50, (members, seed)
            assert most >= 48, (members, seed)


def test_a_principal_on_one_member_reaches_its_whole_limit_once_heard() -> None:
    """The quiet member asks too once it hears a claim, and gives back its unused floor."""
    bus = Bus(2, 50)
    busy = bus.gauges[0]
    admitted_total = 0
    for _ in range(12):
        admitted_total += admitted(busy, ALICE, 50)
        bus.sync()
    assert admitted_total == 50


def test_a_member_cool_under_half_its_floor_returns_to_it_with_cold() -> None:
    bus = Bus(2, 50)
    busy, quiet = bus.gauges
    for _ in range(6):
        admitted(busy, ALICE, 40)
        bus.sync()
    assert busy.here[TAGS] > 40 and quiet.fleet(TAGS) == busy.here[TAGS]
    while busy.here[TAGS] > 2:
        busy.closed(ALICE)
    colds = 0
    for _ in range(30):
        colds += sum(said.ask == COLD for said in bus.publish(0))
        bus.publish(1)
        bus.follow(0)
        bus.follow(1)
    assert colds == 4  # said again, in case one is lost
    assert busy.watched() == 0 and quiet.watched() == 0
    assert admitted(quiet, ALICE, 20) == 12  # its floor, without a word


def test_a_member_gone_takes_its_claim_with_it() -> None:
    bus = Bus(2, 50)
    busy, quiet = bus.gauges
    for _ in range(6):
        admitted(busy, ALICE, 20)
        admitted(quiet, ALICE, 20)
        bus.sync()
    assert bus.total() == 50
    assert admitted(busy, ALICE, 5) == 0
    busy.place(
        LINE_SHARE, "m0", set(), alone=False
    )  # the quiet member is gone, its connections with it
    for _ in range(4):
        admitted(busy, ALICE, 30)
        bus.publish(0)
        bus.follow(0)
    assert busy.here[TAGS] == 50


def test_a_member_that_joins_while_the_others_hold_the_limit_takes_none_of_it() -> None:
    """A member that starts (or restarts) reads the others' asks first: its floor is not
    room they left."""
    bus = Bus(2, 50)
    first, second = bus.gauges
    first.place(LINE_SHARE, "m0", set(), alone=False)  # alone at first
    for _ in range(4):
        admitted(first, ALICE, 50)
        bus.publish(0)
        bus.follow(0)
    assert first.here[TAGS] == 50
    first.place(LINE_SHARE, "m0", {"m1"}, alone=False)
    second.resync()  # it read the last intervals of the bus, not all of it
    bus.follow(1)
    assert admitted(second, ALICE, 20) == 0
    bus.sync()
    assert admitted(second, ALICE, 20) == 0 and bus.total() == 50


def test_a_limit_lowered_by_a_reload_holds_at_once() -> None:
    """A member whose claim was granted under the old limit admits no more than the new
    one leaves, before its next ask."""
    bus = Bus(2, 50)
    for _ in range(4):
        admitted(bus.gauges[0], ALICE, 10)
        bus.sync()
    assert bus.total() < 50 and bus.gauges[0].here[TAGS] > 20
    for connections in bus.gauges:
        connections.update_limits({QuotaEntity(user="alice"): 20})
    assert admitted(bus.gauges[0], ALICE, 40) == admitted(bus.gauges[1], ALICE, 40) == 0
