"""Writing throttle_time_ms into any response, at the place its schema version puts it.

The field is first in most responses, after the partition responses in Produce and after
ErrorCode and ApiKeys in ApiVersions; older versions of some APIs have none, and then only
muting can slow the client. The offset is found by walking the preceding fields as the
message spec defines them, and the int32 is patched in place: nothing else in the response
is decoded or re-encoded.
"""

from __future__ import annotations

from functools import cache
from struct import Struct
from struct import error as struct_error

from protocol.errors import ProtocolError
from protocol.headers import response_body_offset
from protocol.schemas import in_versions, response_schemas
from protocol.skip import Skipper, compile_walker

_INT32 = Struct(">i")


@cache
def _locator(api_key: int, version: int) -> Skipper | None:
    """A walker from the body to the field, or None if this version has no field."""
    schema = response_schemas().get(api_key)
    if schema is None:
        return None
    fields = schema["fields"]
    for index, field in enumerate(fields):
        if field["name"] == "ThrottleTimeMs":
            if "tag" in field or not in_versions(field.get("versions"), version):
                return None
            flexible = in_versions(schema.get("flexibleVersions"), version)
            return compile_walker(fields[:index], version, flexible, trailing_tags=False)
    return None


def _offset(frame: bytes, api_key: int, version: int) -> int | None:
    walker = _locator(api_key, version)
    if walker is None:
        return None
    try:
        offset = walker(frame, response_body_offset(frame, api_key, version))
    except (IndexError, struct_error) as exc:
        raise ProtocolError(f"truncated response api_key={api_key} v{version}") from exc
    if offset + 4 > len(frame):
        raise ProtocolError(f"truncated response api_key={api_key} v{version}")
    return offset


def with_throttle_time(frame: bytes, api_key: int, version: int, throttle_ms: int) -> bytes:
    """The response carrying max(broker's throttle, throttle_ms); unchanged if it has no field."""
    offset = _offset(frame, api_key, version)
    if offset is None:
        return frame
    if _INT32.unpack_from(frame, offset)[0] >= throttle_ms:
        return frame
    patched = bytearray(frame)
    _INT32.pack_into(patched, offset, throttle_ms)
    return bytes(patched)
