"""Failed-login backoff (issue 52): every SASL authentication the broker refuses lengthens the
wait before the same user's next attempt, and before the next attempt from the same client
address; the proxy holds that attempt, so it never reaches the broker early.

Kafka only delays the refusal it answers (connection.failed.authentication.delay.ms, 100 ms by
default) and keeps no memory of who failed. A client with a rotated password, or an attacker,
reconnects at once and costs the broker another SASL exchange, whose SCRAM iterations are
expensive on purpose. The wait doubles with each refusal, from first_wait_ms to max_wait_ms.
Each attempt held is held up to a fifth longer, drawn for each, as Kafka's clients jitter
their reconnect backoff: clients refused together do not all reach the broker together. A
success resets the user's wait; other users and addresses are never held. A user or address
whose wait ran out more than max_wait_ms ago starts again from first_wait_ms.

A client's address is the real one behind a load balancer (the PROXY protocol header's). The
user is the one its first token claims: a guess by whoever sends it, but it is the account an
attacker tries, and the one a client with an old password keeps failing. A user whose last
authentication from an address succeeded is not held there for the address's refusals: many
clients may share an address (a NAT, a node's pods), and the others' refusals are not its
own.

In a fleet, each member tells the others the refusals and successes it saw
(proxy/enforcement/fleet.py), and they count them as their own: a client that tries each
member in turn waits as long as one that tries one member.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from config.guards import FailedLoginSettings

log = logging.getLogger(__name__)

#: backoffs (users and addresses) and successes (user, address) remembered at most each;
#: past it, the oldest are forgotten
KEPT = 100_000
#: refusals and successes kept for a fleet's next publication at most: a user-name spray
#: beyond it goes on being held here, and is not carried to the others (it would fill the
#: bus every interval)
SHARED_KEPT = 10_000
#: an attempt held is held up to this share of its wait longer, drawn for each attempt
JITTER = 0.2


@dataclass(slots=True)
class _Backoff:
    #: refusals in a row
    refusals: int
    #: when the next attempt may go to the broker, ms
    until_ms: int


@dataclass
class FailedLoginCounts:
    """What the guard did, for the proxy's metrics."""

    #: authentications the broker refused
    refused: int = 0
    #: attempts held (in shadow mode: that would have been), by what held them the longest
    #: ("user" or "address"), and for how long in all
    held: dict[str, int] = field(default_factory=lambda: {"user": 0, "address": 0})
    held_ms: int = 0


class FailedLogins:
    def __init__(
        self,
        settings: FailedLoginSettings | None,
        counts: FailedLoginCounts | None = None,
        draw: Callable[[], float] = random.random,
    ) -> None:
        #: None: no guard ([guards.failed_logins] not in the file)
        self.settings = settings
        self._draw = draw
        #: ("user", name) or ("address", address) -> its backoff, the last refused last
        self._backoffs: dict[tuple[str, str], _Backoff] = {}
        #: (user, address) whose last authentication succeeded, the last one last: the
        #: address's backoff does not hold that user there (the others behind a shared
        #: address are not theirs); elsewhere it does, or an attacker could try a busy
        #: user's password from anywhere between its clients' logins
        self._good: dict[tuple[str, str], None] = {}
        self.counts = FailedLoginCounts() if counts is None else counts
        #: whether a fleet takes what this process sees (take_seen); outside one nothing is
        #: kept for it
        self.sharing = False
        #: since the fleet last took them: refusals by (user, address), and successes
        self._refused_here: dict[tuple[str | None, str], int] = {}
        self._accepted_here: dict[tuple[str, str], None] = {}

    def wait_ms(self, user: str | None, address: str, now_ms: int) -> tuple[int, str]:
        """How long an attempt by `user` (None: its token names none) from `address` waits
        now, and what holds it the longest ("user" or "address"); (0, "") when nothing does.
        An attempt held is held a little longer (hold)."""
        if self.settings is None:
            return 0, ""
        wait, by = 0, ""
        if user is not None and (user, address) in self._good:
            keys: tuple[tuple[str, str], ...] = (("user", user),)
        else:
            keys = _keys(user, address)
        for key in keys:
            backoff = self._backoffs.get(key)
            if backoff is not None and backoff.until_ms - now_ms > wait:
                wait, by = backoff.until_ms - now_ms, key[0]
        return wait, by

    def hold(self, user: str | None, address: str, now_ms: int) -> tuple[int, str]:
        """How long to hold an attempt, and what holds it (wait_ms), counted: its wait, and
        up to a fifth more, drawn for each attempt. The clients of a user refused together
        are all held until the same moment; the draw spreads them over the fifth instead of
        sending them to the broker at once."""
        wait, by = self.wait_ms(user, address, now_ms)
        if wait:
            wait += round(wait * JITTER * self._draw())
            self.counts.held[by] += 1
            self.counts.held_ms += wait
        return wait, by

    def refused(self, user: str | None, address: str, now_ms: int) -> None:
        """The broker refused an authentication by `user` from `address`: both wait longer."""
        if self.settings is None:
            return
        self.counts.refused += 1
        if self.sharing and len(self._refused_here) < SHARED_KEPT:
            key = (user, address)
            self._refused_here[key] = self._refused_here.get(key, 0) + 1
        self._refuse(user, address, now_ms)

    def refused_elsewhere(self, user: str | None, address: str, count: int, now_ms: int) -> None:
        """Another member of the fleet saw the broker refuse `count` authentications by `user`
        from `address`: they wait here as if they had been refused here, now."""
        if self.settings is not None:
            for _ in range(min(count, 64)):  # the wait is at its cap long before
                self._refuse(user, address, now_ms)

    def _refuse(self, user: str | None, address: str, now_ms: int) -> None:
        settings = self.settings
        assert settings is not None
        if user is not None:
            self._good.pop((user, address), None)
        backoffs = self._backoffs
        for key in _keys(user, address):
            backoff = backoffs.pop(key, None)
            if backoff is None or now_ms - backoff.until_ms > settings.max_wait_ms:
                backoff = _Backoff(0, now_ms)
            backoff.refusals += 1
            # never shorter: a reload that lowered max_wait_ms does not end a wait
            backoff.until_ms = max(backoff.until_ms, now_ms + self._wait(backoff.refusals))
            backoffs[key] = backoff
            if backoff.refusals == 1:
                log.info(
                    "%s %s: a SASL authentication refused; its next attempts wait from %d ms",
                    *key,
                    settings.first_wait_ms,
                )
        while len(backoffs) > KEPT:
            del backoffs[next(iter(backoffs))]

    def _wait(self, refusals: int) -> int:
        """The wait after `refusals` in a row."""
        settings = self.settings
        assert settings is not None
        return min(settings.max_wait_ms, settings.first_wait_ms << min(refusals - 1, 32))

    def accepted(self, user: str, address: str) -> None:
        """A successful authentication: the user waits no more, and is not held for its
        address's refusals there. The address's wait goes on for the users not seen to
        succeed from it: behind a shared address, one client's right password says nothing
        of the others'."""
        if self.settings is None:
            return
        if self.sharing and len(self._accepted_here) < SHARED_KEPT:
            self._accepted_here[user, address] = None
        self._accept(user, address)

    def accepted_elsewhere(self, user: str, address: str) -> None:
        """Another member of the fleet saw `user` authenticate from `address`."""
        if self.settings is not None:
            self._accept(user, address)

    def _accept(self, user: str, address: str) -> None:
        self._backoffs.pop(("user", user), None)
        good = self._good
        good.pop((user, address), None)
        good[user, address] = None
        while len(good) > KEPT:
            del good[next(iter(good))]

    def take_seen(
        self,
    ) -> tuple[dict[tuple[str | None, str], int], list[tuple[str, str]]]:
        """The refusals and successes seen here since the fleet last took them."""
        refused, self._refused_here = self._refused_here, {}
        accepted, self._accepted_here = list(self._accepted_here), {}
        return refused, accepted

    def reconfigure(self, settings: FailedLoginSettings | None) -> None:
        """A reload: the backoffs already counted stay, and the waits under way run their
        course; the next refusal waits by the new settings. Without the table, none is kept
        (attempts already held still wait out their time)."""
        self.settings = settings
        if settings is None:
            self._backoffs.clear()
            self._good.clear()


def _keys(user: str | None, address: str) -> tuple[tuple[str, str], ...]:
    return (("address", address),) if user is None else (("user", user), ("address", address))
