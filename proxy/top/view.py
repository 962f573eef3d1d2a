"""What `kafka-quota-proxy top` shows: who uses the cluster now, ranked, from what the fleet
already shares through the cluster. Pure: the command feeds it usage samples (per principal,
API, client address and proxy, one sampling window each), the fleet bus's members, and the
quotas in force, and asks it for rows; it reads nothing and keeps no clock of its own.

A principal's rate is its use over each proxy's latest windows within `span_ms` (at least
the latest one), summed over the proxies that served it: each proxy closes its windows on
its own clock, so the view is at most one sampling interval ([usage] interval_s) old, and
with short intervals it is an average over the span rather than one window's swing (a
throttled client's use comes in bursts between its throttles). Request time is shown as Kafka's
request_percentage measures it: the percentage of one thread's time, per second.

A principal its quota holds gets about its quota, which its use alone cannot tell from a
principal that merely uses its quota; its demand can: its use of each API on each proxy over
the time that proxy did not hold those requests (the samples' held_ms).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, NamedTuple

from protocol.apis import REQUEST_QUOTA_EXEMPT, api_name
from protocol.fleet_records import Publication, Totals, Use
from quotas.entities import KAFKA_QUOTA_TYPES, EntityQuotas, QuotaEntity, QuotaType
from quotas.topics import client_entities, topic_limit, topic_limits
from quotas.usage_samples import UsageSample


class Measure(Enum):
    """What the rows can be ranked by, each with the quota it is held to; `index` is its
    place in Usage.rates (a list: an Enum's hash costs more than the arithmetic, and a
    refresh adds up every sample of every proxy)."""

    PRODUCE = (0, "produce", "produce B/s", QuotaType.PRODUCE)
    FETCH = (1, "fetch", "fetch B/s", QuotaType.FETCH)
    REQUEST = (2, "request", "request %", QuotaType.REQUEST)
    MUTATIONS = (3, "mutations", "mutations/s", QuotaType.CONTROLLER_MUTATION)
    PRODUCER_IDS = (4, "producer-ids", "new pids/s", QuotaType.PRODUCER_IDS)

    def __init__(self, index: int, key: str, heading: str, quota_type: QuotaType) -> None:
        self.index = index
        self.key = key
        self.heading = heading
        self.quota_type = quota_type


MEASURES: Final = {measure.key: measure for measure in Measure}
#: `--sort demand`: each principal at the quota that holds it back most, most held first
DEMAND: Final = "demand"
#: what the rows can be ranked by: a measure's rate, or the demand
SORTS: Final = (*MEASURES, DEMAND)
#: the APIs Kafka never charges to request_percentage (SASL, the brokers' own): by name, as
#: samples name them
_EXEMPT_APIS: Final = frozenset(api_name(key) for key in REQUEST_QUOTA_EXEMPT)


class UserClient(NamedTuple):
    """A principal as top ranks it: the (user, client-id) pair its samples name, both
    always named (a quota entity may leave either to a default)."""

    user: str
    client_id: str

    def __str__(self) -> str:
        return f"user={self.user} client_id={self.client_id}"


@dataclass
class Usage:
    """A principal's use over one window, per second, and what it was throttled."""

    #: per Measure.index, per second
    rates: list[float] = field(default_factory=lambda: [0.0] * len(Measure))
    #: the same over the time it was not throttled: what it asks for, as far as the proxies
    #: can tell (a throttled client waits, and sends at its own pace in between)
    demand: list[float] = field(default_factory=lambda: [0.0] * len(Measure))
    throttle_time_ms: float = 0.0
    throttled_requests: int = 0
    #: how long its quotas held it over the span, summed over the proxies (on each, the
    #: longest any API's requests were held: the union of its throttles)
    held_ms: int = 0
    #: held for nearly all of the span on some proxy: its demand is a lower bound there
    demand_bounded: bool = False
    requests: int = 0
    #: connections a connection guard refused it over the span, on every proxy
    connections_refused: int = 0
    #: (proxy, client address) -> its connections there, in the newest window that counts
    #: them
    connections_at: dict[tuple[str, str], int] = field(default_factory=dict)
    #: the client addresses it connected from
    addresses: set[str] = field(default_factory=set)
    #: the proxies that served it
    members: set[str] = field(default_factory=set)
    #: per API: requests per second
    apis: dict[str, float] = field(default_factory=dict)

    def rate(self, measure: Measure) -> float:
        return self.rates[measure.index]

    @property
    def connections(self) -> int:
        return sum(self.connections_at.values())


#: a fleet publication's quota type index of each topic manager (QuotaEngine.topic_managers
#: follows the client managers, proxy/enforcement/fleet.py), and the measure it is
TOPIC_USES: Final = {
    len(KAFKA_QUOTA_TYPES): Measure.PRODUCE,
    len(KAFKA_QUOTA_TYPES) + 1: Measure.FETCH,
}


class TopicRow(NamedTuple):
    topic: str
    #: bytes per second, every client together, over the fleet
    rate: float
    quota: float | None
    share: float | None


class Row(NamedTuple):
    principal: UserClient
    usage: Usage
    #: the quota the sort measure is held to (None: unlimited), the share of it used, and
    #: the share its demand is (above 1 for a principal its quota holds back)
    quota: float | None
    share: float | None
    demand: float | None


class Ranked(NamedTuple):
    """A row as ranked, with the measure it shows: the sort's, or under DEMAND the one whose
    quota holds the principal back most."""

    row: Row
    measure: Measure


def _add_rates(rates: list[float], sample: UsageSample, per_second: float) -> None:
    """A sample's use into a principal's rates (Measure.index order)."""
    if sample.api == "Produce":
        rates[0] += sample.bytes_in * per_second
    elif sample.api == "Fetch":
        rates[1] += sample.bytes_out * per_second
    if sample.api not in _EXEMPT_APIS:
        # request_percentage: ms of thread time per second, as a percentage of one thread
        rates[2] += sample.request_time_ms * per_second / 10.0
    rates[3] += (sample.mutations_admitted + sample.mutations_rejected) * per_second
    rates[4] += (sample.producer_ids_admitted + sample.producer_ids_rejected) * per_second


def _drop_ended(windows: dict[int, list[UsageSample]], cutoff_ms: int) -> bool:
    """Forget a proxy's windows that ended by `cutoff_ms`; whether any were."""
    ended = [start for start, kept in windows.items() if start + kept[0].window_ms <= cutoff_ms]
    for start in ended:
        del windows[start]
    return bool(ended)


#: the span rates are averaged over, when a proxy's windows are shorter
SPAN_MS: Final = 10_000
#: a member not heard for this long is gone (the proxy's own rule is 4 bus intervals)
GONE_MS: Final = 3_000
#: the most of a span a demand is taken to have been throttled: a principal held for all
#: of it asks for at most 20 times what it got (what it would ask for is not known)
MOST_HELD: Final = 0.95


class LiveView:
    """Each proxy's latest windows, as samples arrive."""

    def __init__(self, span_ms: int = SPAN_MS) -> None:
        self.span_ms = span_ms
        #: proxy -> window start -> its samples
        self._windows: dict[str, dict[int, list[UsageSample]]] = {}
        #: proxy -> the start of the first window read from it: before that, its use is
        #: not known, so the span it covers starts there
        self._first_start: dict[str, int] = {}
        self._quotas: dict[QuotaType, EntityQuotas] = {}
        #: per quota type, the topics' quotas (quotas.topics.topic_limits)
        self._topic_limits: dict[QuotaType, dict[str, float]] = {}
        #: (principal, quota type) -> its quota, as resolved once per set of limits
        self._quota_of: dict[tuple[UserClient, QuotaType], float | None] = {}
        #: fleet members and when each last published (their own clocks, ms)
        self.members: dict[str, int] = {}
        #: usage() as the windows now stand, until a sample changes them
        self._usage: dict[UserClient, Usage] | None = None
        #: (received ms, topic, measure, bytes) from the bus's publications, for a span
        self._topic_uses: deque[tuple[int, str, Measure, float]] = deque()
        #: when the first publication was received: rates cover at most the time since
        self._first_received_ms: int | None = None
        #: every member a publication was read from
        self._heard_from: set[str] = set()

    def add(self, samples: Iterable[UsageSample]) -> None:
        """Samples in any order: a proxy's windows that end a span or more before its newest
        one ends are dropped, and so is a late sample of one."""
        touched = set()
        for sample in samples:
            first = self._first_start.get(sample.proxy)
            if first is None or sample.window_start_ms < first:
                self._first_start[sample.proxy] = sample.window_start_ms
            windows = self._windows.setdefault(sample.proxy, {})
            windows.setdefault(sample.window_start_ms, []).append(sample)
            touched.add(sample.proxy)
        for proxy in touched:
            self._usage = None
            windows = self._windows[proxy]
            newest = max(windows)
            _drop_ended(windows, newest + windows[newest][0].window_ms - self.span_ms)

    def set_quotas(self, limits: Mapping[QuotaType, Mapping[QuotaEntity, float]]) -> None:
        """The client and topic quotas in force (the quota store's, over a config file's)."""
        self._quota_of.clear()
        self._quotas = {
            quota_type: EntityQuotas(client_entities(limits.get(quota_type, {})))
            for quota_type in QuotaType
        }
        self._topic_limits = {
            quota_type: topic_limits(values) for quota_type, values in limits.items()
        }

    def add_publication(self, publication: Publication, received_ms: int) -> None:
        """A member's publication on the bus, received at `received_ms` (the reader's
        clock: members' clocks do not compare): it is a member, and its topics' bytes."""
        first = publication.member not in self._heard_from
        self.members[publication.member] = received_ms
        if first:
            # what its first publication read holds was charged before the reader was
            # there to time it: the member's start mark, its uses left out
            self._heard_from.add(publication.member)
            if self._first_received_ms is None:
                self._first_received_ms = received_ms
            return
        self._add_topic_uses(publication.uses, received_ms)

    def add_totals(self, totals: Totals, received_ms: int) -> None:
        """An owner's totals (docs/fleet.md#owners): the owner is a member, and the topics'
        bytes every member charged in its partition since its previous totals."""
        self.members[totals.owner] = received_ms
        if self._first_received_ms is None:
            self._first_received_ms = received_ms
        self._add_topic_uses(totals.uses, received_ms)

    def add_members(self, members: Iterable[str], received_ms: int) -> None:
        """The members of a fleet of owners' group: each is a member whether or not it
        publishes anything (an idle one does not)."""
        for member in members:
            self.members[member] = received_ms

    def _add_topic_uses(self, uses: Iterable[Use], received_ms: int) -> None:
        """A topic's use is published whole, never as a standing (proxy/enforcement/fleet.py)."""
        topic_uses = self._topic_uses
        for quota_type, topic, _, value in uses:
            measure = TOPIC_USES.get(quota_type)
            if measure is not None:
                topic_uses.append((received_ms, topic, measure, value))
        while topic_uses and topic_uses[0][0] <= received_ms - self.span_ms:
            topic_uses.popleft()

    def topic_rows(self, measure: Measure, now_ms: int) -> list[TopicRow]:
        """Topics under a quota, by the bytes written (PRODUCE) or read (FETCH) into them
        over the span, largest first; the bus carries only topics a quota limits."""
        if self._first_received_ms is None or measure not in TOPIC_USES.values():
            return []
        covered_s = max(min(self.span_ms, now_ms - self._first_received_ms), 1) / 1000
        totals: dict[str, float] = {}
        for received_ms, topic, kind, value in self._topic_uses:
            if kind is measure and received_ms > now_ms - self.span_ms:
                totals[topic] = totals.get(topic, 0.0) + value
        limits = self._topic_limits.get(measure.quota_type, {})
        rows = []
        for topic, total in totals.items():
            rate = total / covered_s
            quota = topic_limit(limits, topic)
            rows.append(TopicRow(topic, rate, quota, None if quota is None else rate / quota))
        rows.sort(key=lambda row: (-row.rate, row.topic))
        return rows

    def expire(self, wall_ms: int, received_ms: int) -> None:
        """Forget what is no longer now: a proxy's windows that ended a span before
        `wall_ms` (a proxy without traffic writes no samples, and a stopped one none), and a
        member that has not published for GONE_MS of the reader's clock."""
        for proxy, windows in list(self._windows.items()):
            if _drop_ended(windows, wall_ms - self.span_ms):
                self._usage = None
            if not windows:
                del self._windows[proxy]
        for member, heard in list(self.members.items()):
            if heard < received_ms - GONE_MS:
                del self.members[member]

    def proxies(self) -> dict[str, int]:
        """Each proxy that sent samples, and the start of its newest window."""
        return {proxy: max(windows) for proxy, windows in self._windows.items() if windows}

    def usage(self) -> dict[UserClient, Usage]:
        """Each principal's use over the windows shown (computed once per change). Its
        demand is its use of each API on each proxy over the time that proxy did not hold
        those requests back."""
        if self._usage is not None:
            return self._usage
        found: dict[UserClient, Usage] = {}
        #: principal -> what it asks beyond its use, per Measure.index
        beyond: dict[UserClient, list[float]] = {}
        for proxy, windows in self._windows.items():
            # the span up to the end of its newest window, or from the first window read
            # from it: a window without samples was a window without use
            # from the start of the oldest window kept, which may begin before the span
            newest = max(windows)
            end = newest + windows[newest][0].window_ms
            since = min(min(windows), end - self.span_ms)
            covered_ms = end - max(since, self._first_start[proxy])
            per_second = 1000.0 / max(covered_ms, 1)
            #: (principal, API) -> window start -> how long its requests of the API were
            #: held in that window
            held: dict[tuple[UserClient, str], dict[int, int]] = {}
            for start in sorted(windows, reverse=True):  # the newest connection counts first
                for sample in windows[start]:
                    principal = UserClient(sample.user, sample.client_id)
                    usage = found.get(principal)
                    if usage is None:
                        usage = found[principal] = Usage()
                    _add_rates(usage.rates, sample, per_second)
                    usage.throttle_time_ms += sample.throttle_time_ms
                    usage.throttled_requests += sample.throttled_requests
                    usage.requests += sample.requests
                    usage.connections_refused += sample.connections_refused
                    usage.apis[sample.api] = usage.apis.get(sample.api, 0.0) + (
                        sample.requests * per_second
                    )
                    address = sample.client_ip
                    if address:
                        usage.addresses.add(address)
                    usage.members.add(proxy)
                    usage.connections_at.setdefault((proxy, address), sample.connections)
                    if sample.held_ms:  # the same on each address's sample of the API
                        held.setdefault((principal, sample.api), {})[start] = sample.held_ms
            if held:
                self._add_demand(found, beyond, windows, held, covered_ms, per_second)
        for principal, usage in found.items():
            extra = beyond.get(principal)
            # one list for both where they are equal: neither is added into after this
            usage.demand = (
                usage.rates
                if extra is None
                else [a + b for a, b in zip(usage.rates, extra, strict=True)]
            )
        self._usage = found
        return found

    @staticmethod
    def _add_demand(
        found: dict[UserClient, Usage],
        beyond: dict[UserClient, list[float]],
        windows: dict[int, list[UsageSample]],
        held: dict[tuple[UserClient, str], dict[int, int]],
        covered_ms: int,
        per_second: float,
    ) -> None:
        """What the principals one proxy held ask beyond what they got there: their use of
        each API over the time it did not hold that API's requests, less their use. Few are
        held, so their samples are found again rather than every principal's use kept per
        proxy."""
        scales: dict[tuple[str, str, str], float] = {}
        longest: dict[UserClient, int] = {}
        for (principal, api), per_window in held.items():
            held_ms = sum(per_window.values())
            longest[principal] = max(longest.get(principal, 0), held_ms)
            fraction = held_ms / max(covered_ms, 1)
            if fraction >= MOST_HELD:
                found[principal].demand_bounded = True
            scales[(*principal, api)] = 1.0 / (1.0 - min(fraction, MOST_HELD)) - 1.0
        for principal, held_ms in longest.items():
            found[principal].held_ms += held_ms
        for samples in windows.values():
            for sample in samples:
                scale = scales.get((sample.user, sample.client_id, sample.api))
                if scale is not None:
                    principal = UserClient(sample.user, sample.client_id)
                    extra = beyond.get(principal)
                    if extra is None:
                        extra = beyond[principal] = [0.0] * len(Measure)
                    _add_rates(extra, sample, per_second * scale)

    def limited(self, measure: Measure) -> bool:
        """Whether any entity sets the quota the measure is held to."""
        quotas = self._quotas.get(measure.quota_type)
        return quotas is not None and quotas.levels_enabled != 0

    def quota(self, principal: UserClient, measure: Measure) -> float | None:
        key = (principal, measure.quota_type)
        if key in self._quota_of:
            return self._quota_of[key]
        quotas = self._quotas.get(measure.quota_type)
        found = (
            None
            if quotas is None
            else quotas.limit(quotas.metric_tags(principal.user, principal.client_id))
        )
        self._quota_of[key] = found
        return found

    def rows(self, measure: Measure, name_filter: str = "") -> list[Row]:
        """Principals by the measure, largest first; the filter keeps names containing it.
        A share is of the sensor the principal's quota is charged to, which principals of
        one default entity (or one user's client-ids under a user quota) share, as Kafka
        charges them together."""
        usage_of = self.usage()
        index = measure.index
        quotas = self._quotas.get(measure.quota_type)
        sensor_of: dict[UserClient, object] = {}
        #: per sensor, its principals' rates and demands together
        totals: dict[object, tuple[float, float]] = {}
        if quotas is not None:
            for principal, usage in usage_of.items():
                tags = quotas.metric_tags(principal.user, principal.client_id)
                sensor_of[principal] = tags
                rate, demand = totals.get(tags, (0.0, 0.0))
                totals[tags] = (rate + usage.rates[index], demand + usage.demand[index])
        rows = []
        for principal, usage in usage_of.items():
            if name_filter and name_filter not in f"{principal.user} {principal.client_id}":
                continue
            quota = self.quota(principal, measure)
            if quota is None:
                rows.append(Row(principal, usage, None, None, None))
                continue
            charged, demand = totals.get(
                sensor_of.get(principal), (usage.rates[index], usage.demand[index])
            )
            rows.append(Row(principal, usage, quota, charged / quota, demand / quota))
        rows.sort(key=lambda row: (-row.usage.rates[index], row.principal))
        return rows


def ranked(view: LiveView, sort: str, name_filter: str = "") -> list[Ranked]:
    """The rows by a measure's rate (a key of MEASURES), or by DEMAND: each principal a
    quota applies to once, at the measure where its demand is the largest share of its
    quota, the largest first (a principal no quota applies to is held back by none)."""
    if sort != DEMAND:
        measure = MEASURES[sort]
        return [Ranked(row, measure) for row in view.rows(measure, name_filter)]
    most: dict[UserClient, Ranked] = {}
    for measure in filter(view.limited, Measure):  # a measure no quota holds holds none back
        for row in view.rows(measure, name_filter):
            if row.demand is None:
                continue
            kept = most.get(row.principal)
            if kept is None or row.demand > (kept.row.demand or 0.0):
                most[row.principal] = Ranked(row, measure)
    return sorted(most.values(), key=lambda r: (-(r.row.demand or 0.0), r.row.principal))


def snapshot(view: LiveView, sort: str, now_ms: int, name_filter: str = "") -> dict[str, object]:
    """One screen's numbers for scripts (`top --once --json`); under DEMAND each principal
    names the measure it is ranked by."""
    topics = [] if sort == DEMAND else view.topic_rows(MEASURES[sort], now_ms)
    return {
        "sort": sort,
        "proxies": view.proxies(),
        "members": sorted(view.members),
        "principals": [
            {
                "user": row.principal.user,
                "client_id": row.principal.client_id,
                "measure": measure.key,
                "rates": {m.key: round(row.usage.rates[m.index], 3) for m in Measure},
                "quota": row.quota,
                "share": None if row.share is None else round(row.share, 4),
                "demand": None if row.demand is None else round(row.demand, 4),
                "demand_bounded": row.usage.demand_bounded,
                "throttle_time_ms": row.usage.throttle_time_ms,
                "throttled_requests": row.usage.throttled_requests,
                "held_ms": row.usage.held_ms,
                "connections": row.usage.connections,
                "connections_refused": row.usage.connections_refused,
                "addresses": sorted(row.usage.addresses),
                "members": sorted(row.usage.members),
            }
            for row, measure in ranked(view, sort, name_filter)
        ],
        "topics": [
            {"topic": row.topic, "rate": round(row.rate, 3), "quota": row.quota,
             "share": None if row.share is None else round(row.share, 4)}
            for row in topics
        ],
    }  # fmt: skip
