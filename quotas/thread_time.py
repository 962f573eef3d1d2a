"""Request time as KIP-124 charges it: the time a broker's threads spend on a request, not
the time the request waits.

Kafka charges a request its I/O thread's time, from taking it off the request queue until
KafkaApis.handle returns (RequestChannel's requestThreadTimeNanos), plus its network thread's
time reading it and writing the response; both are wall-clock time. Nothing else is charged:
not the request queue, not a purgatory (a long-poll Fetch waiting for data, an acks=all
Produce waiting for replicas), not the group or transaction coordinator's wait for a commit
or for other members (JoinGroup, SyncGroup, TxnOffsetCommit), not the controller a request
is forwarded to.

The proxy sees round trips: a request's thread time, the proxy's own processing and the
network, and on top of those whatever waiting the broker (or a busy machine) added. The
estimate keeps the first three and drops the last, from what the same broker's recent round
trips show: a request is charged the lower quartile of the latest round trips of its
(broker, API, size class). Waits come and go: requests that did not queue behind other
connections' requests, or found nothing to wait for (in a rebalance the last member's
JoinGroup and the leader's SyncGroup are answered at once; a transaction's coordinator
requests wait only while something is left to replicate), show what the work costs; a flood
of requests that never wait is charged close to its round trips.

Where most requests of a class wait (idle consumers' long polls, the JoinGroups of a large
group), the quartile is a wait too. A request that may wait (protocol.apis.MAY_WAIT, a
long-poll Fetch) is therefore charged at most WAIT_CAP times what the dearest request of its
size that cannot wait costs the broker (the largest of those APIs' quartiles in its size
class, or in the nearest class learned).

On a busy broker every round trip waits: in the request queue behind bursts of requests
(which the proxy's own holds make, when a principal's connections resume at once), behind a
stall of the broker, and for a core. Kafka charges none of the queueing (and a stall only to
the requests that sat in a thread through it), and the quartile cannot leave it out when
every request of a class waited. So a round trip counts towards its class
at most what a busy broker's threads spend on a request of its kind (its Bound): a time for
the request, and one per byte of request and response by what the threads do with the
bytes (read and answer them or hand them on, send them as the log holds them, validate and
append records). An acks=all Produce's wait for its followers is bounded so too. Below its
bound, a request's round trips decide: an idle broker's requests cost less than a busy one's.

No charge is more than the request's own round trip. The figures behind the choices (the
broker's own request log replayed, and the differential runs) are in docs/request-time.md.
"""

from __future__ import annotations

from typing import Final, NamedTuple

#: round trips kept per (broker, API, size class)
SAMPLES: Final = 16
#: a request that may wait is charged at most this many times what the dearest request of
#: its size that cannot wait costs the broker: in Kafka's request log here a transaction's
#: coordinator requests and a long poll's own work took 1-2.5 times a Metadata's local time
#: (docs/request-time.md)
WAIT_CAP: Final = 2


class Bound(NamedTuple):
    """What a busy broker's threads spend on a request of a kind: a time for the request,
    and one per byte of request and response. Each is about what Kafka's request log showed
    such requests cost on average on a busy 2-core broker (docs/request-time.md): from the
    few microseconds most of them take to the stalls some of them wait through."""

    request_ns: int
    ns_per_byte: int


#: read, then answered, or handed to a coordinator or the controller (a Metadata of every
#: topic, an OffsetCommit of a large group, an EndTxn, a CreateTopics)
HANDLED: Final = Bound(400_000, 100)
#: read and handed to the group coordinator, with no partitions (protocol.apis.MEMBERSHIP)
HANDED_ON: Final = Bound(150_000, 100)
#: answered with a response Kafka keeps (ApiVersions)
KEPT: Final = Bound(50_000, 0)
#: records sent as the log holds them (Fetch; a TLS listener encrypts them)
SENT: Final = Bound(200_000, 10)
#: records validated and appended (Produce)
APPENDED: Final = Bound(400_000, 200)

#: a full ring's quartile is worked out again after this many new samples (sorting 16
#: integers is about 1 us; one request in four pays it)
_REFRESH: Final = 4
#: the estimate's rank among the ring's sorted round trips: the lower quartile
_RANK: Final = SAMPLES // 4 - 1
#: ring positions wrap with a mask, and a refresh falls on every _REFRESH-th position
_LAST: Final = SAMPLES - 1
_STALE: Final = _REFRESH - 1
assert SAMPLES & _LAST == 0 and _REFRESH & _STALE == 0, "powers of two"


def size_class(size: int) -> int:
    """Classes of a factor of 4 in bytes (request plus response): 64-255 B, 256 B-1 KiB, ...
    A Metadata of every topic or a Fetch of a megabyte is not compared with a heartbeat."""
    return size.bit_length() >> 1


class _Quartile:
    """The lower quartile of the latest SAMPLES round trips of one class."""

    __slots__ = ("estimate", "next", "ring")

    def __init__(self) -> None:
        self.ring: list[int] = []
        self.next = 0
        self.estimate = 0

    def add(self, round_trip_ns: int) -> int:
        ring = self.ring
        if len(ring) < SAMPLES:
            ring.append(round_trip_ns)
            self.estimate = sorted(ring)[(len(ring) - 1) >> 2]
            return self.estimate
        at = self.next
        ring[at] = round_trip_ns
        self.next = (at + 1) & _LAST
        if at & _STALE == _STALE:  # every _REFRESH samples
            self.estimate = sorted(ring)[_RANK]
        return self.estimate


class BrokerCosts:
    """What requests cost one broker, learned from the round trips of every connection to it
    (a connection keeps its broker's, so a request looks up nothing but its class)."""

    __slots__ = ("by_api", "by_size", "caps", "dearest")

    def __init__(self) -> None:
        #: (api_key << 7 | may wait << 6 | size class) -> that class's round trips
        self.by_api: dict[int, _Quartile] = {}
        #: size class -> its classes of requests that cannot wait
        self.by_size: dict[int, list[_Quartile]] = {}
        #: size class -> the largest estimate among them, kept as they change
        self.dearest: dict[int, int] = {}
        #: size class -> what caps a request of it that may wait (its dearest, or the nearest
        #: class's), worked out once and forgotten whenever `dearest` changes: a large
        #: request's class usually has no request that cannot wait, and every one would
        #: search the classes again
        self.caps: dict[int, int] = {}

    def charge(self, api_key: int, size: int, round_trip_ns: int, waits: bool, bound: Bound) -> int:
        """The request time to charge, in ns, for a request answered after `round_trip_ns`
        (the time it queued behind the connection's earlier requests already taken out).

        `size`: request and response bytes. `waits`: the broker may hold this request
        without working on it (MAY_WAIT, a long-poll Fetch). `bound`: what a busy broker's
        threads spend on a request of its kind (HANDLED, ...)."""
        request_ns, ns_per_byte = bound
        most = request_ns + size * ns_per_byte
        sample = round_trip_ns if round_trip_ns < most else most
        cls = size.bit_length() >> 1  # size_class, inline: every answered request comes here
        key = api_key << 7 | waits << 6 | cls
        own = self.by_api.get(key)
        if own is None:
            own = self.by_api[key] = _Quartile()
            if not waits:
                self.by_size.setdefault(cls, []).append(own)
        before = own.estimate
        estimate = own.add(sample)
        if waits:
            cap = self.caps.get(cls)
            if cap is None:
                cap = self._cap(cls)
            if cap is not None and estimate > cap:
                estimate = cap
        elif estimate != before:
            self.dearest[cls] = max(quartile.estimate for quartile in self.by_size[cls])
            self.caps.clear()
        return estimate if estimate < round_trip_ns else round_trip_ns

    def _cap(self, cls: int) -> int | None:
        """WAIT_CAP times the dearest request of class `cls` that cannot wait: in its class,
        else in the nearest smaller class learned, else the nearest larger one; None before
        any."""
        dearest = self.dearest
        if not dearest:
            return None
        if cls in dearest:
            nearest = cls
        else:
            smaller = [known for known in dearest if known < cls]
            nearest = max(smaller) if smaller else min(dearest)
        cap = self.caps[cls] = WAIT_CAP * dearest[nearest]
        return cap


class ThreadTimes:
    """The estimate of each answered request's thread time, learned per broker (one per
    worker process: every connection of the worker teaches it and is charged by it)."""

    def __init__(self) -> None:
        self._brokers: dict[str, BrokerCosts] = {}

    def broker(self, name: str) -> BrokerCosts:
        """The costs of the broker at `name` ("host:port")."""
        costs = self._brokers.get(name)
        if costs is None:
            costs = self._brokers[name] = BrokerCosts()
        return costs
