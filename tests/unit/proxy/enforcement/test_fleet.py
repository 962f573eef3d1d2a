"""A fleet holds one budget per quota entity (proxy/enforcement/fleet.py), on a virtual clock.

The fidelity table's greedy clients (tests/support/fidelity.py), spread over 3 members, each a real
connection core and enforcement, with a simulated bus between them
(tests/support/fleet_simulation.py):
what the principal got over whole echo periods of a 300 s run, to its quota.

The bound, stated in docs/fleet.md: |fleet / quota - 1| <= 4 % + 5 % per second of sync
interval plus bus delay. The members' view of each other lags by up to that much; each
anticipates the others' use in the lag (a weight on what it charges, replaced by what they
report), and what anticipation misses grows with the lag. Measured, the most any row of the
table missed by (3 members, 300 s): 2.5 % at 250 ms + 20 ms, 2.8 % at 250 + 100, 2.2 % at
100 + 20, 5.2 % at 500 + 50, 8.75 % at 1000 + 200, 2.5 % at 250 + 20 with a tenth of the
publications lost; alone on one member of three, 1.4 % (the table itself: 1.5 %); two
clients on one member and one on another, -5.7 % to +2.2 %.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from protocol.fleet_records import (
    READS_NEWEST,
    RESTATE_ASKED,
    RESTATING,
    Publication,
    Use,
    decode,
    encode,
    split,
)
from proxy.enforcement.fleet import RESTATE_MS, FleetMember
from proxy.enforcement.fleet_membership import GONE_AFTER, OLDER_FOR_MS
from proxy.enforcement.fleet_owners import FOLDS, PARTITIONS, partition_of
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, KAFKA_QUOTA_TYPES, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaLimits, QuotaSettings
from quotas.stats import MetricConfig
from tests.support.fidelity import BEHAVIOURS, WINDOWS, WORKLOADS, Behaviour, Workload
from tests.support.fleet_simulation import Bus, simulate_fleet

SYNC_MS = 250
EVERYONE = QuotaEntity(client_id=DEFAULT)


def bound(bus: Bus) -> float:
    """How far from its quota the fleet may hold a principal, by how late the others' use
    reaches a member: an interval and the bus's delay; through owners, the hop to the
    owner, and its wait for its next totals, besides (fleet.md, "The bound, and why")."""
    lag_ms = bus.sync_interval_ms + bus.delay_ms
    if bus.owners:
        lag_ms += bus.delay_ms + bus.sync_interval_ms // FOLDS
    return 0.04 + 0.05 * lag_ms / 1000


@pytest.mark.parametrize("windows", WINDOWS[:2], ids=lambda w: f"{w[0]}x{w[1]}s")
@pytest.mark.parametrize("behaviour", BEHAVIOURS, ids=lambda b: b.name)
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.quota_type.key)
def test_three_members_hold_greedy_clients_within_5_percent(
    workload: Workload, behaviour: Behaviour, windows: tuple[int, int]
) -> None:
    """Kafka's default windows and the integration tests' 2 x 1 s; python -m
    tests.support.fleet_simulation runs the fidelity table's four."""
    result = simulate_fleet(workload, behaviour, windows, Bus(SYNC_MS, 20))
    assert abs(result.fleet - 1) <= 0.05, result


@pytest.mark.parametrize(
    "bus",
    [Bus(100, 20), Bus(250, 100), Bus(1000, 200), Bus(250, 20, loss=0.1)],
    ids=lambda b: f"{b.sync_interval_ms}ms+{b.delay_ms}ms,loss{b.loss}",
)
@pytest.mark.parametrize("owners", [False, True], ids=["straight", "owners"])
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.quota_type.key)
def test_the_bound_grows_with_sync_interval_and_delay(
    workload: Workload, bus: Bus, owners: bool
) -> None:
    """Kafka's default windows, where a lag weighs most (its first burst echoes every 11 s),
    and the client that missed by most at 1 s + 200 ms (python -m tests.support.fleet_simulation
    prints every row); straight to every member, and through the owners' totals
    (fleet_owners.py: a hop more, held within the same bound)."""
    bus = replace(bus, owners=owners)
    result = simulate_fleet(workload, BEHAVIOURS[5], (11, 1), bus)
    assert abs(result.fleet - 1) <= bound(bus), result


@pytest.mark.parametrize("placement", [(1, 0, 0), (2, 1, 0)])
@pytest.mark.parametrize("windows", [(11, 1), (2, 1)], ids=lambda w: f"{w[0]}x{w[1]}s")
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.quota_type.key)
def test_clients_placed_unevenly(
    workload: Workload, windows: tuple[int, int], placement: tuple[int, ...]
) -> None:
    """One member serving the principal alone is held as one process holds it (the fidelity
    table's 1.5 %); two clients on one member and one on another, within 5 %."""
    result = simulate_fleet(workload, BEHAVIOURS[2], windows, Bus(SYNC_MS, 20), placement)
    tolerance = 0.015 if placement == (1, 0, 0) else 0.05
    assert abs(result.fleet - 1) <= tolerance, result


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.quota_type.key)
def test_through_owners_clients_placed_unevenly_within_5_percent(workload: Workload) -> None:
    """Two clients on one member and one on another, the owner one of the two (a Fetch's
    lumpy use feels the owner's hop most)."""
    bus = Bus(SYNC_MS, 20, owners=True)
    result = simulate_fleet(workload, BEHAVIOURS[2], (11, 1), bus, (2, 1, 0))
    assert abs(result.fleet - 1) <= 0.05, result


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.quota_type.key)
def test_an_owner_killed_the_budget_holds_and_the_next_generation_converges(
    workload: Workload,
) -> None:
    """The owner of the principal's partition, which serves no client, is killed 60 s in;
    the group's next generation comes 6 s later (its session timeout). Meanwhile the
    others' contributions stay unfolded: their anticipation of each other stays charged,
    and from twice GONE_AFTER intervals on each holds the principal at its share, a third
    (fleet_owners.py): the two that serve it hold the fleet at two thirds, not at nothing
    while the use their sensors hold from before ages out. From the kill to 6 s after the
    new generation the fleet stays within the bound above the quota; from 10 s after it,
    within the bound of it."""
    owner = partition_of("", "app", PARTITIONS) % 3  # the simulation's round robin
    placement = tuple(0 if member == owner else 1 for member in range(3))
    bus = Bus(SYNC_MS, 20, owners=True, killed=(owner, 60), session_s=6)
    result = simulate_fleet(workload, BEHAVIOURS[2], (2, 1), bus, placement, seconds=120)
    warm_s = 1  # the seconds are counted from the clients' start
    killed, settled = 60 - warm_s, 60 + 6 + 10 - warm_s
    during = result.per_second[killed : settled - 4]
    held = result.per_second[killed + 3 : killed + 6]  # the whole seconds held, 63 to 66 s
    after = result.per_second[settled:]
    assert sum(during) / len(during) <= 1 + bound(bus), result.per_second[killed:settled]
    assert abs(sum(held) / len(held) - 2 / 3) <= bound(bus), result.per_second[killed:settled]
    assert abs(sum(after) / len(after) - 1) <= bound(bus), after


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.quota_type.key)
def test_with_the_bus_cut_each_member_holds_its_share(workload: Workload) -> None:
    """Cut 60 s in: each member's own publications stop coming back, and from then on each
    holds the principal to a third of the quota: never the whole of it."""
    bus = Bus(SYNC_MS, 20, cut_at_s=60)
    result = simulate_fleet(workload, BEHAVIOURS[2], (2, 1), bus, seconds=200)
    assert result.members_after_cut
    for member in result.members_after_cut:
        assert abs(member - 1 / 3) <= 0.02, result


# the member's logic, publication by publication ---------------------------------------------


def engine(limits: QuotaLimits) -> QuotaEngine:
    return QuotaEngine(QuotaConfig(limits=limits))


def exchange(
    members: list[FleetMember], engines: list[QuotaEngine], now_ms: int
) -> list[Publication]:
    """Every member publishes, and every publication reaches every member at once."""
    publications = [
        member.publish(each, now_ms, now_ms) for member, each in zip(members, engines, strict=True)
    ]
    for publication in publications:
        for member, each in zip(members, engines, strict=True):
            member.receive(decode(encode(publication)), each, now_ms)
    return publications


def uses_of(publication: Publication) -> list[Use]:
    """Its uses but the mark that says its writer reads standings, and an ask for them."""
    return [use for use in publication.uses if use[0] not in (READS_NEWEST, RESTATE_ASKED)]


def fleet(size: int, limits: QuotaLimits) -> tuple[list[FleetMember], list[QuotaEngine]]:
    members = [FleetMember(f"m{index}", SYNC_MS) for index in range(size)]
    engines = [engine(limits) for _ in range(size)]
    exchange(members, engines, 0)  # every member knows the others: the bus is up
    return members, engines


def test_use_charged_on_one_member_holds_the_principal_on_the_other() -> None:
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1000.0}})
    here = engines[0].produce.sensors_for("", "app", 10)
    assert engines[0].produce.record_and_get_throttle_time_ms(here, 50_000, 10) > 0
    exchange(members, engines, SYNC_MS)
    there = engines[1].produce.sensors_for("", "app", SYNC_MS)
    # the other member has charged nothing itself, and throttles the principal's next request
    assert engines[1].produce.record_and_get_throttle_time_ms(there, 1, SYNC_MS) > 0


def test_mutation_tokens_come_from_one_fleet_budget() -> None:
    """KIP-599: a burst taken on one member leaves the other's bucket empty."""
    members, engines = fleet(2, {QuotaType.CONTROLLER_MUTATION: {EVERYONE: 10.0}})
    mutations = [each.controller_mutation for each in engines]
    here = mutations[0].sensors_for("", "admin", 10)
    burst = mutations[0].burst(here.limit)
    assert mutations[0].record_strict(here, burst, 10).admitted
    exchange(members, engines, SYNC_MS)
    there = mutations[1].sensors_for("", "admin", SYNC_MS)
    assert mutations[1].record_strict(there, 1, SYNC_MS).admitted  # the bucket was not < 0
    assert not mutations[1].record_strict(there, 1, SYNC_MS + 1).admitted


def test_a_request_rate_guard_is_one_fleet_budget_numbered_after_the_topics() -> None:
    """Issue 52: JoinGroups on one member empty the bucket on the other. Its uses are
    numbered past Kafka's quota types and the topics', which a member from before the
    guards skips."""
    members, engines = fleet(2, {QuotaType.JOIN_GROUP_RATE: {EVERYONE: 1.0}})
    guards = [each.guards[11] for each in engines]
    here = guards[0].sensors_for("", "churn", 10)
    for _ in range(10):  # the burst: ten seconds of one a second
        assert not guards[0].record_permissive(here, 1, 10)
    (publication, _) = exchange(members, engines, SYNC_MS)
    shared = engines[0].shared()
    assert shared[len(KAFKA_QUOTA_TYPES) + 2 :] == tuple(engines[0].buckets())
    number = shared.index(guards[0])
    assert [use[0] for use in uses_of(publication)] == [number]
    there = guards[1].sensors_for("", "churn", SYNC_MS)
    assert guards[1].record_permissive(there, 1, SYNC_MS) > 0


def test_a_producer_id_admitted_on_one_member_is_not_charged_on_another() -> None:
    """KIP-936: a producer that reconnects through another member is known there."""
    limits = {QuotaType.PRODUCER_IDS: {QuotaEntity(user=DEFAULT): 100.0}}
    members, engines = fleet(2, limits)
    first, second = (each.producer_ids for each in engines)
    assert first.admit(first.sensors_for("alice", "", 10), [7, 8], 10).new_ids == 2
    exchange(members, engines, SYNC_MS)
    sensors = second.sensors_for("alice", "", SYNC_MS + 1)
    assert second.admit(sensors, [7, 8, 9], SYNC_MS + 1).new_ids == 1


def test_a_sensor_is_published_once_past_its_line_and_left_once_cool() -> None:
    """Issue 51: a principal far from its limit costs the bus nothing, one past its line is
    published every interval from its window's use on, and one that cools is left again."""
    limits = {QuotaType.PRODUCE: {QuotaEntity(user="limited"): 1_000_000.0}}
    member, produce = FleetMember("m", SYNC_MS), engine(limits)
    manager = produce.produce
    now = 0

    def interval(value: float) -> list[Use]:
        nonlocal now
        now += SYNC_MS
        for user in ("limited", "unlimited"):
            sensors = manager.sensors_for(user, "", now)
            manager.record_and_get_throttle_time_ms(sensors, value, now)
        return uses_of(member.publish(produce, now, now))

    # alone, a member's line is half the limit: 40 kB/s is far under it
    assert not any(interval(10_000) for _ in range(60))
    # 1.6 MB/s: past the line once Kafka's 11 s window's rate is
    published = [interval(400_000) for _ in range(20)]
    first = next(index for index, uses in enumerate(published) if uses)
    assert all(published[first:]) and [user for _, user, _, _ in published[first]] == ["limited"]
    # its first publication carries its window's use: the 400 kB of each interval, and the
    # 10 kB of the intervals before that are in its window (not all 60 of them)
    cold_part = published[first][0][3] - 400_000 * (first + 1)
    assert cold_part % 10_000 == 0 and 0 < cold_part < 60 * 10_000, cold_part
    assert [value for uses in published[first + 1 :] for *_, value in uses] == [400_000.0] * (
        19 - first
    )
    cooling = [interval(0) for _ in range(60)]
    assert not any(cooling)  # nothing charged, nothing published
    assert not list(member.local_rates())  # left once under half its line


def steady(
    members: list[FleetMember], engines: list[QuotaEngine], now: int, intervals: int
) -> tuple[int, list[Publication]]:
    """The first member's client charges 100 kB every interval (400 kB/s of a 1 MB/s quota,
    past the line of two members); every member publishes each interval and reads all."""
    published = []
    for _ in range(intervals):
        now += SYNC_MS
        charge(engines[0], now)
        published.append(exchange(members, engines, now)[0])
    return now, published


def charge(engine: QuotaEngine, now: int) -> None:
    produce = engine.produce
    produce.record_and_get_throttle_time_ms(produce.sensors_for("", "app", now), 100_000, now)


def recorded_there(engine: QuotaEngine, now: int) -> float:
    return engine.produce.sensors_for("", "app", now).rate.recorded()


def test_a_steady_principal_costs_the_bus_nothing_once_its_standing_is_named() -> None:
    """Issue 51: a principal whose use holds steady is named once as a standing, which the
    others add every interval on their own. From then on the bus carries nothing of it but a
    drift past the tolerance, which holding steady has not: the others' sensor records what
    was charged all the same."""
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    now, _ = steady(members, engines, 0, 200)
    before = recorded_there(engines[1], now)
    now, published = steady(members, engines, now, 40)
    assert not any(publication.standings for publication in published)
    assert not any(uses_of(publication) for publication in published)
    assert all(len(encode(publication)) < 60 for publication in published)
    # the others add the standing every interval: 4 MB in 10 s, within one interval's use
    assert abs(recorded_there(engines[1], now) - before - 40 * 100_000) <= 100_000


def test_a_reader_that_missed_a_record_asks_and_every_standing_is_named_again() -> None:
    """A record a member did not read (its bus reopened at the end of the topic) shows as a
    skipped sequence; its next publication asks, and the next one of every member names its
    standings again."""
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    now, _ = steady(members, engines, 0, 200)
    now += SYNC_MS
    charge(engines[0], now)
    members[0].publish(engines[0], now, now)  # never read by the second member
    now += SYNC_MS
    charge(engines[0], now)
    publication = members[0].publish(engines[0], now, now)
    members[1].receive(decode(encode(publication)), engines[1], now)
    now += SYNC_MS
    asked = members[1].publish(engines[1], now, now)
    assert (RESTATE_ASKED, "", "", 0.0) in asked.uses
    members[0].receive(decode(encode(asked)), engines[0], now)
    now, published = steady(members, engines, now, 1)
    named = published[0].standings or []
    assert [use[:3] for use in named] == [(0, "", "app")]
    assert named[0][3] == pytest.approx(100_000, rel=0.01)


def test_a_bus_opened_again_at_its_end_asks_and_names_its_standings() -> None:
    """The bus shell says records were missed (the topic opened again at its end after a
    failure, or a record it could not read): the next publication asks, and names this
    member's standings again (what it missed may have been an ask)."""
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    now, _ = steady(members, engines, 0, 200)
    members[0].gaps.missed()
    now, published = steady(members, engines, now, 1)
    assert (RESTATE_ASKED, "", "", 0.0) in published[0].uses
    assert [use[:3] for use in published[0].standings or ()] == [(0, "", "app")]


def test_an_ask_the_asked_member_missed_is_answered_all_the_same() -> None:
    """Both members' buses reopened at the end of the topic: each skips a record of the
    other, the one that asked among them. A skipped record may have been an ask, so each
    names its standings again as well as asking."""
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    now, _ = steady(members, engines, 0, 200)
    now += SYNC_MS
    charge(engines[0], now)
    for member, each in zip(members, engines, strict=True):
        member.publish(each, now, now)  # neither read by the other
    now, published = steady(members, engines, now, 2)
    assert published[0].standings == [] and published[1].standings


def test_a_send_that_fails_late_brings_back_no_older_standing() -> None:
    """A send times out seconds after later publications went out: its use goes with the
    next one, and its standings do not (a newer one was named since); every standing is
    named again instead, and the sequence goes on from the newest."""
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    now, _ = steady(members, engines, 0, 200)
    now += SYNC_MS
    produce = engines[0].produce
    produce.record_and_get_throttle_time_ms(produce.sensors_for("", "app", now), 30_000, now)
    hung = members[0].publish(engines[0], now, now)  # the dip ends the standing: 0
    assert [use[3] for use in hung.standings or ()] == [0.0]
    now, delivered = steady(members, engines, now, 12)  # steady again: named anew
    assert any(publication.standings for publication in delivered)
    members[0].lost(hung, now)
    now, (merged,) = steady(members, engines, now, 1)
    assert merged.sequence == delivered[-1].sequence + 1
    # its pace, which the dip still weighs on a little
    assert [use[3] for use in merged.standings or ()] == [pytest.approx(100_000, rel=0.05)]
    # the lost interval's use, 70 kB under the standing it had, goes with it
    assert [use[3] for use in uses_of(merged)] == [pytest.approx(-70_000, abs=20_000)]


def test_while_a_member_of_version_2_is_heard_standings_are_restated_every_restate_ms() -> None:
    """A member of the release before the asks writes version 2 and asks for nothing: the
    others write version 2 to it, marked as readers of version 3, and name every standing
    again every RESTATE_MS as it expects."""
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    now, _ = steady(members, engines, 0, 200)
    older = Publication("older", 1, now, [], {}, [], RESTATING)
    members[0].receive(decode(encode(older)), engines[0], now)
    now, published = steady(members, engines, now, 1 + RESTATE_MS // SYNC_MS)
    assert all(publication.version == RESTATING for publication in published)
    assert all(publication.uses[0] == (READS_NEWEST, "", "", 3.0) for publication in published)
    # once for the member heard anew, then RESTATE_MS later
    assert [
        len(publication.standings or ()) for publication in published[:: len(published) - 1]
    ] == [1, 1]
    assert sum(len(publication.standings or ()) for publication in published) == 2


def test_a_member_that_joins_learns_the_standings_at_once() -> None:
    """Every member names its standings again once it hears a member it had not heard."""
    limits: QuotaLimits = {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}}
    members, engines = fleet(2, limits)
    now, _ = steady(members, engines, 0, 100)
    members.append(FleetMember("joiner", SYNC_MS))
    engines.append(engine(limits))
    now, published = steady(members, engines, now, 2)
    # heard after its first publication, and named again in the next
    assert not published[0].standings and published[1].standings
    before = recorded_there(engines[2], now)
    now, _ = steady(members, engines, now, 4)
    assert abs(recorded_there(engines[2], now) - before - 4 * 100_000) <= 100_000


def test_standings_go_on_across_a_reload_that_changes_the_windows() -> None:
    """New windows make a new engine, whose sensors start afresh; the standings do not."""
    limits: QuotaLimits = {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}}
    renewed = QuotaConfig(QuotaSettings(client=MetricConfig(samples=5, window_ms=2000)), limits)
    # the reloaded member goes on adding the others' standings
    members, engines = fleet(2, limits)
    now, _ = steady(members, engines, 0, 100)
    engines[1] = QuotaEngine(renewed)
    now, _ = steady(members, engines, now, 8)
    assert abs(recorded_there(engines[1], now) - 8 * 100_000) <= 100_000
    # and the others stop adding its own once it stops using, as before the reload
    members, engines = fleet(2, limits)
    now, _ = steady(members, engines, 0, 100)
    engines[0] = QuotaEngine(renewed)
    for _ in range(60):
        now += SYNC_MS
        exchange(members, engines, now)
    before = recorded_there(engines[1], now)
    for _ in range(8):
        now += SYNC_MS
        exchange(members, engines, now)
    assert recorded_there(engines[1], now) == before


def test_use_that_stops_and_starts_is_published_every_interval() -> None:
    """A client throttled, or a consumer's large fetches: no standing would hold."""
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    produce, now = engines[0].produce, 0
    published = []
    for interval in range(120):
        now += SYNC_MS
        if interval % 2:
            produce.record_and_get_throttle_time_ms(produce.sensors_for("", "app", now), 2e5, now)
        published.append(exchange(members, engines, now)[0])
    assert not any(publication.standings for publication in published)
    assert [uses_of(publication)[0][3] for publication in published[1::2][-10:]] == [2e5] * 10


def test_a_gone_members_standings_end() -> None:
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    now, _ = steady(members, engines, 0, 100)
    for _ in range(GONE_AFTER + 1):  # the first member falls silent
        now += SYNC_MS
        exchange(members[1:], engines[1:], now)
    before = recorded_there(engines[1], now)
    for _ in range(8):
        now += SYNC_MS
        exchange(members[1:], engines[1:], now)
    assert recorded_there(engines[1], now) == before
    assert members[1].membership.members(now) == 1


def test_a_member_writes_version_1_while_it_hears_a_member_of_version_1() -> None:
    """Issue 51's rolling upgrade: a member of version 1 cannot read standings, so while one
    is heard every member writes what it charged whole, marked as a writer of version 2 (a
    reader of version 1 skips the mark's quota type); once it is gone, standings again."""
    members, engines = fleet(2, {QuotaType.PRODUCE: {EVERYONE: 1_000_000.0}})
    now, _ = steady(members, engines, 0, 100)
    older = encode(Publication("older", 1, 0, [], {}))
    assert older[0] == 1
    for member, each in zip(members, engines, strict=True):
        member.receive(decode(older), each, now)
    now, published = steady(members, engines, now, 4)
    assert all(publication.standings is None for publication in published)
    assert all(publication.uses[0][0] == READS_NEWEST for publication in published)
    # each interval's use whole (the first adds what the standing had left out)
    assert [uses_of(publication)[0][3] for publication in published[1:]] == [100_000.0] * 3
    assert all(encode(publication)[0] == 1 for publication in published)
    # the marked records did not make the members take each other for older ones: standings
    # again once the older member has been silent OLDER_FOR_MS (a reader late for a second
    # does not turn to records it cannot read)
    now, published = steady(members, engines, now, 4 * GONE_AFTER)
    assert published[-1].standings is None
    now, published = steady(members, engines, now, OLDER_FOR_MS // SYNC_MS)
    assert published[-1].standings is not None


def test_losing_the_bus_shares_each_budget_and_its_return_restores_it() -> None:
    members, engines = fleet(3, {QuotaType.PRODUCE: {EVERYONE: 900.0}})
    now = SYNC_MS
    exchange(members, engines, now)
    assert [member.membership.share(now) for member in members] == [1.0, 1.0, 1.0]
    for _ in range(GONE_AFTER + 1):  # publications go out, none comes back
        now += SYNC_MS
        for member, each in zip(members, engines, strict=True):
            member.lost(member.publish(each, now, now), now)
    assert [member.membership.share(now) for member in members] == [1 / 3, 1 / 3, 1 / 3]
    now += SYNC_MS
    exchange(members, engines, now)  # back: one interval, and each reads itself again
    assert [member.membership.share(now) for member in members] == [1.0, 1.0, 1.0]
    assert [member.membership.members(now) for member in members] == [3, 3, 3]


def test_a_silent_member_is_gone_after_a_few_intervals() -> None:
    members, engines = fleet(3, {QuotaType.PRODUCE: {EVERYONE: 900.0}})
    now = 0
    for _ in range(GONE_AFTER + 1):
        now += SYNC_MS
        exchange(members[:2], engines[:2], now)
    assert members[0].membership.members(now) == 2


def test_a_lost_publication_goes_out_with_the_next() -> None:
    member, produce = FleetMember("m", SYNC_MS), engine({QuotaType.PRODUCE: {EVERYONE: 1.0}})
    manager = produce.produce
    manager.record_and_get_throttle_time_ms(manager.sensors_for("", "a", 1), 100, 1)
    member.lost(member.publish(produce, SYNC_MS, 0), SYNC_MS)
    manager.record_and_get_throttle_time_ms(manager.sensors_for("", "a", 300), 50, 300)
    assert [value for *_, value in uses_of(member.publish(produce, 2 * SYNC_MS, 0))] == [150.0]


def test_records_round_trip_split_and_refuse_what_they_are_not() -> None:
    publication = Publication(
        "host:9192/w0/1",
        7,
        1_700_000_000_000,
        [(0, "User:alice", "app", 1234.5), (2, "", "é", -0.25)],
        {"User:alice": [1, -2, 2**62]},
        [(0, "User:bob", "", 10.0)],
    )
    assert encode(publication)[0] == 3
    assert decode(encode(publication)) == publication
    restating = publication._replace(version=RESTATING)
    assert encode(restating)[0] == 2
    assert decode(encode(restating)) == restating
    standingless = publication._replace(standings=None)
    assert encode(standingless)[0] == 1
    assert decode(encode(standingless)) == standingless
    parts = split(publication, 1)
    assert [(len(part.uses), len(part.standings or ())) for part in parts] == [(1, 1), (1, 0)]
    assert parts[0].producer_ids and not parts[1].producer_ids
    marked = standingless._replace(uses=[(READS_NEWEST, "", "", 2.0), *publication.uses])
    assert [part.uses[0][0] for part in split(marked, 1)] == [READS_NEWEST, READS_NEWEST]
    marked = restating._replace(uses=[(READS_NEWEST, "", "", 3.0), *publication.uses])
    assert [part.uses[0][0] for part in split(marked, 1)] == [READS_NEWEST, READS_NEWEST]
    for bad in (b"", b"\x04" + encode(publication)[1:], encode(publication)[:-1]):
        with pytest.raises(ValueError):
            decode(bad)
    with pytest.raises(ValueError):
        decode(encode(publication) + b"\x00")


@pytest.mark.parametrize("workload", WORKLOADS[:2], ids=lambda w: w.quota_type.key)
def test_three_members_hold_a_topic_within_5_percent(workload: Workload) -> None:
    """Three principals, one on each member, writing (or reading) one topic with a topic
    quota: the members share the topic's sensors over the bus as a principal's."""
    limits = {workload.quota_type: {QuotaEntity(topic="t"): workload.quota}}
    result = simulate_fleet(
        workload, BEHAVIOURS[2], (2, 1), Bus(SYNC_MS, 20), limits=limits, principals=True
    )
    assert abs(result.fleet - 1) <= 0.05, result
