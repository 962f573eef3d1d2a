"""FindCoordinator and DescribeCluster (and the KIP-951 endpoints of Produce and Fetch):
clients only ever learn proxy addresses."""

from __future__ import annotations

from protocol.rewrite import carries_addresses, rewrite_addresses
from proxy.handlers.base import Channel, Handler, Request


def advertised(channel: Channel, frame: bytes, request: Request) -> bytes:
    """The response with every broker address replaced by the proxy's for that broker."""
    api_key, api_version = request.header.api_key, request.header.api_version
    if carries_addresses(api_key, api_version):
        return rewrite_addresses(frame, api_key, api_version, channel.runtime.advertise) or frame
    return frame


class AddressesHandler(Handler):
    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        return advertised(channel, frame, request)
