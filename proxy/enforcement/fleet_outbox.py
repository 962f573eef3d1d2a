"""What a fleet member sent on its bus (fleet.py): its publications' sequence and when each
was made, until it comes back (the bus's delay), and what the bus did not take, which goes
out with the next publication."""

from __future__ import annotations

from protocol.fleet_records import READS_NEWEST, WHOLE, Publication
from proxy.enforcement.fleet_membership import GONE_AFTER


class Outbox:
    def __init__(self) -> None:
        #: the sequence of the last publication sent
        self.sequence = 0
        #: when this member's publications were made (by sequence), until they come back
        self._published_ms: dict[int, int] = {}
        #: a publication the bus did not take: its use goes out with the next one; and
        #: when the first was lost since one of this member's came back
        self._lost: Publication | None = None
        self._lost_ms: int | None = None

    def send(self, publication: Publication, now_ms: int, gone_after_ms: int) -> Publication:
        """A publication made (numbered sequence + 1), with what the bus did not take added
        unless it was lost over `gone_after_ms` ago (lost)."""
        lost, lost_ms = self._lost, self._lost_ms
        if lost is not None and (lost_ms is None or now_ms - lost_ms <= gone_after_ms):
            publication = _merged(lost, publication)
        self._lost = None
        self.sequence += 1
        self._published_ms[self.sequence] = now_ms
        self._published_ms.pop(self.sequence - 2 * GONE_AFTER, None)  # never read back
        return publication

    def lost(self, publication: Publication, now_ms: int) -> None:
        """The bus did not take a publication: its use goes out with the next one, unless
        the bus has been down so long that the others have fallen back to their shares
        (then it was held by the shares, and would only throttle everyone at once on
        return). One that timed out may have been written after all: its use then counts
        twice, on the safe side. Its standings may be older than ones published since (a
        send fails seconds late): the next publication names every standing again instead,
        and of the lost ones only those it ended, which no standing here names now."""
        self._published_ms.pop(publication.sequence, None)
        if self._lost_ms is None:
            self._lost_ms = now_ms
        # counts and loads are whole, and the next publication names them again
        publication = publication._replace(
            uses=[use for use in publication.uses if use[0] not in WHOLE],
            standings=None
            if publication.standings is None
            else [use for use in publication.standings if not use[3]],
        )
        if self._lost is not None:
            publication = _merged(self._lost, publication)
        self._lost = publication

    def came_back(self, sequence: int, now_ms: int) -> int | None:
        """This member's publication of `sequence` came back from the bus: how long it
        took (None: not one this member is waiting for)."""
        self._lost_ms = None
        published = self._published_ms.pop(sequence, None)
        if published is None:
            return None
        for older in [seq for seq in self._published_ms if seq < sequence]:
            del self._published_ms[older]
        return now_ms - published


def _merged(lost: Publication, publication: Publication) -> Publication:
    """A lost publication's use, standings and producer ids added to a new one's (a
    standing named anew replaces the lost one)."""
    values = {
        (quota_type, user, client_id): value
        for quota_type, user, client_id, value in publication.uses
    }
    for quota_type, user, client_id, value in lost.uses:
        if quota_type != READS_NEWEST:
            key = quota_type, user, client_id
            values[key] = values.get(key, 0.0) + value
    producer_ids = {
        user: [*lost.producer_ids.get(user, ()), *ids]
        for user, ids in publication.producer_ids.items()
    }
    for user, ids in lost.producer_ids.items():
        producer_ids.setdefault(user, ids)
    standings = publication.standings
    if standings is not None and lost.standings:
        named = {(quota_type, user, client_id) for quota_type, user, client_id, _ in standings}
        standings = [*(use for use in lost.standings if use[:3] not in named), *standings]
    return publication._replace(
        uses=[(*key, value) for key, value in values.items()],
        producer_ids=producer_ids,
        standings=standings,
    )
