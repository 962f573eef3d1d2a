"""DescribeLogDirs (api key 35): each log directory of one broker, its partitions' sizes and,
from v4 (KIP-827), its volume's total and usable bytes. The proxy asks it of each broker as
its own principal (docs/ceilings.md's disk guard); clients' own DescribeLogDirs pass
through as their bytes, so this module is not in protocol.apis.DECODED."""

from __future__ import annotations

from typing import Final, NamedTuple

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from protocol.codec import non_null_array, non_null_string
from protocol.errors import ProtocolError
from protocol.headers import response_body_offset

DESCRIBE_LOG_DIRS: Final = 35
#: the first version with TotalBytes and UsableBytes (KIP-827, Kafka 3.3)
VOLUME_VERSION: Final = 4
#: TotalBytes and UsableBytes where a broker does not know them
UNKNOWN: Final = -1


class LogDir(NamedTuple):
    path: str
    error_code: int
    #: the volume's size and what is left of it; UNKNOWN where the broker does not say
    total_bytes: int
    usable_bytes: int
    #: (topic, partition) -> the size of its current log here (future logs left out)
    partitions: dict[tuple[str, int], int]


def describe_body(version: int = VOLUME_VERSION) -> bytes:
    """Every log directory of the broker, with every partition in it (Topics null)."""
    return bytes(DescribeLogDirsRequest(version=version, topics=None).encode(version=version))


def read_log_dirs(frame: bytes, version: int = VOLUME_VERSION) -> tuple[int, list[LogDir]]:
    """A DescribeLogDirs response: (top-level error code, log directories); ProtocolError
    for one that does not parse."""
    offset = response_body_offset(frame, DESCRIBE_LOG_DIRS, version)
    try:
        msg = DescribeLogDirsResponse.decode(memoryview(frame)[offset:], version=version)
    except Exception as exc:  # the codec's assorted errors on malformed bodies
        raise ProtocolError(f"undecodable DescribeLogDirs v{version} response: {exc}") from exc
    dirs = []
    for result in non_null_array(msg.results):
        partitions = {
            (non_null_string(topic.name), int(p.partition_index)): int(p.partition_size)
            for topic in non_null_array(result.topics)
            for p in non_null_array(topic.partitions)
            if not p.is_future_key
        }
        total = int(result.total_bytes) if version >= VOLUME_VERSION else UNKNOWN
        usable = int(result.usable_bytes) if version >= VOLUME_VERSION else UNKNOWN
        dirs.append(
            LogDir(
                non_null_string(result.log_dir), int(result.error_code), total, usable, partitions
            )
        )
    return int(msg.error_code or 0) if version >= 3 else 0, dirs
