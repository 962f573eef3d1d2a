"""The contract between the connection and the handlers, in Kafka's terms.

Kroxylicious's filters keep per-request state in the in-flight entry and h11 turns bytes into
events; a handler does both for one API: it decides on a request, and the state it keeps in
the request comes back to it with that request's response. The runtime (quotas, the topic
cache, the cluster on this connection) is reached only through the interfaces declared here,
so the handlers import nothing of the asyncio shell and are tested by calling them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from protocol.headers import RequestHeader, request_body_offset
from protocol.rewrite import Advertise
from protocol.sasl import SaslExchange
from quotas.admin import Changes
from quotas.entities import QuotaEntity, QuotaType
from quotas.principal import Principal
from quotas.store import QuotaStore
from quotas.thread_time import HANDLED, Bound
from quotas.usage_samples import UsageCounters
from quotas.verdicts import Verdict

if TYPE_CHECKING:
    from proxy.handlers.topic_cache import TopicCache

#: what a handler reads a request's body into (Request.parsed_as)
T = TypeVar("T")


class Stage(Enum):
    """Where an API stands in a connection's authentication. The proxy sends requests of its
    own on a client's connection only once the client has sent a request of the session, and
    never while it authenticates again (a broker takes nothing else within an exchange)."""

    #: an ordinary request: the client is past authentication
    SESSION = "session"
    #: may come before authentication and says nothing of it (ApiVersions)
    NEGOTIATION = "negotiation"
    #: an authentication exchange (SaslHandshake, SaslAuthenticate)
    AUTHENTICATION = "authentication"


class Route(NamedTuple):
    """What the connection needs to know of an api_key, from the registry."""

    #: None: forwarded as its original bytes
    handler: Handler | None
    #: charged to request_percentage (Kafka exempts SASL and the brokers' own APIs)
    request_time: bool
    stage: Stage
    #: the broker may answer after its threads are done with it (protocol.apis.MAY_WAIT)
    waits: bool = False
    #: what a busy broker's threads spend on one (quotas/thread_time.py)
    bound: Bound = HANDLED
    #: the request-rate guard that counts this API's requests (docs/guards.md), if any
    guard: QuotaType | None = None


class Request:
    """One client request from when it is read until its response has gone to the client.

    The connection makes it once, with the principal resolved and the time read once; what a
    handler reads from the body is kept here (`parsed`, `state`), so a request handled again
    after a Defer, and its response, read nothing twice. The in-flight queue holds it.
    """

    __slots__ = (
        "_body_offset",
        "client_id",
        "frame",
        "header",
        "local_response",
        "now_ms",
        "parsed",
        "principal",
        "received_ns",
        "refreshed",
        "route",
        "state",
        "stops_reading",
        "usage",
        "verdict",
        "waits",
    )

    def __init__(
        self,
        frame: bytes,
        header: RequestHeader,
        route: Route,
        principal: Principal,
        received_ns: int,
        usage: UsageCounters | None = None,
    ) -> None:
        self.frame = frame
        self.header = header
        self.route = route
        self.client_id = header.client_id or ""
        self.principal = principal
        self.received_ns = received_ns
        #: the quota clock of the handling under way: when the request was read, then when
        #: its response came
        self.now_ms = received_ns // 1_000_000
        #: the principal's usage counters for this API (None when usage is not recorded)
        self.usage = usage
        #: the quota verdict settled with the response (or at once, when none will come)
        self.verdict: Verdict | None = None
        #: what the handler read from the body, kept for a second handling and the response
        self.parsed: object = None
        #: what the handler keeps for the response
        self.state: object = None
        #: the request was deferred and the cluster asked: decide with what is known now,
        #: and do not defer again
        self.refreshed = False
        #: reading stops until this request's response has been written (Forward.stops_reading)
        self.stops_reading = False
        #: the broker may hold the request without working on it: its request time is
        #: capped by what requests that cannot wait cost (quotas/thread_time.py)
        self.waits = route.waits
        #: a response the proxy made itself, sent once every earlier response has gone
        self.local_response: bytes | None = None
        self._body_offset = -1

    def parsed_as(self, kind: type[T], read: Callable[[bytes, RequestHeader, int], T]) -> T:
        """The body as `read` reads it, read once: a request handled again (deferred, then
        refreshed) takes what was read the first time."""
        parsed = self.parsed
        if not isinstance(parsed, kind):
            parsed = self.parsed = read(self.frame, self.header, self.body_offset)
        return parsed

    @property
    def body_offset(self) -> int:
        """Where the body starts, past the header's tagged fields: found once."""
        offset = self._body_offset
        if offset < 0:
            offset = self._body_offset = request_body_offset(self.frame, self.header)
        return offset


# The outcomes are plain slotted dataclasses, not frozen ones: a frozen dataclass sets each
# field through object.__setattr__, and a Forward made per request cost 0.7 us where this
# costs 0.16. Nothing changes an outcome after its handler returns it. A quota verdict is
# not part of an outcome: the charge keeps it in the request, and the connection settles it.


@dataclass(slots=True)
class Forward:
    """Send `frame` upstream (the request, or a rewritten one)."""

    frame: bytes
    #: read nothing more from the client until this request's response has been written
    stops_reading: bool = False
    #: the broker may hold the request without working on it (a long-poll Fetch), beyond
    #: what its API says (Route.waits)
    waits: bool = False
    #: False for a Produce with acks=0, which the broker never answers
    expects_response: bool = True


@dataclass(slots=True)
class Answer:
    """Answer the client here, in order with the responses to its earlier requests."""

    response: bytes


@dataclass(slots=True)
class Drop:
    """Neither forward nor answer: a request refused that expects no response (acks=0)."""


@dataclass(slots=True)
class Defer:
    """Hold this request and every later one of the connection until every question the
    handler asked the cluster (Channel.cluster.ask) has its answer; then the request is
    handled again with `refreshed` set. A handler returns it only after an ask (or a
    begin) succeeded, and before it has recorded anything (no quota charged, no state
    changed) that handling it again would record twice."""


Outcome = Forward | Answer | Drop | Defer


class Cluster(Protocol):
    """The cluster, asked on the client's own upstream connection: Kafka answers one
    connection's requests in order, so a question takes its place among the client's, and
    on a SASL cluster the client's authenticated connection is the one the proxy has."""

    def begin(self) -> Callable[[], None]:
        """Hold a Defer until the callback returned is called: for what the runtime does
        for a handler elsewhere than on this connection (the quota store's topic)."""
        ...

    def watch_client(self) -> None:
        """Read the client again while a Defer still holds its request: a client that has
        gone meanwhile is seen closing before its request is handled again (what it sends
        waits behind the request)."""
        ...

    def ask(
        self,
        api_key: int,
        api_version: int,
        body: bytes,
        on_answer: Callable[[bytes], object],
    ) -> bool:
        """Send a request of the proxy's own; its response goes to `on_answer`, never to the
        client. False when the connection cannot take one now (the client is not past
        authentication, or the connection is closing)."""
        ...


class ProduceQuota(Protocol):
    def charge(self, request: Request, size: int) -> bool:
        """producer_byte_rate, charged as the request is read; True when the connection must
        stop reading until the response has gone (over quota, enforced)."""
        ...

    #: whether a topic's producer_byte_rate applies anywhere: only then is a request's
    #: every topic's size read
    topic_quotas: bool

    def charge_topics(self, request: Request, written: Mapping[str, int]) -> bool:
        """Each topic's producer_byte_rate, charged with the record bytes written into it;
        as `charge`, True when the connection must stop reading."""
        ...

    def topics_held_ms(self, topics: Iterable[str], now_ms: int) -> int:
        """The longest hold on the topics a request writes (another connection's request
        crossed a topic's quota)."""
        ...

    #: whether any broker has a produce ceiling: only then is a request charged to one
    ceilings: bool

    def charge_ceiling(self, request: Request, broker: int | None, size: int) -> bool:
        """The broker's produce ceiling and the cluster's (docs/ceilings.md); as `charge`,
        True when the connection must stop reading."""
        ...

    #: whether the disk guard holds any log directory: only then is a request's every
    #: partition's size read
    disk_guard: bool

    def charge_disks(self, request: Request, written: Mapping[tuple[str, int], int]) -> bool:
        """The log directories the disk guard holds, charged with the bytes written into
        the partitions on them; as `charge`, True when the connection must stop reading."""
        ...


class FetchQuota(Protocol):
    def owed(self, request: Request) -> int:
        """The throttle a principal already over consumer_byte_rate owes before its Fetch
        goes (0: none); the handler answers it with an empty Fetch."""
        ...

    def cap(self, request: Request) -> int | None:
        """The most a Fetch may return (one quota window's worth); None: not limited."""
        ...

    def charge(self, request: Request, size: int) -> None:
        """A Fetch response's bytes, as Kafka charges them once it has read the log."""
        ...

    #: whether a topic's consumer_byte_rate applies anywhere: only then is a response's
    #: every topic's size read
    topic_quotas: bool

    def charge_topics(self, request: Request, read: Mapping[str, int]) -> None:
        """Each topic's consumer_byte_rate, charged with the record bytes read from it."""
        ...

    def topics_held_ms(self, topics: Iterable[str], now_ms: int) -> int:
        """The longest hold on these topics' consumer sensors."""
        ...

    def topics_cap(self, topics: Iterable[str], now_ms: int) -> int | None:
        """The most a Fetch of these topics may return: one quota window of the smallest
        topic quota among them (as Kafka caps a principal's); None: not limited."""
        ...

    #: whether any broker has a fetch ceiling
    ceilings: bool

    def ceiling_owed(self, request: Request, broker: int | None) -> int:
        """The throttle a principal past its share of the broker owes before its Fetch
        goes (0: none); the handler answers it with an empty Fetch."""
        ...

    def charge_ceiling(self, request: Request, broker: int | None, size: int) -> None:
        """The broker's fetch ceiling and the cluster's, charged with a response's bytes."""
        ...


class MutationQuota(Protocol):
    def limited(self, request: Request) -> bool:
        """Whether controller_mutation_rate limits this principal."""
        ...

    def admit(
        self, request: Request, counts: Sequence[int], strict: bool
    ) -> tuple[list[int], list[int]]:
        """Each topic's partition mutations charged in request order (KIP-599): the indexes
        of the topics refused, and what each topic was charged (to refund exactly that if
        the cluster does not make it)."""
        ...

    def refund(self, request: Request, count: int) -> None:
        """Give back mutations the cluster did not make."""
        ...


class ProducerIdQuota(Protocol):
    def limited(self, request: Request) -> bool:
        """Whether producer_ids_rate limits this principal's user."""
        ...

    def admit(self, request: Request, producer_ids: list[int]) -> bool:
        """KIP-936: False when an unseen producer id finds the user's bucket below zero; the
        refusal's throttle is then the request's verdict."""
        ...

    def dropped(self, request: Request) -> None:
        """A refused request that had no response to carry the refusal (acks=0)."""
        ...


class Quotas(Protocol):
    """Enforcement, by quota type: each charge keeps its verdict in the request."""

    @property
    def produce(self) -> ProduceQuota: ...

    @property
    def fetch(self) -> FetchQuota: ...

    @property
    def mutations(self) -> MutationQuota: ...

    @property
    def producer_ids(self) -> ProducerIdQuota: ...


class QuotaAdmin(Protocol):
    """The quotas the proxy enforces, as kafka-configs reads and alters them (KIP-546)."""

    @property
    def store(self) -> QuotaStore: ...

    def unavailable(self) -> tuple[int, str] | None:
        """Why an alteration cannot be stored now: (Kafka error code, message)."""
        ...

    def apply(
        self, changes: Mapping[QuotaEntity, Changes], done: Callable[[str | None], object]
    ) -> None:
        """Store the changes where every instance reads them; `done(None)` once they are in
        force here, `done(problem)` when they could not be stored."""
        ...


class Principals(Protocol):
    """Names a connection's principal: the one writer of Channel.user
    (proxy/handlers/principals.py)."""

    def on_handshake_request(self, channel: Channel, request: Request) -> None: ...

    def on_handshake_response(self, channel: Channel, frame: bytes, request: Request) -> None: ...

    def on_authenticate_request(self, channel: Channel, request: Request) -> None: ...

    def on_authenticate_response(
        self, channel: Channel, frame: bytes, request: Request
    ) -> None: ...


class LoginGuard(Protocol):
    """The failed-login backoff ([guards.failed_logins]; proxy/runtime/login_guard.py)."""

    def hold(self, channel: Channel) -> bool:
        """Whether the connection's SaslAuthenticate waits (the handler returns Defer) for
        earlier refusals of the user its exchange claims, or of its client address."""
        ...

    def answered(self, channel: Channel, claimed: str | None) -> None:
        """After a SaslAuthenticate response of an exchange that claimed `claimed`: a
        refusal lengthens the waits, a success ends them."""
        ...


class Runtime(Protocol):
    """What the proxy shares with every handler (proxy/runtime/context.py builds it once)."""

    @property
    def quotas(self) -> Quotas: ...

    @property
    def topics(self) -> TopicCache: ...

    @property
    def advertise(self) -> Advertise: ...

    @property
    def principals(self) -> Principals: ...

    @property
    def quota_admin(self) -> QuotaAdmin: ...

    @property
    def login_guard(self) -> LoginGuard: ...


@dataclass(slots=True)
class Channel:
    """What the proxy knows of one client connection, shared by the handlers of its requests
    (Kafka's KafkaChannel holds the same: the principal and how it authenticated). Not a
    session: Kafka's sessions are fetch sessions and SASL sessions."""

    runtime: Runtime
    cluster: Cluster
    #: the client's "address:port", for log lines
    peer: str = "?"
    #: the principal's user name, written only by the principal builder: PLAINTEXT
    #: connections are User:ANONYMOUS in Kafka, and a certificate or a SASL exchange names it
    user: str = "ANONYMOUS"
    sasl: SaslExchange = field(default_factory=SaslExchange)
    #: the topics this connection's Fetch responses have carried: what its next fetch
    #: reads (an incremental fetch session's request names only the partitions it changes)
    fetched_topics: set[str] = field(default_factory=set)
    #: the node id of the broker the connection's requests go to: whose ceilings they are
    #: charged to (docs/ceilings.md); None until connected, or where no response named it
    broker: int | None = None

    @property
    def address(self) -> str:
        """The client's address without its port: what usage samples and per-address
        log limits name."""
        return self.peer.rpartition(":")[0] or self.peer


class Handler:
    """By default a request is forwarded as it is and its response passed on."""

    #: the quota types besides request time that this API's requests charge: a principal
    #: held on one of them is not read until the hold ends
    quotas: tuple[QuotaType, ...] = ()
    stage = Stage.SESSION

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        return Forward(request.frame)

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        """The response for the client; the connection settles the request's quotas after."""
        return frame

    def held_ms(self, channel: Channel, request: Request) -> int:
        """How long a request must wait for holds on what it charges beyond its principal
        (a topic a Produce writes); asked only while such a hold runs."""
        return 0
