"""One quota type's throttle on one request, as decided when the request was charged.

A verdict is settled once (proxy/enforcement/settlement.py): when the request's response goes
out, or at once when no response will carry it. Some quota types judge again at settlement,
since Kafka judges them later than the proxy can charge them.
"""

from __future__ import annotations

from quotas.managers import ClientSensors, QuotaManager


class Verdict:
    """Settled as decided (a Fetch's bytes, charged with its response; a refusal)."""

    __slots__ = ("manager", "sensors", "throttle_ms")

    def __init__(self, manager: QuotaManager, sensors: ClientSensors, throttle_ms: int) -> None:
        self.manager = manager
        self.sensors = sensors
        #: the throttle decided when charged (a refusal's goes into the proxy's answer)
        self.throttle_ms = throttle_ms

    def at(self, now_ms: int) -> int:
        """The throttle to settle at `now_ms`."""
        return self.throttle_ms

    def judged(self, now_ms: int) -> Verdict:
        """The verdict as settled at `now_ms`: its sensors, with the throttle owed then."""
        throttle = self.at(now_ms)
        if throttle == self.throttle_ms:
            return self
        return Verdict(self.manager, self.sensors, throttle)

    def each(self, now_ms: int) -> list[Verdict]:
        """Every decision this verdict holds, as judged at `now_ms`: settlement picks the
        largest among those enforced, whichever quota types are in shadow mode."""
        return [self.judged(now_ms)]


class Rejudged(Verdict):
    """The throttle owed as the sensor stands at settlement.

    A Produce's bytes are charged when the request is read, so that a client pipelining
    requests is judged on each in turn; Kafka records them in the response callback, after
    the append, and mutes from when the response is sent. Serving the throttle decided when
    the request was read would add the broker's round trip to every throttle (the rate's
    window grows by that time, and its excess shrinks by as much). A permissive mutation
    charge is settled as its bucket stands after the cluster's refusals were refunded.
    """

    __slots__ = ()

    def at(self, now_ms: int) -> int:
        return self.manager.throttle_time_ms(self.sensors, now_ms)


class Elapsing(Verdict):
    """A strict refusal's throttle less the time its answer took: the client waited that
    long already (KIP-599 strict admission)."""

    __slots__ = ("charged_ms",)

    def __init__(
        self, manager: QuotaManager, sensors: ClientSensors, throttle_ms: int, charged_ms: int
    ) -> None:
        super().__init__(manager, sensors, throttle_ms)
        self.charged_ms = charged_ms

    def at(self, now_ms: int) -> int:
        return max(self.throttle_ms - (now_ms - self.charged_ms), 0)


class Largest(Verdict):
    """A request that charged several sensors (a Produce's principal, the topics it writes,
    the broker's ceiling): settled by whichever owes the largest throttle then, as Kafka
    throttles by the largest decision."""

    __slots__ = ("verdicts",)

    def __init__(self, verdicts: list[Verdict]) -> None:
        largest = max(verdicts, key=lambda verdict: verdict.throttle_ms)
        super().__init__(largest.manager, largest.sensors, largest.throttle_ms)
        self.verdicts = verdicts

    def at(self, now_ms: int) -> int:
        return max(verdict.at(now_ms) for verdict in self.verdicts)

    def judged(self, now_ms: int) -> Verdict:
        return max(self.each(now_ms), key=lambda verdict: verdict.throttle_ms)

    def each(self, now_ms: int) -> list[Verdict]:
        return [judged for verdict in self.verdicts for judged in verdict.each(now_ms)]
