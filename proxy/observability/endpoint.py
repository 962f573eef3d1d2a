"""The proxy's HTTP endpoint: /metrics for Prometheus, /livez and /readyz for whoever
decides where clients go (proxy/observability/probes.py), /explain for whoever asks why a
client is slow (proxy/observability/explaining.py).

A minimal HTTP/1.0 server on the event loop, not prometheus-client's own thread: a scrape
measures sensors that requests record into, and a liveness answer must come from the loop
that serves clients, or it would say nothing about them.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest

from protocol.proxy_header import V1_PREFIX, V2_SIGNATURE
from proxy.observability.explaining import Explainer
from proxy.observability.probes import Probes

_MAX_REQUEST_HEAD = 8192
_READ_TIMEOUT_S = 5.0
_METRICS_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
_JSON = b"application/json"


async def serve_endpoint(
    registry: CollectorRegistry,
    probes: Probes,
    host: str,
    port: int,
    explainer: Explainer | None = None,
) -> asyncio.Server:
    """GET /metrics (or /), /livez, /readyz, /explain?user=... (with an explainer);
    anything else 404."""

    def answer(target: bytes) -> tuple[int, bytes, bytes]:
        path, _, query = target.partition(b"?")
        if path == b"/explain" and explainer is not None:
            status, body = explainer.answer(query.decode("latin-1"))
            return status, _JSON, body
        if path in (b"/metrics", b"/"):
            return 200, _METRICS_TYPE, generate_latest(registry)
        if path in (b"/livez", b"/readyz"):
            status, body = probes.live() if path == b"/livez" else probes.ready()
            return status, _JSON, body
        return 404, b"text/plain", b"not found\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(_request_head(reader), _READ_TIMEOUT_S)
            request_line = head.split(b"\r\n", 1)[0].split()
            if len(request_line) >= 2 and request_line[0] in (b"GET", b"HEAD"):
                status, content_type, body = answer(request_line[1])
            else:
                status, content_type, body = 405, b"text/plain", b"GET or HEAD only\n"
            writer.write(
                b"HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
                % (status, _REASONS[status], content_type, len(body))
                + (b"" if request_line[:1] == [b"HEAD"] else body)
            )
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, limit=_MAX_REQUEST_HEAD)


async def _request_head(reader: asyncio.StreamReader) -> bytes:
    """The request's head, after the PROXY protocol header a load balancer's health check
    may put first (an AWS NLB with proxy protocol on its target group does)."""
    head = await reader.readuntil(b"\r\n\r\n")
    if head.startswith(V1_PREFIX):
        return head.split(b"\r\n", 1)[1]
    if head == V2_SIGNATURE[:4]:  # the v2 signature starts with CR LF CR LF
        fixed = head + await reader.readexactly(12)
        await reader.readexactly(int.from_bytes(fixed[14:16], "big"))
        return await reader.readuntil(b"\r\n\r\n")
    return head


_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    503: b"Service Unavailable",
}
