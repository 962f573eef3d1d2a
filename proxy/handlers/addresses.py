"""FindCoordinator and DescribeCluster (and the KIP-951 endpoints of Produce and Fetch):
clients only ever learn proxy addresses."""

from __future__ import annotations

from protocol.rewrite import carries_addresses, rewrite_addresses
from proxy.handlers.base import Exchange, Handler, Reply, Session


def advertised(session: Session, frame: bytes, api_key: int, api_version: int) -> bytes:
    """The response with every broker address replaced by the proxy's for that broker."""
    if carries_addresses(api_key, api_version):
        return rewrite_addresses(frame, api_key, api_version, session.advertise) or frame
    return frame


class AddressesHandler(Handler):
    def on_response(self, session: Session, frame: bytes, exchange: Exchange, now_ms: int) -> Reply:
        return Reply(advertised(session, frame, exchange.api_key, exchange.api_version))
