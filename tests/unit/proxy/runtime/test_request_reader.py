"""The request reader alone: a frame becomes a Request with its header, principal and time
read once; the connection keeps its principal while nothing changes it; usage samples count
the connection under the principal of its latest request, until it closes."""

from __future__ import annotations

from localkafka.inprocess.harness import VirtualClock, handler_channel, proxy_context
from localkafka.inprocess.wire import request_frame
from protocol.apis import METADATA
from proxy.enforcement import Enforcement
from proxy.runtime.request_reader import RequestReader
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig, QuotaSettings


def reader(usage: UsageRecorder | None = None) -> tuple[RequestReader, VirtualClock]:
    clock = VirtualClock(start_ns=7_000_000)
    context = proxy_context(Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), {}))), clock)
    channel = handler_channel(context, user="alice")
    return RequestReader(channel, clock, context.quotas.sensors, usage), clock


def frame(client_id: bytes, correlation_id: int = 1) -> bytes:
    return request_frame(METADATA, 12, b"\x01\x00\x00\x00", correlation_id, client_id)


def test_a_request_is_read_once_with_its_principal_and_time() -> None:
    requests, _ = reader()
    request = requests.read(frame(b"app", 5))
    assert request.header.correlation_id == 5 and request.received_ns == 7_000_000
    assert (request.principal.user, request.principal.client_id) == ("alice", "app")
    assert requests.read(frame(b"app")).principal is request.principal  # kept
    assert requests.read(frame(b"other")).principal.client_id == "other"


def counted(
    requests: RequestReader, usage: UsageRecorder, client_id: bytes, now_ms: int
) -> dict[str, int]:
    """Read one request of `client_id`, count it as the core does, and close the window:
    the connections each client-id's sample counts."""
    request = requests.read(frame(client_id))
    assert request.usage is not None
    request.usage.requests += 1
    return {sample.client_id: sample.connections for sample in usage.drain(now_ms)}


def test_the_connection_is_counted_under_its_latest_principal_until_it_closes() -> None:
    usage = UsageRecorder("proxy-1", 0)
    requests, _ = reader(usage)
    assert counted(requests, usage, b"app", 1_000) == {"app": 1}
    assert counted(requests, usage, b"batch", 2_000) == {"batch": 1}  # moved, not doubled
    requests.close()
    assert counted(requests, usage, b"late", 3_000) == {"late": 0}  # read, never counted
