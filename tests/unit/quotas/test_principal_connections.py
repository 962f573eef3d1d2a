"""Open connections per principal: Kafka's entity precedence over the counts, a reload that
finds the connections already open, and a fleet's members that admit at once without
passing the limit together (quotas/principal_connections.py)."""

from __future__ import annotations

from quotas.entities import DEFAULT, QuotaEntity
from quotas.principal_connections import COLD, PrincipalConnections

ALICE = ("alice", "app")
BOB = ("bob", "app")
LINE_SHARE = 0.5


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


def fleet(members: int, limit: float) -> list[PrincipalConnections]:
    gauges = [gauge({QuotaEntity(user="alice"): limit}) for _ in range(members)]
    names = [f"m{i}" for i in range(members)]
    for name, connections in zip(names, gauges, strict=True):
        connections.place(LINE_SHARE, name, set(names) - {name})
    return gauges


def sync(gauges: list[PrincipalConnections]) -> None:
    """Every member publishes, and every other hears it."""
    names = [f"m{i}" for i in range(len(gauges))]
    counts = {
        name: list(connections.publish(cool_after=8, repeat=4))
        for name, connections in zip(names, gauges, strict=True)
    }
    for name, connections in zip(names, gauges, strict=True):
        for other, published in counts.items():
            if other != name:
                for tags, count in published:
                    connections.receive(other, tags, count)


def test_members_admitting_at_once_never_pass_the_limit_together() -> None:
    """300 connections of one principal through two members, limit 50: an interval's
    admissions are weighted by the members until each hears the other's count."""
    gauges = fleet(2, 50)
    total = 0
    for _ in range(40):
        for connections in gauges:
            total += admitted(connections, ALICE, 300 // 40)
            assert total <= 50
        sync(gauges)
    assert total == 50
    assert [g.fleet(("alice", "")) for g in gauges] == [50, 50]


def test_a_principal_on_one_member_reaches_its_whole_limit_once_heard() -> None:
    gauges = fleet(2, 50)
    busy, _ = gauges
    admitted_total = 0
    for _ in range(12):
        admitted_total += admitted(busy, ALICE, 50)
        sync(gauges)
    assert admitted_total == 50


def test_under_half_the_line_a_principal_is_left_with_a_cold_count() -> None:
    gauges = fleet(2, 50)
    busy, idle = gauges
    admitted(busy, ALICE, 20)
    sync(gauges)
    assert idle.fleet(("alice", "")) == 20  # watched: heard
    for _ in range(19):
        busy.closed(ALICE)
    colds = 0
    for _ in range(1, 20):
        for tags, count in busy.publish(cool_after=8, repeat=4):
            colds += count == COLD
            idle.receive("m0", tags, count)
    assert colds == 4  # said again, in case one is lost
    assert busy.watched() == 0
    assert idle.fleet(("alice", "")) == 0


def test_a_member_gone_takes_its_count_with_it() -> None:
    gauges = fleet(2, 50)
    busy, quiet = gauges
    # past its line (13), busy takes half the room left by what quiet may hold unheard
    assert admitted(busy, ALICE, 30) == 24
    sync(gauges)
    assert admitted(quiet, ALICE, 10) == 10
    sync(gauges)
    assert busy.fleet(("alice", "")) == 34
    busy.place(LINE_SHARE, "m0", set())
    assert list(busy.publish(cool_after=8, repeat=4)) == [(("alice", ""), 24.0)]
    assert busy.fleet(("alice", "")) == 24
    assert admitted(busy, ALICE, 30) == 26  # alone now


def test_far_from_the_limit_no_turn_is_waited_for_near_it_every_one_is() -> None:
    gauges = fleet(2, 50)
    busy, other = gauges
    assert (admitted(busy, ALICE, 20), admitted(other, ALICE, 10)) == (20, 10)
    sync(gauges)
    list(busy.publish(cool_after=8, repeat=4))  # the other has not reported since
    # a room of 20, less the part the unheard member may have taken, split: 5 more
    assert admitted(busy, ALICE, 10) == 5
    sync(gauges)
    assert admitted(other, ALICE, 10) == 7  # its turn, heard: half of a room of 15
    list(other.publish(cool_after=8, repeat=4))
    # a room of 8 less the unheard part leaves 4: within the last two per member, not its
    # turn until the busy member reports again
    assert admitted(other, ALICE, 1) == 0
    sync(gauges)
    # its turn, and the busy member's count held still: all of the room, to the limit
    assert admitted(other, ALICE, 10) == 8
    assert sum(gauge.here[("alice", "")] for gauge in gauges) == 50
