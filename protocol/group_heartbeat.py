"""ConsumerGroupHeartbeat (KIP-848): whether a request only keeps its member alive.

A member heartbeats every heartbeat interval and names what changed since its last one; a
field left null is unchanged. The request-rate guard counts the heartbeats that join, leave,
change the subscription or acknowledge an assignment: what makes the coordinator work. Every
version is flexible, so the header carries tagged fields.
"""

from __future__ import annotations

from struct import Struct
from struct import error as StructError

from protocol.errors import ProtocolError
from protocol.headers import RequestHeader
from protocol.primitives import read_length, skip_string, skip_tagged_fields

_INT16 = Struct(">h")
_INT32 = Struct(">i")


def keeps_alive(frame: bytes, header: RequestHeader) -> bool:
    """True for a member in the group (epoch above 0) whose heartbeat names no
    subscription, regex or acknowledged partitions. ProtocolError for a body cut short."""
    try:
        pos = skip_tagged_fields(frame, header.client_id_end)
        pos = skip_string(frame, pos, True)  # GroupId
        pos = skip_string(frame, pos, True)  # MemberId
        (epoch,) = _INT32.unpack_from(frame, pos)
        if epoch <= 0:  # joining (0), or leaving (-1, -2)
            return False
        pos = skip_string(frame, pos + 4, True)  # InstanceId
        pos = skip_string(frame, pos, True) + 4  # RackId, RebalanceTimeoutMs
        topics, pos = read_length(frame, pos, True, _INT32)  # SubscribedTopicNames
        if topics >= 0:
            return False
        if header.api_version >= 1:
            regex, pos = read_length(frame, pos, True, _INT16)  # SubscribedTopicRegex
            if regex >= 0:
                return False
        pos = skip_string(frame, pos, True)  # ServerAssignor
        partitions, pos = read_length(frame, pos, True, _INT32)  # TopicPartitions
    except (IndexError, StructError) as exc:
        raise ProtocolError(f"malformed ConsumerGroupHeartbeat: {exc!r}") from None
    if pos > len(frame):
        raise ProtocolError("ConsumerGroupHeartbeat runs past its frame")
    return partitions < 0
