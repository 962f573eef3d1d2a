"""The records of a fleet's bus topic: one per member per sync interval, what its sensors
recorded since its previous one, and the producer ids it admitted.

Binary, since a member reads every other member's records several times a second, and laid
out to be read in few Python steps: the names once, then the uses as fixed-size entries
(struct.iter_unpack reads them all in one call):

    version u8 | member str | sequence u32 | time_ms u64 | names u16 | uses u32 |
        producer-id sets u32 | [standings u32] | name str ... | use ... |
        [standing ...] | producer ids ...
    use, standing:   quota type u8 | user name u16 | client-id name u16 | value f64
    producer ids:    user name u16 | count u32 | id i64 ...
    str:             length u16 | UTF-8

A use is keyed by its sensor's metric tags, which every member resolves a client to alike; a
record names at most 65,535 distinct users and client-ids (split keeps it under that).

Version 2 adds standings (issue 51): a standing is the use per sync interval its publisher
expects to keep charging, which every reader adds for it, interval by interval, until the
publisher names another; the uses of a version 2 record are then what its use differed from
its standings (negative when it used less). Version 1 has no standings: its uses are all its
use. Version 3 has the layout of version 2, and says its writer names a standing again only
when a reader asks (RESTATE_ASKED: it missed a record, or heard a member anew), not every
few seconds as a writer of version 2 does for readers that may have missed it. A member
reads all three, and writes the oldest version a member it hears reads (version 1 or 2,
proxy/enforcement/fleet.py): a fleet mid-roll works as the older one. Such a record's first
use is of quota type READS_NEWEST, its value the version its writer reads, so that its
writer is not taken for an older member itself.

Some quota types are not uses, and a member from before them skips them as quota types it
does not know: OPEN_CONNECTIONS, its writer's count of a principal's open connections, whole
(quotas/principal_connections.py), and CONNECTION_CLAIM, the connections of a principal its
writer asks to hold, which every member grants or clips alike in the order the bus gives;
FAILED_LOGINS, the SASL authentications the brokers
refused to a user (the user name; "" for a token that names none) from a client address (the
client-id name) since its writer's previous record, and LOGIN_ACCEPTED, one that succeeded
(proxy/enforcement/failed_logins.py); CEILING_USED, CEILING_FIXED and CEILING_WEIGHT, its
writer's Load of a broker's ceiling (the ceiling's quota key as the user name, the node id as
the client-id name; quotas/ceilings.py), whole.

An owner's totals (TOTALS as the first byte; proxy/enforcement/fleet_owners.py) have a
layout of their own, which no member of version 3 or older reads:

    4 u8 | owner str | partition u16 | generation u32 | round u32 | bitmap size u8 |
        names u16 | uses u32 | standings u32 | bitmap | name str ... | use ... | standing ...

The bitmap holds two bits a member, by its place in the group: how many of its
contributions the totals add (0 to MOST_FOLDED).
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

#: the newest version: what a member writes once no member of an older one is heard
VERSION: Final = 3
#: the version whose writers name every standing again every few seconds (its readers ask
#: for none)
RESTATING: Final = 2
#: the version without standings
STANDINGLESS: Final = 1
#: the first byte of an owner's totals, which a member of version 3 or older cannot read
TOTALS: Final = 4
#: the most contributions of one member one owner's totals add (two bits each)
MOST_FOLDED: Final = 3
#: the quota type of a use that says its record's writer reads VERSION though it wrote
#: STANDINGLESS (for an older member it hears): a reader of version 1 skips a quota type it
#: does not know, and no quota type is numbered so
READS_NEWEST: Final = 255
#: the quota type of a member's count of a principal's open connections, whole
OPEN_CONNECTIONS: Final = 254
#: the quota types of the failed-login backoff's refusals and successes
FAILED_LOGINS: Final = 253
LOGIN_ACCEPTED: Final = 252
#: the quota types of a member's Load of a broker's ceiling, one for each of its parts
CEILING_USED: Final = 251
CEILING_FIXED: Final = 250
CEILING_WEIGHT: Final = 249
#: the quota type of a member's ask for the connections of a principal it may hold
CONNECTION_CLAIM: Final = 248
#: the quota type of a reader's ask that every member name its standings again (it missed a
#: record, or heard a member it had taken for gone)
RESTATE_ASKED: Final = 247
#: the quota types that are not uses of a sensor: what an owner does not add up
SPECIAL: Final = frozenset(range(RESTATE_ASKED, READS_NEWEST + 1))
#: the quota types whose values are whole, not added up: a publication the bus lost is not
#: merged into the next for them, which names them again
WHOLE: Final = frozenset(
    {OPEN_CONNECTIONS, CONNECTION_CLAIM, CEILING_USED, CEILING_FIXED, CEILING_WEIGHT}
)

_U16 = struct.Struct(">H")
_HEAD = struct.Struct(">IQHII")
_U32 = struct.Struct(">I")
_USE = struct.Struct(">BHHd")
_IDS_HEAD = struct.Struct(">HI")
_TOTALS_HEAD = struct.Struct(">HIIBHII")
_KEY = struct.Struct(">HI")
#: the most names one record holds (its indices are u16)
MAX_NAMES: Final = (1 << 16) - 1


#: one sensor's use: (its quota type's index in quotas.entities.QuotaType, user tag,
#: client-id tag, value). A plain tuple, made and unpacked by the thousand per interval
#: (a NamedTuple's constructor costs three times as much)
Use = tuple[int, str, str, float]


class Publication(NamedTuple):
    member: str
    sequence: int
    #: the publisher's wall clock (ms), for logs only: members' clocks do not compare
    time_ms: int
    uses: list[Use]
    #: user tag -> producer ids admitted since the previous publication (KIP-936)
    producer_ids: dict[str, list[int]]
    #: each sensor's use per interval from now on, which readers add for the publisher on
    #: their own (a standing of 0 ends one); None in a record of STANDINGLESS
    standings: list[Use] | None = None
    #: the record's version where it has standings: VERSION, or RESTATING for a reader of it
    version: int = VERSION


class Totals(NamedTuple):
    """What an owner added up of its partition's contributions since its previous totals
    (proxy/enforcement/fleet_owners.py)."""

    owner: str
    partition: int
    #: the group's generation the owner folded in (a member's place in the group is of one
    #: generation), and its totals of the partition in it, counted from 0 (a new owner's
    #: first totals name every standing it holds, and so do the next if those were lost)
    generation: int
    round: int
    #: the members whose contributions these totals add, by their place in the group, and
    #: how many of each (1 to MOST_FOLDED: a member keeps no more unfolded)
    folded: dict[int, int]
    #: per sensor, the use of every contribution folded
    uses: list[Use]
    #: per sensor whose standings changed (or all, asked again), their sum (0 ends them)
    standings: list[Use]


def _string(text: str) -> bytes:
    data = text.encode()
    return _U16.pack(len(data)) + data


def encode(publication: Publication) -> bytes:
    """ValueError when the record would name more than MAX_NAMES users and client-ids."""
    names: dict[str, int] = {}
    uses = _entries(publication.uses, names)
    standings = publication.standings
    entries = uses if standings is None else [*uses, *_entries(standings, names)]
    id_sets = [
        _IDS_HEAD.pack(names.setdefault(user, len(names)), len(ids))
        + struct.pack(f">{len(ids)}q", *ids)
        for user, ids in publication.producer_ids.items()
    ]
    if len(names) > MAX_NAMES:
        raise ValueError(f"a fleet record names {len(names)} users and client-ids")
    head = _HEAD.pack(
        publication.sequence, publication.time_ms, len(names), len(uses), len(id_sets)
    )
    if standings is None:
        version, counts = STANDINGLESS, head
    else:
        version, counts = publication.version, head + _U32.pack(len(standings))
    return b"".join(
        [
            bytes([version]),
            _string(publication.member),
            counts,
            *map(_string, names),
            *entries,
            *id_sets,
        ]
    )


def _entries(uses: list[Use], names: dict[str, int]) -> list[bytes]:
    return [
        _USE.pack(
            quota_type,
            names.setdefault(user, len(names)),
            names.setdefault(client_id, len(names)),
            value,
        )
        for quota_type, user, client_id, value in uses
    ]


def decode(data: bytes) -> Publication:
    """ValueError for what is not a record of a version this proxy reads."""
    try:
        if not data or data[0] not in (STANDINGLESS, RESTATING, VERSION):
            raise ValueError(
                f"a fleet record of version {data[:1]!r}, this proxy reads {STANDINGLESS}"
                f" to {VERSION}"
            )
        pos = 1
        member, pos = _read_string(data, pos)
        sequence, time_ms, name_count, use_count, id_sets = _HEAD.unpack_from(data, pos)
        pos += _HEAD.size
        standing_count = None
        if data[0] != STANDINGLESS:
            (standing_count,) = _U32.unpack_from(data, pos)
            pos += _U32.size
        names = []
        unpack_length = _U16.unpack_from
        for _ in range(name_count):
            (length,) = unpack_length(data, pos)
            pos += 2 + length
            names.append(data[pos - length : pos].decode())
        end = pos + (use_count + (standing_count or 0)) * _USE.size
        if end > len(data):
            raise ValueError("a fleet record cut short")
        entries = [
            (quota_type, names[user], names[client_id], value)
            for quota_type, user, client_id, value in _USE.iter_unpack(data[pos:end])
        ]
        uses = entries[:use_count]
        standings = None if standing_count is None else entries[use_count:]
        pos = end
        producer_ids = {}
        for _ in range(id_sets):
            user, count = _IDS_HEAD.unpack_from(data, pos)
            pos += _IDS_HEAD.size
            producer_ids[names[user]] = list(struct.unpack_from(f">{count}q", data, pos))
            pos += 8 * count
    except (UnicodeDecodeError, struct.error, IndexError) as exc:
        raise ValueError(f"not a fleet record: {exc}") from exc
    if pos != len(data):
        raise ValueError("a fleet record with bytes past its end")
    version = VERSION if standings is None else data[0]
    return Publication(member, sequence, time_ms, uses, producer_ids, standings, version)


def encode_totals(totals: Totals) -> bytes:
    """ValueError when the totals would name more than MAX_NAMES users and client-ids."""
    names: dict[str, int] = {}
    entries = _entries([*totals.uses, *totals.standings], names)
    if len(names) > MAX_NAMES:
        raise ValueError(f"an owner's totals name {len(names)} users and client-ids")
    # two bits a member: how many of its contributions were folded
    bitmap = bytearray((max(totals.folded, default=-1) + 4) // 4)
    for member, count in totals.folded.items():
        if not 0 < count <= MOST_FOLDED:
            raise ValueError(f"{count} contributions of one member in one owner's totals")
        bitmap[member // 4] |= count << (2 * (member % 4))
    return b"".join(
        [
            bytes([TOTALS]),
            _string(totals.owner),
            _TOTALS_HEAD.pack(
                totals.partition,
                totals.generation,
                totals.round,
                len(bitmap),
                len(names),
                len(totals.uses),
                len(totals.standings),
            ),
            bytes(bitmap),
            *map(_string, names),
            *entries,
        ]
    )


def decode_totals(data: bytes) -> Totals:
    """ValueError for what is not an owner's totals."""
    try:
        if not data or data[0] != TOTALS:
            raise ValueError(f"not an owner's totals: version {data[:1]!r}")
        owner, pos = _read_string(data, 1)
        partition, generation, round_, bitmap_size, name_count, use_count, standing_count = (
            _TOTALS_HEAD.unpack_from(data, pos)
        )
        pos += _TOTALS_HEAD.size
        bitmap = data[pos : pos + bitmap_size]
        pos += bitmap_size
        folded = {
            4 * index + place: count
            for index, byte in enumerate(bitmap)
            for place in range(4)
            if (count := byte >> (2 * place) & 3)
        }
        names = []
        for _ in range(name_count):
            name, pos = _read_string(data, pos)
            names.append(name)
        end = pos + (use_count + standing_count) * _USE.size
        if end != len(data):
            raise ValueError("an owner's totals of the wrong length")
        entries = [
            (quota_type, names[user], names[client_id], value)
            for quota_type, user, client_id, value in _USE.iter_unpack(data[pos:end])
        ]
    except (UnicodeDecodeError, struct.error, IndexError) as exc:
        raise ValueError(f"not an owner's totals: {exc}") from exc
    return Totals(
        owner, partition, generation, round_, folded, entries[:use_count], entries[use_count:]
    )


def contribution_key(place: int, generation: int) -> bytes:
    """A contribution's record key: its writer's place in the group, in a generation."""
    return _KEY.pack(place, generation)


def read_contribution_key(key: bytes | None) -> tuple[int, int]:
    """(place, generation); ValueError for what is not a contribution's key."""
    if key is None or len(key) != _KEY.size:
        raise ValueError(f"not a contribution's key: {key!r}")
    place, generation = _KEY.unpack(key)
    return place, generation


def encode_member(name: str, owned: list[int]) -> bytes:
    """What a member tells the group's leader when it joins: its name in the fleet, and the
    partitions it owns (the leader leaves them where they are as far as it can)."""
    return _string(name) + _U16.pack(len(owned)) + b"".join(map(_U16.pack, owned))


def decode_member(data: bytes) -> tuple[str, list[int]]:
    """ValueError for what encode_member did not write."""
    try:
        name, pos = _read_string(data, 0)
        (count,) = _U16.unpack_from(data, pos)
        owned = [each for (each,) in _U16.iter_unpack(data[pos + 2 : pos + 2 + 2 * count])]
    except (UnicodeDecodeError, struct.error) as exc:
        raise ValueError(f"not a fleet member's metadata: {exc}") from exc
    if len(owned) != count:
        raise ValueError("a fleet member's metadata cut short")
    return name, owned


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = _U16.unpack_from(data, pos)
    start = pos + 2
    if start + length > len(data):
        raise ValueError("a fleet record cut short")
    return data[start : start + length].decode(), start + length


def split(publication: Publication, per_record: int) -> list[Publication]:
    """A publication as records of at most `per_record` uses, as many standings and as
    many users' producer ids each: every one is read as a publication of the same member
    and sequence (and each carries the mark of READS_NEWEST if the publication does: a
    reader takes the writer of a part without it for an older member)."""
    uses, id_sets = publication.uses, list(publication.producer_ids.items())
    standings = publication.standings
    mark: list[Use] = []
    if uses and uses[0][0] == READS_NEWEST:
        mark, uses = uses[:1], uses[1:]
    most = max(len(uses), len(id_sets), len(standings or ()))
    if most <= per_record:
        return [publication]
    return [
        publication._replace(
            uses=[*mark, *uses[start : start + per_record]],
            producer_ids=dict(id_sets[start : start + per_record]),
            standings=None if standings is None else standings[start : start + per_record],
        )
        for start in range(0, most, per_record)
    ]
