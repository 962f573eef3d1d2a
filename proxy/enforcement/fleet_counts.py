"""What a fleet's members tell each other besides use (issue 52): each member's count of the
open connections of the principals it asks for and its ask (quotas/principal_connections.py),
whole, the
logins the brokers refused or accepted through it (failed_logins.py), and its load of each
broker's ceilings (fleet_ceilings.py). They ride the
records of uses (fleet.py), under quota types that are not uses (protocol/fleet_records.py),
which FleetMember hands on unread and a member from before them skips.
"""

from __future__ import annotations

from protocol.fleet_records import (
    CONNECTION_CLAIM,
    FAILED_LOGINS,
    LOGIN_ACCEPTED,
    OPEN_CONNECTIONS,
    Publication,
    Use,
)
from proxy.enforcement.failed_logins import FailedLogins
from proxy.enforcement.fleet import LINE_SHARE, FleetMember, cool_after_intervals
from proxy.enforcement.fleet_ceilings import PARTS, FleetCeilings
from proxy.enforcement.fleet_membership import GONE_AFTER
from quotas.engine import QuotaEngine


class FleetCounts:
    def __init__(self, member: FleetMember, logins: FailedLogins | None = None) -> None:
        self._member = member
        #: the failed-login backoff of this process; None: none to share
        self._logins = logins
        self._ceilings = FleetCeilings(member.membership.gone_after_ms)
        #: the times FleetMember missed records when last read: -1, so that the history read
        #: at start-up counts as records missed (the asks before it are not in it)
        self._gaps = -1

    def publish(self, publication: Publication, engine: QuotaEngine, now_ms: int) -> None:
        """Add this member's counts, asks and logins to its publication's uses: each
        principal's count and ask every interval while it asks (one lost is named again by
        the next), and the refusals and successes since the last publication."""
        uses = publication.uses
        connections = engine.connections
        if connections.enabled:
            self._place(engine, now_ms)
            cool_after = cool_after_intervals(self._member.sync_interval_ms)
            for said in connections.publish(publication.sequence, cool_after, GONE_AFTER):
                user, client_id = said.tags
                uses.append((OPEN_CONNECTIONS, user, client_id, said.connections))
                uses.append((CONNECTION_CLAIM, user, client_id, said.ask))
        logins = self._logins
        if logins is not None and logins.settings is not None:
            logins.sharing = True
            refused, accepted = logins.take_seen()
            uses += [(FAILED_LOGINS, u or "", a, float(n)) for (u, a), n in refused.items()]
            uses += [(LOGIN_ACCEPTED, user, address, 1.0) for user, address in accepted]
        self._ceilings.publish(uses, engine, now_ms)

    def receive(
        self, publication: Publication, skipped: list[Use], engine: QuotaEngine, now_ms: int
    ) -> None:
        """What FleetMember.receive handed on of a publication, in the bus's order. Every
        publication renews the members the counts are shared among (one that just started
        serves before its first publication). Of this member's own, the asks alone are read:
        they are granted in their place among the others'."""
        member, connections = publication.member, engine.connections
        if connections.enabled:
            self._place(engine, now_ms)
        own = member == self._member.member
        if self._member.gaps.count != self._gaps:
            self._gaps = self._member.gaps.count
            connections.resync()
        logins = self._logins
        for use in skipped:
            quota_type, user, client_id, value = use
            if quota_type == CONNECTION_CLAIM:
                connections.receive_claim(member, publication.sequence, (user, client_id), value)
            elif own:
                continue
            elif quota_type == OPEN_CONNECTIONS:
                connections.receive(member, (user, client_id), value)
            elif quota_type in PARTS:
                self._ceilings.receive(member, use, now_ms)
            elif logins is None:
                continue
            elif quota_type == FAILED_LOGINS:
                logins.refused_elsewhere(user or None, client_id, int(value), now_ms)
            elif quota_type == LOGIN_ACCEPTED:
                logins.accepted_elsewhere(user, client_id)
        if not own:
            asked = {(u, c) for quota_type, u, c, _ in skipped if quota_type == CONNECTION_CLAIM}
            connections.heard(member, asked)
            self._ceilings.received(engine, now_ms)

    def _place(self, engine: QuotaEngine, now_ms: int) -> None:
        membership = self._member.membership
        # with the bus down, each limit is this member's share, held alone
        engine.connections.place(
            LINE_SHARE,
            self._member.member,
            membership.others(now_ms),
            alone=not membership.bus_up(now_ms),
        )
