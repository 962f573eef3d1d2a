"""Owners (proxy/enforcement/fleet_owners.py): what a member reads of the totals is the
others' use and standings, to the byte, however the bus delays, reorders between partitions
or refuses contributions and totals. The fidelity through owners is
tests/support/fleet_simulation.py's (Bus(owners=True))."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from protocol.fleet_records import (
    MOST_FOLDED,
    VERSION,
    Publication,
    Totals,
    Use,
    contribution_key,
    decode_member,
    decode_totals,
    encode_member,
    encode_totals,
    read_contribution_key,
)
from proxy.enforcement.fleet import FleetMember
from proxy.enforcement.fleet_membership import OLDER_FOR_MS, Membership
from proxy.enforcement.fleet_owners import (
    ANSWER_WITHIN_MS,
    OWNERS_MARK,
    Fold,
    Owning,
    Routes,
    owners,
    partition_of,
    through_owners,
)
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig

PARTITIONS = 4
#: the partitions of test_through_rebalances_every_member_ends_holding_the_others_standings
PARTITIONS_OF_TEST = 4


#: a publication's sequence, which only ever grows (an owner folds a member's once)
_SEQUENCES = itertools.count(1)


def publication(uses: list[Use], standings: list[Use] | None = None) -> Publication:
    return Publication("m", next(_SEQUENCES), 0, uses, {}, standings)


def test_totals_round_trip_with_how_many_of_each_member_they_fold() -> None:
    totals = Totals(
        "member-7",
        5,
        3,
        912,
        {0: 1, 3: 3, 19: 2},
        [(0, "alice", "app", 1.5), (2, "", "app", -0.25)],
        [(0, "alice", "app", 100.0), (1, "bob", "", 0.0)],
    )
    assert decode_totals(encode_totals(totals)) == totals
    with pytest.raises(ValueError, match="contributions of one member"):
        encode_totals(totals._replace(folded={1: MOST_FOLDED + 1}))
    with pytest.raises(ValueError, match="owner's totals"):
        decode_totals(encode_totals(totals)[:-3])


def test_every_quota_type_of_a_principal_falls_in_one_partition() -> None:
    routes = Routes(0, PARTITIONS)
    uses = [(kind, "alice", "app", 1.0) for kind in range(3)]
    broadcast, sends = routes.route(publication(uses), 0)
    assert broadcast is None
    assert list(sends) == [partition_of("alice", "app", PARTITIONS)]
    assert sends[partition_of("alice", "app", PARTITIONS)].uses == uses


def test_what_is_not_a_use_and_producer_ids_go_to_every_member() -> None:
    routes = Routes(0, PARTITIONS)
    counts = (254, "alice", "", 3.0)
    sent = publication([(0, "alice", "app", 1.0), counts])._replace(producer_ids={"alice": [7]})
    broadcast, sends = routes.route(sent, 0)
    assert broadcast is not None
    assert broadcast.uses == [counts] and broadcast.producer_ids == {"alice": [7]}
    assert [use for each in sends.values() for use in each.uses] == [(0, "alice", "app", 1.0)]


def test_an_owner_that_folded_nothing_publishes_nothing() -> None:
    fold = Fold("member-0", 1, 0)
    first = fold.totals()  # a new owner's first totals, which name every standing it holds
    assert first is not None and first.round == 0 and not first.folded
    assert fold.totals() is None
    fold.add(2, publication([(0, "alice", "app", 4.0)]))
    totals = fold.totals()
    assert totals is not None and totals.folded == {2: 1}
    assert fold.totals() is None


def test_a_member_keeps_at_most_most_folded_unfolded_and_the_rest_waits() -> None:
    routes = Routes(0, 1)
    for now in range(MOST_FOLDED + 2):
        _, sends = routes.route(publication([(0, "alice", "app", 1.0)]), now)
        assert bool(sends) == (now < MOST_FOLDED)
    fold = Fold("member-1", 0, 0)
    fold.add(0, publication([(0, "alice", "app", 1.0)]))
    totals = fold.totals()
    assert totals is not None
    assert routes.others(totals, 10) == ([], [])
    assert routes.delay_ms == 10
    # one unfolded place is free: the two uses that waited go out as one contribution
    _, sends = routes.route(publication([]), 11)
    assert sends[0].uses == [(0, "alice", "app", 2.0)]


@pytest.mark.parametrize("seed", range(20))
def test_each_member_reads_exactly_the_others_use_and_standings(seed: int) -> None:
    """Three members, two partitions owned by members 0 and 1; contributions and totals
    reach their readers late and in any order across partitions, and the bus refuses some
    of each (their writers are told; some contributions it wrote after all). Every
    member's reading of the others, summed, is what the others sent: uses to the byte, and
    each member's standing as it last named it."""
    chance = random.Random(seed)
    members, partitions = 3, 2
    routes = [Routes(index, partitions) for index in range(members)]
    folds = {
        partition: Fold(f"member-{partition}", partition, 0) for partition in range(partitions)
    }
    principals = [("", f"app-{index}") for index in range(6)]
    sent_uses = [0.0] * members
    standing_of: list[dict[tuple[str, str], float]] = [{} for _ in range(members)]
    # per member: the others' uses read, and the standings it holds for the others
    read_uses = [0.0] * members
    read_standings: list[dict[tuple[int, tuple[str, str]], float]] = [{} for _ in range(members)]
    # what is on its way: (due, order, what its reader does with it, at what time)
    on_the_bus: list[tuple[int, int, Callable[[int], None]]] = []
    order = 0
    #: the last due time on each partition's way to each reader: a partition keeps order
    last_due: dict[tuple[int, int, int], int] = {}

    def due(kind: int, source: int, target: int, now: int) -> int:
        at = max(now + chance.randint(0, 3), last_due.get((kind, source, target), 0))
        last_due[kind, source, target] = at
        return at

    def folding(writer: int, partition: int, contribution: Publication) -> Callable[[int], None]:
        return lambda now: folds[partition].add(writer, contribution)

    def reading(reader: int, totals: Totals) -> Callable[[int], None]:
        def read(now: int) -> None:
            uses, standings = routes[reader].others(totals, now)
            read_uses[reader] += sum(use[3] for use in uses)
            for _, user, client_id, value in standings:
                read_standings[reader][totals.partition, (user, client_id)] = value

        return read

    for now in range(400):
        for index in range(members):
            uses, standings = [], []
            for user, client_id in chance.sample(principals, 3) if now < 300 else ():
                if now < 200:
                    value = float(chance.randint(1, 100))
                    uses.append((0, user, client_id, value))
                    sent_uses[index] += value
                if chance.random() < 0.2:
                    standing = float(chance.choice([0, 10, 20]))
                    standings.append((0, user, client_id, standing))
                    standing_of[index][user, client_id] = standing
            _, sends = routes[index].route(publication(uses, standings), now)
            for partition, contribution in sends.items():
                refused = chance.random()
                if refused < 0.15:
                    # told it failed: not written, or (a time-out) written after all
                    routes[index].lost(partition)
                    if refused >= 0.05:
                        continue
                order += 1
                at = due(0, index, partition, now)
                on_the_bus.append((at, order, folding(index, partition, contribution)))
        for partition, fold in folds.items():
            if chance.random() < 0.5:
                continue  # the owner's interval is not the members'
            totals = fold.totals()
            if totals is None:
                continue
            if chance.random() < 0.1:
                fold.lost(totals)
                continue
            for reader in range(members):
                order += 1
                at = due(1, partition, reader, now)
                on_the_bus.append((at, order, reading(reader, totals)))
        # delivered in order per partition (a partition keeps its records' order)
        on_the_bus.sort(key=lambda item: (item[0], item[1]))
        due_now = [item for item in on_the_bus if item[0] <= now]
        on_the_bus = [item for item in on_the_bus if item[0] > now]
        for _, _, action in due_now:
            action(now)
    for reader in range(members):
        others = [index for index in range(members) if index != reader]
        assert read_uses[reader] == pytest.approx(sum(sent_uses[i] for i in others))
        expected = {
            principal: sum(standing_of[i].get(principal, 0.0) for i in others)
            for principal in principals
        }
        held = {principal: value for (_, principal), value in read_standings[reader].items()}
        for principal in principals:
            assert held.get(principal, 0.0) == pytest.approx(expected[principal])


def test_totals_of_another_generation_are_read_whole() -> None:
    """Whole: this member's own use in them, if any, counts twice, on the safe side; an
    older owner's standings not at all (its successor names them), a newer one's as the
    others' (it holds none of this member's yet)."""
    routes = Routes(0, 1, generation=1)
    use, standing = (0, "alice", "app", 5.0), (0, "alice", "app", 3.0)
    old = Totals("member-1", 0, 0, 7, {0: 1}, [use], [standing])
    assert routes.others(old, 0) == ([use], [])
    assert routes.others(old._replace(generation=2), 0) == ([use], [standing])


def test_a_rebalance_sends_every_unfolded_contribution_again_to_the_new_owners() -> None:
    routes = Routes(0, 1)
    for now in (0, 1):
        routes.route(publication([(0, "alice", "app", 2.0)], [(0, "alice", "app", 1.0)]), now)
    assert routes.oldest_unfolded_ms() == 0
    routes.rebalance(1, 1)
    assert routes.oldest_unfolded_ms() is None
    _, sends = routes.route(publication([]), 5)
    assert sends[0].uses == [(0, "alice", "app", 4.0)]
    assert sends[0].standings == [(0, "alice", "app", 1.0)]
    assert routes.oldest_unfolded_ms() == 5


def owning(name: str, place: int, partitions: int = 1) -> tuple[Owning, QuotaEngine]:
    limits = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0}}
    member = Owning(FleetMember(name, 250), place, partitions)
    return member, QuotaEngine(QuotaConfig(limits=limits))


def test_a_contribution_of_a_generation_the_owner_has_not_reached_waits_for_it() -> None:
    owner, _ = owning("member-0", 0)
    owner.assign(["member-0", "member-1"], [0], 0, 0)
    owner.contribution(0, 0, 1, publication([(0, "alice", "app", 2.0)]))
    first = owner.totals()
    assert [each.folded for each in first] == [{}]  # a new owner's first: nothing folded
    owner.assign(["member-1", "member-0"], [0], 1, 250)
    (totals,) = owner.totals()
    assert totals.generation == 1 and totals.folded == {0: 1}
    assert totals.uses == [(0, "alice", "app", 2.0)]


def silent_alice(owned: list[int]) -> tuple[Owning, QuotaEngine, int, Publication]:
    """A member of two, owning `owned` of 4 partitions, whose contribution of alice's use
    (sent at 250) no owner folds; alice's partition, and that contribution."""
    member, engine = owning("member-0", 0, PARTITIONS)
    member.assign(["member-0", "member-1"], owned, 0, 0)
    member.publish(engine, 0, 0)  # the lines are set: half the limit over two members
    engine.produce.record_and_get_throttle_time_ms(
        engine.produce.sensors_for("alice", "app", 10), 20_000.0, 10
    )
    _, sends = member.publish(engine, 250, 250)
    alice = partition_of("", "app", PARTITIONS)  # tagged by client id, as its quota is
    assert list(sends) == [alice]  # watched from its first use past the line
    return member, engine, alice, sends[alice]


def test_a_partition_whose_owner_folds_nothing_for_twice_gone_after_is_held() -> None:
    """Held: its principals weighted by the members (this member's share of each budget),
    the others' not; the bus stays up for them, as the cluster answers this member."""
    member, engine, alice, _ = silent_alice([])
    membership, fleet = member.fleet.membership, member.fleet
    member.reached(900)  # the cluster answers it
    # sent at 250: silent after twice GONE_AFTER intervals (the owner's hop)
    member.assign(["member-0", "member-1"], [], 0, 2150)
    assert member.held == frozenset() and fleet.holding is None
    member.assign(["member-0", "member-1"], [], 0, 2350)
    assert member.held == {alice}
    assert membership.bus_up(2350) and membership.share(2350) == 1.0
    other = next(c for c in map(str, range(99)) if partition_of("", c, PARTITIONS) != alice)
    assert fleet.holding is not None
    assert fleet.holding("", "app") and not fleet.holding("", other)
    sensors = engine.produce.sensors_for("alice", "app", 2350)
    sensors.weight = 1.0
    member.publish(engine, 2500, 2500)
    assert sensors.weight == 2.0  # as if the other member used as much as this one


def test_a_held_sensor_keeps_the_use_it_anticipated_for_the_others() -> None:
    """Unheard, the others may have used what was anticipated for them: it stays charged
    once the owner folds again, and the others' report then adds to it (the safe side)."""
    member, engine, alice, sent = silent_alice([])
    group = ["member-0", "member-1"]
    member.assign(group, [], 0, 800)
    member.reached(900)
    member.assign(group, [], 0, 2350)
    assert member.held == {alice}
    member.publish(engine, 2350, 2350)  # weighted 2 from here
    sensors = engine.produce.sensors_for("", "app", 2400)
    engine.produce.record_and_get_throttle_time_ms(sensors, 1000.0, 2400)
    _, sends = member.publish(engine, 2500, 2500)  # 1,000 anticipated for the other
    kept = sensors.rate.recorded()  # all it ever recorded: a withdrawal records less
    # the owner folds this member's two contributions, and reports nothing of the other's
    mine = sum(use[3] for contribution in (sent, *sends.values()) for use in contribution.uses)
    totals = Totals("member-1", alice, 0, 0, {0: 1 + len(sends)}, [(0, "", "app", mine)], [])
    member.read_totals(totals, engine, 2600)
    for now in range(2750, 4000, 250):
        member.reached(now - 50)
        member.assign(group, [], 0, now)
        assert member.late == frozenset()
        member.publish(engine, now, now)
    assert sensors.rate.recorded() == pytest.approx(kept)


def test_while_an_owners_totals_are_late_nothing_anticipated_is_withdrawn() -> None:
    """Late once its contribution would have come back straight (ANTICIPATED_FOR intervals
    and the delay): what the others did not report is known only once they report."""
    member, engine, alice, _ = silent_alice([])
    fleet = member.fleet
    member.assign(["member-0", "member-1"], [], 0, 700)
    assert member.late == frozenset() and fleet.awaiting is None
    member.assign(["member-0", "member-1"], [], 0, 800)  # sent at 250, 2 x 250 ms since
    assert member.late == {alice} and member.held == frozenset()
    assert fleet.awaiting is not None and fleet.awaiting("", "app")
    member.publish(engine, 800, 800)
    sensors = engine.produce.sensors_for("", "app", 850)
    sensors.weight = 2.0  # as if the other member used as much lately
    engine.produce.record_and_get_throttle_time_ms(sensors, 1000.0, 850)
    before = sensors.rate.total()
    for now in range(1000, 2250, 250):
        member.assign(["member-0", "member-1"], [], 0, now)
        member.publish(engine, now, now)
    assert member.held == frozenset()
    assert sensors.rate.total() == pytest.approx(before)


def test_the_next_generation_drops_what_a_held_partition_did_not_fold() -> None:
    """Its use was held by the shares: heard now, it would only throttle everyone at once."""
    member, _, alice, _ = silent_alice([])
    member.assign(["member-0", "member-1"], [], 0, 2350)
    assert member.held == {alice}
    member.assign(["member-1", "member-0"], [], 1, 2600)
    assert member.held == frozenset() and member.fleet.holding is None
    assert member.routes.oldest_unfolded_ms() is None
    _, sends = member.routes.route(publication([]), 2700)
    assert sends == {}


def test_a_member_the_cluster_does_not_answer_holds_its_share_of_every_budget() -> None:
    """Cut off, not only from an owner: unanswered for twice GONE_AFTER intervals, idle or
    not (the others' next generation drops its standings); up again once answered."""
    member, _ = owning("member-0", 0, PARTITIONS)
    membership = member.fleet.membership
    group = ["member-0", "member-1"]
    member.reached(0)
    member.assign(group, [], 0, 0)
    member.assign(group, [], 0, 2000)
    assert membership.bus_up(2000) and not member.cut_off(2000)
    member.assign(group, [], 0, 2250)
    assert member.cut_off(2250) and member.held == frozenset()
    assert not membership.bus_up(2250) and membership.share(2250) == 1 / 2
    member.reached(2400)
    member.assign(group, [], 0, 2500)
    assert membership.bus_up(2500)


def test_on_a_short_interval_the_cluster_has_answer_within_ms_to_answer() -> None:
    """Its answer waits behind the consumer's fetch, whatever the interval: at 50 ms, not cut
    off after eight intervals unanswered, but after ANSWER_WITHIN_MS."""
    member = Owning(FleetMember("member-0", 50), 0, PARTITIONS)
    group = ["member-0", "member-1"]
    member.reached(0)
    member.assign(group, [], 0, 0)
    assert member.silent_after_ms == 400
    assert not member.cut_off(ANSWER_WITHIN_MS) and member.cut_off(ANSWER_WITHIN_MS + 1)


def test_a_member_that_reads_none_of_its_own_totals_holds_its_share_of_every_budget() -> None:
    """Its own partition silent: it cannot read its own totals back, it is cut off, though
    the cluster answers."""
    member, _, alice, _ = silent_alice(list(range(PARTITIONS)))
    membership = member.fleet.membership
    member.reached(2300)
    member.assign(["member-0", "member-1"], list(range(PARTITIONS)), 0, 2350)
    assert member.held == {alice}
    # down at once, not GONE_AFTER intervals after it was last up
    assert not membership.bus_up(2350) and membership.share(2350) == 1 / 2


def test_a_contribution_told_failed_that_the_bus_wrote_is_folded_once() -> None:
    """It is sent again as it is, and its owner skips what it already folded: the member's
    unfolded contributions and the owner's counts stay in step."""
    routes, fold = Routes(0, 1), Fold("member-1", 0, 0)
    fold.totals()
    _, sends = routes.route(publication([(0, "", "app", 1.0)]), 0)
    fold.add(0, sends[0])  # written
    routes.lost(0)  # yet its writer was told it failed (a time-out)
    _, sends = routes.route(publication([(0, "", "app", 2.0)]), 1)
    assert sends[0].uses == [(0, "", "app", 1.0)]  # the same contribution, again
    fold.add(0, sends[0])
    fold.add(1, publication([(0, "", "app", 10.0)]))
    totals = fold.totals()
    assert totals is not None and totals.folded == {0: 1, 1: 1}
    assert routes.others(totals, 2) == ([(0, "", "app", 10.0)], [])
    _, sends = routes.route(publication([]), 3)
    assert sends[0].uses == [(0, "", "app", 2.0)]


def test_a_publication_of_whole_use_ends_every_standing_named() -> None:
    """Whole use (the bus down, an older member heard) is what a standing stood for: a
    reader of straight records ends the standings of such a record's writer, and so does
    an owner, told by zeros."""
    routes = Routes(0, 1)
    routes.route(publication([], [(0, "", "app", 200.0), (0, "", "web", 50.0)]), 0)
    routes.route(publication([], [(0, "", "web", 0.0)]), 1)
    _, sends = routes.route(publication([(0, "", "app", 40.0)], None), 2)
    assert sends[0].standings == [(0, "", "app", 0.0)]
    assert sends[0].uses == [(0, "", "app", 40.0)]


def test_a_new_owners_first_totals_refused_the_next_name_every_standing() -> None:
    fold = Fold("member-1", 0, 1)
    fold.add(0, publication([], [(0, "", "app", 30.0)]))
    first = fold.totals()
    assert first is not None
    fold.lost(first)
    again = fold.totals()
    assert again is not None and again.round == 1
    assert again.standings == [(0, "", "app", 30.0)] and again.folded == {0: 1}


def test_a_previous_owners_late_totals_name_no_standing() -> None:
    """Read after the new owner's first, by a member that has not reached the new
    generation yet: its standings are stale (the new owner names them), its uses are still
    use."""
    member, engine = owning("member-0", 0)
    member.assign(["member-0", "member-1", "member-2"], [], 0, 0)
    member.publish(engine, 0, 0)  # the lines are set
    new = Totals("member-1", 0, 1, 0, {}, [], [])
    late = Totals("member-2", 0, 0, 9, {}, [(0, "", "app", 20_000.0)], [(0, "", "app", 50.0)])
    member.read_totals(new, engine, 10)
    member.read_totals(late, engine, 20)
    assert member.fleet.watched() == 1  # its use recorded
    assert not any(
        share.standings for by_tags in member.fleet._shares for share in by_tags.values()
    )


@pytest.mark.parametrize("seed", range(40))
def test_through_rebalances_every_member_ends_holding_the_others_standings(seed: int) -> None:
    """Four members join and leave at random (one that leaves is gone, and comes back as a
    process anew), so that owners change generation after generation; each reaches a new
    generation at its own next interval, and records reach their readers late (in order
    within a partition). Once the group holds still, every member in it holds, for each
    principal, the sum of the others' standings as each last named it: nothing of a member
    gone, nothing of an old owner."""
    chance = random.Random(seed)
    names = [f"member-{index}" for index in range(4)]
    members = {name: owning(name, 0, PARTITIONS_OF_TEST) for name in names}
    group, generation = list(names[:3]), 0
    standing_of: dict[str, dict[str, float]] = {name: {} for name in names}
    principals = [f"app-{index}" for index in range(5)]
    on_the_bus: list[tuple[int, int, Callable[[], None]]] = []
    order = 0
    last_due: dict[tuple[str, str, int], int] = {}

    def later(kind: str, source: str, target: int, now: int, act: Callable[[], None]) -> None:
        nonlocal order
        order += 1
        at = max(now + chance.randint(0, 2), last_due.get((kind, source, target), 0))
        last_due[kind, source, target] = at
        on_the_bus.append((at, order, act))

    def folding(
        writer: int, partition: int, sent_in: int, contribution: Publication
    ) -> Callable[[], None]:
        def read() -> None:  # by the partition's owner when it arrives
            owner = group[partition % len(group)]
            members[owner][0].contribution(writer, partition, sent_in, contribution)

        return read

    def reading(reader: str, totals: Totals, now: int) -> Callable[[], None]:
        def read() -> None:
            if reader in group:
                member, engine = members[reader]
                member.read_totals(totals, engine, now)

        return read

    def place(name: str) -> tuple[list[str], list[int]]:
        owned = [p for p in range(PARTITIONS_OF_TEST) if group[p % len(group)] == name]
        return list(group), owned

    for now in range(0, 600):
        if now < 400 and chance.random() < 0.03:  # a member joins or leaves
            outside = [name for name in names if name not in group]
            if outside and (len(group) < 2 or chance.random() < 0.5):
                joins = chance.choice(outside)
                members[joins] = owning(joins, 0, PARTITIONS_OF_TEST)  # a process anew
                group.append(joins)
            elif len(group) > 1:
                gone = chance.choice(group)
                group.remove(gone)
                standing_of[gone].clear()  # its standings end with it
            generation += 1
        for name in group:
            member = members[name][0]
            if chance.random() < 0.7:  # each at its own interval
                continue
            reached = member.routes.generation
            member.assign(*place(name), generation, now)
            standings = []
            if member.routes.generation != reached or now == 0:
                # named again for the new owners, as FleetMember does at a rebalance
                standings = [
                    (0, "", client_id, value) for client_id, value in standing_of[name].items()
                ]
            if now < 400 and chance.random() < 0.5:
                client_id = chance.choice(principals)
                value = float(chance.choice([0, 100, 200]))
                standing_of[name][client_id] = value
                if not value:
                    del standing_of[name][client_id]
                standings.append((0, "", client_id, value))
            _, sends = member.routes.route(publication([], standings), now)
            for partition, contribution in sends.items():
                sent_in, writer = member.routes.generation, member.routes.member
                later("c", name, partition, now, folding(writer, partition, sent_in, contribution))
            for totals in member.totals():
                for reader in list(group):
                    later("t", name, names.index(reader), now, reading(reader, totals, now))
        on_the_bus.sort(key=lambda item: (item[0], item[1]))
        while on_the_bus and on_the_bus[0][0] <= now:
            on_the_bus.pop(0)[2]()
    for name in group:
        fleet = members[name][0].fleet
        held: dict[str, float] = {}
        for by_tags in fleet._shares:
            for (_, client_id), share in by_tags.items():
                held[client_id] = held.get(client_id, 0.0) + sum((share.standings or {}).values())
        for client_id in principals:
            others = sum(standing_of[o].get(client_id, 0.0) for o in group if o != name)
            assert held.get(client_id, 0.0) == pytest.approx(others), (name, client_id)


def test_the_leader_spreads_the_partitions_evenly_and_leaves_each_where_it_was() -> None:
    first = owners({"a": [], "b": [], "c": []}, 64)
    assert sorted(len(owned) for owned in first.values()) == [21, 21, 22]
    assert sorted(p for owned in first.values() for p in owned) == list(range(64))
    # c leaves: a and b keep all they owned and share c's
    second = owners({"a": first["a"], "b": first["b"]}, 64)
    assert [len(owned) for owned in second.values()] == [32, 32]
    assert set(first["a"]) <= set(second["a"]) and set(first["b"]) <= set(second["b"])
    # d joins: it takes only what the others give up to make room
    third = owners({"a": second["a"], "b": second["b"], "d": []}, 64)
    assert set(third["a"]) <= set(second["a"]) and set(third["b"]) <= set(second["b"])
    assert sorted(len(owned) for owned in third.values()) == [21, 21, 22]
    # what two members both say they own, or no partition the topic has, goes to one
    claims = owners({"a": [0, 1, 99], "b": [1, 2]}, 4)
    assert sorted(p for owned in claims.values() for p in owned) == [0, 1, 2, 3]


def test_a_member_of_owners_marks_what_every_member_reads() -> None:
    member = Owning(FleetMember("m0", 250), 0, PARTITIONS)
    counts = (254, "alice", "", 3.0)
    broadcast, _ = member.route(publication([(0, "alice", "app", 1.0), counts]), 0)
    assert broadcast is not None and broadcast.uses == [OWNERS_MARK, counts]
    assert through_owners(broadcast) and not through_owners(publication([counts]))
    assert member.route(publication([(0, "alice", "app", 1.0)]), 250)[0] is None
    # with a connection quota, every member hears each member every interval
    heartbeat, _ = member.route(publication([(0, "alice", "app", 1.0)]), 500, always=True)
    assert heartbeat is not None and heartbeat.uses == [OWNERS_MARK]


def test_a_member_sharing_the_other_way_holds_every_member_to_its_share() -> None:
    membership = Membership(250, lambda _: None)
    membership.heard("b", 0, VERSION)
    membership.heard_self(0)
    assert membership.bus_up(0) and membership.share(0) == 1.0
    assert membership.heard_other_kind("straight", 100)  # first heard: logged
    assert not membership.heard_other_kind("straight", 200)
    assert not membership.bus_up(300) and membership.share(300) == pytest.approx(1 / 3)
    membership.heard_self(300)  # its own still come back: down while the other is heard
    assert not membership.bus_up(200 + OLDER_FOR_MS)
    membership.heard_self(OLDER_FOR_MS + 300)
    assert membership.bus_up(OLDER_FOR_MS + 300)


def test_a_contributions_key_and_a_members_metadata_round_trip() -> None:
    assert read_contribution_key(contribution_key(19, 70_000)) == (19, 70_000)
    with pytest.raises(ValueError, match="key"):
        read_contribution_key(b"\x00")
    with pytest.raises(ValueError, match="key"):
        read_contribution_key(None)
    assert decode_member(encode_member("host:9092/w0/17", [0, 5, 63])) == (
        "host:9092/w0/17",
        [0, 5, 63],
    )
    with pytest.raises(ValueError, match="metadata"):
        decode_member(encode_member("host", [1, 2])[:-1])


def test_a_partition_whose_contribution_is_still_sending_takes_none_until_it_is_done() -> None:
    """Routes.lost re-sends the last contribution sent: a second one sent meanwhile would
    be taken for it, and the first never sent again."""
    routes = Routes(0, 1)
    _, sends = routes.route(publication([(0, "alice", "app", 1.0)]), 0)
    assert list(sends) == [0]
    _, sends = routes.route(publication([(0, "alice", "app", 2.0)]), 250, sending={0})
    assert sends == {}
    routes.lost(0)  # the first failed: it goes again, alone, before the second
    _, sends = routes.route(publication([(0, "alice", "app", 4.0)]), 500, sending={0})
    assert sends == {}
    _, sends = routes.route(publication([]), 750)
    assert sends[0].uses == [(0, "alice", "app", 1.0)]
    _, sends = routes.route(publication([]), 1_000)
    assert sends[0].uses == [(0, "alice", "app", 6.0)]
