"""The failed-login backoff on a connection (the handlers' LoginGuard): the backoffs are the
process's (proxy/enforcement/failed_logins.py); an attempt that must wait is deferred, and
handled again when its wait is over, as a request waiting for the proxy's own questions is."""

from __future__ import annotations

import logging

from proxy.enforcement.failed_logins import FailedLogins
from proxy.handlers.base import Channel
from proxy.runtime.clock import Clock

log = logging.getLogger(__name__)

#: how long a held connection is read before its attempt goes on: a close waiting in its
#: socket is seen by then (the event loop polls sockets between timers)
_SEEN_NS = 1_000_000


class LoginGuard:
    def __init__(self, clock: Clock, backoffs: FailedLogins) -> None:
        self._clock = clock
        self.backoffs = backoffs

    def hold(self, channel: Channel) -> bool:
        backoffs = self.backoffs
        settings = backoffs.settings
        sasl = channel.sasl
        # an exchange the proxy follows (one it cannot is never counted either), and not a
        # KIP-368 re-authentication of the user the connection already proved it is
        if settings is None or not sasl.steps_left or sasl.claimed == channel.user:
            return False
        wait_ms, by = backoffs.hold(sasl.claimed, channel.address, self._clock.now_ms())
        if not wait_ms:
            return False
        if settings.shadow:
            log.info(
                "client %s (User:%s): a SASL authentication would wait %d ms for its %s's "
                "refusals (shadow mode: not held)",
                channel.peer,
                channel.sasl.claimed,
                wait_ms,
                by,
            )
            return False
        cluster, done = channel.cluster, channel.cluster.begin()

        def over() -> None:
            # a held connection is not read: a client that gave up meanwhile has not been
            # seen to close. Read it first, so that its attempt is dropped with it rather
            # than sent to the broker for nobody
            cluster.watch_client()
            self._clock.call_later(_SEEN_NS, done)

        self._clock.call_later(wait_ms * 1_000_000, over)
        return True

    def answered(self, channel: Channel, claimed: str | None) -> None:
        sasl = channel.sasl
        if sasl.refused:
            self.backoffs.refused(claimed, channel.address, self._clock.now_ms())
        elif claimed is not None and sasl.claimed is None and not sasl.steps_left:
            self.backoffs.accepted(claimed, channel.address)
