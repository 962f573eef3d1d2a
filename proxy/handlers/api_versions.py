"""ApiVersions: a client never negotiates a version of an API the proxy cannot decode."""

from __future__ import annotations

from collections.abc import Mapping

from protocol.api_versions import cap_api_versions, unsupported_version_response
from protocol.apis import API_VERSIONS
from proxy.handlers.base import Answer, Channel, Forward, Handler, Outcome, Request, Stage


class ApiVersionsHandler(Handler):
    #: clients ask it before they authenticate, and it says nothing of authentication
    stage = Stage.NEGOTIATION

    def __init__(self, caps: Mapping[int, int]) -> None:
        #: api_key -> the highest version the proxy decodes, for the APIs it acts on
        self._caps = caps

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        """A request newer than the proxy knows is answered as a broker would (KIP-511)."""
        header = request.header
        if header.api_version > self._caps[API_VERSIONS]:
            return Answer(
                unsupported_version_response(header.correlation_id, self._caps[API_VERSIONS])
            )
        return Forward(request.frame)

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        return cap_api_versions(frame, request.header.api_version, self._caps) or frame
