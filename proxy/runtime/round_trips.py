"""One connection's round trips, turned into the request time each answered request is
charged (quotas/thread_time.py learns what requests cost the broker and charges by it).

A broker handles one request of a connection at a time, so a pipelined request starts when
the previous response has come back: what it waited behind the earlier ones is not its
request time. Responses read at once share the round trip of the first.
"""

from __future__ import annotations

from proxy.handlers.base import Request
from proxy.runtime.in_flight import InFlight
from quotas.thread_time import BrokerCosts, ThreadTimes


class RoundTrips:
    __slots__ = ("_costs", "_last_answered_ns", "_share_ns", "_thread_times")

    def __init__(self, thread_times: ThreadTimes) -> None:
        self._thread_times = thread_times
        #: what requests cost the broker this connection's upstream reached
        self._costs: BrokerCosts = thread_times.broker("")
        #: when the last upstream response arrived, or the upstream connection was made
        #: (clock ns): a request cannot start upstream before
        self._last_answered_ns = 0
        #: the round trip each of the responses read at once is given, -1 for a response
        #: read alone (see read)
        self._share_ns = -1

    def connected(self, broker: str, now_ns: int) -> None:
        """Requests read while the proxy connected reach the broker only now: the time they
        waited for the connection is not request time."""
        self._costs = self._thread_times.broker(broker)
        self._last_answered_ns = now_ns

    def read(self, now_ns: int, answered: int, in_flight: InFlight) -> None:
        """`answered` responses read at once, for the oldest of `in_flight`.

        A broker answered them one after another within the round trip of the first: each
        is given an equal share of it. Otherwise the first would carry the time of all and
        the others none, and a pipelining client's round trips, mostly 0, would teach the
        estimate that its requests cost nothing."""
        if answered < 2:
            self._share_ns = -1
            return
        received = in_flight.oldest_received_ns()
        if received is None:
            self._share_ns = -1
            return
        started = max(received, self._last_answered_ns)
        self._share_ns = max(now_ns - started, 0) // answered

    def own_answered(self, now_ns: int) -> None:
        """A request of the proxy's own was answered: the broker was busy with it."""
        self._last_answered_ns = now_ns

    def charge(self, request: Request, size: int, now_ns: int) -> int:
        """The thread time `request` is charged, answered at `now_ns`; `size`: request and
        response bytes."""
        started = max(request.received_ns, self._last_answered_ns)
        self._last_answered_ns = now_ns
        share = self._share_ns
        round_trip = share if share >= 0 else max(now_ns - started, 0)
        return self._costs.charge(
            request.header.api_key, size, round_trip, request.waits, request.route.bound
        )
