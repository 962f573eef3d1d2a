"""The records of a fleet's bus topic: one per member per sync interval, what its sensors
recorded since its previous one, and the producer ids it admitted.

Binary, since a member reads every other member's records several times a second:

    version u8 | member str | sequence u32 | time_ms u64 | uses u32 | producer-id sets u32
    use:             quota type u8 | user str | client-id str | value f64
    producer ids:    user str | count u32 | id i64 ...
    str:             length u16 | UTF-8

A use is keyed by its sensor's metric tags, which every member resolves a client to alike.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

VERSION: Final = 1

_U16 = struct.Struct(">H")
_HEAD = struct.Struct(">IQII")
_COUNT = struct.Struct(">I")
_F64 = struct.Struct(">d")


class Use(NamedTuple):
    #: the quota type's index in quotas.entities.QuotaType
    quota_type: int
    user: str
    client_id: str
    value: float


class Publication(NamedTuple):
    member: str
    sequence: int
    #: the publisher's wall clock (ms), for logs only: members' clocks do not compare
    time_ms: int
    uses: list[Use]
    #: user tag -> producer ids admitted since the previous publication (KIP-936)
    producer_ids: dict[str, list[int]]


def _string(text: str) -> bytes:
    data = text.encode()
    return _U16.pack(len(data)) + data


def encode(publication: Publication) -> bytes:
    parts = [
        bytes([VERSION]),
        _string(publication.member),
        _HEAD.pack(
            publication.sequence,
            publication.time_ms,
            len(publication.uses),
            len(publication.producer_ids),
        ),
    ]
    for use in publication.uses:
        parts += [
            bytes([use.quota_type]),
            _string(use.user),
            _string(use.client_id),
            _F64.pack(use.value),
        ]
    for user, ids in publication.producer_ids.items():
        parts += [_string(user), _COUNT.pack(len(ids)), struct.pack(f">{len(ids)}q", *ids)]
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise ValueError("a fleet record cut short")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def string(self) -> str:
        return self.take(self._u16()).decode()

    def _u16(self) -> int:
        value: int = _U16.unpack(self.take(2))[0]
        return value


def decode(data: bytes) -> Publication:
    """ValueError for what is not a record of this version."""
    reader = _Reader(data)
    try:
        if reader.take(1)[0] != VERSION:
            raise ValueError(f"a fleet record of version {data[0]}, this proxy reads {VERSION}")
        member = reader.string()
        sequence, time_ms, uses, id_sets = _HEAD.unpack(reader.take(_HEAD.size))
        read = [
            Use(reader.take(1)[0], reader.string(), reader.string(), _F64.unpack(reader.take(8))[0])
            for _ in range(uses)
        ]
        producer_ids = {}
        for _ in range(id_sets):
            user = reader.string()
            count = _COUNT.unpack(reader.take(4))[0]
            producer_ids[user] = list(struct.unpack(f">{count}q", reader.take(8 * count)))
    except (UnicodeDecodeError, struct.error) as exc:
        raise ValueError(f"not a fleet record: {exc}") from exc
    if reader.pos != len(data):
        raise ValueError("a fleet record with bytes past its end")
    return Publication(member, sequence, time_ms, read, producer_ids)


def split(publication: Publication, uses_per_record: int) -> list[Publication]:
    """A publication as records of at most `uses_per_record` uses each (the producer ids go
    with the first): every one is read as a publication of the same member and sequence."""
    uses = publication.uses
    if len(uses) <= uses_per_record:
        return [publication]
    return [
        publication._replace(
            uses=uses[start : start + uses_per_record],
            producer_ids=publication.producer_ids if start == 0 else {},
        )
        for start in range(0, len(uses), uses_per_record)
    ]
