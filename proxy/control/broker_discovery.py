"""The cluster's brokers, asked up front with the proxy's own client ([cluster]), so every
broker's listener opens before a client asks: a client with cached metadata reconnects to
the broker it knew, through the proxy, after a restart.

Asked again every METADATA_RETRY_S while the cluster cannot be read; readiness waits on it.
On a SASL cluster without [cluster] credentials the brokers refuse the question, and the
listeners open as clients' own Metadata responses name the brokers.
"""

from __future__ import annotations

import asyncio
import logging

from protocol.apis import METADATA
from protocol.errors import ProtocolError
from protocol.metadata import OWN_METADATA_VERSION, metadata_request_body, read_metadata_response
from proxy.control.cluster import ClusterClient
from proxy.runtime.context import ProxyContext

log = logging.getLogger(__name__)
#: how often the brokers are asked again while their metadata could not be read
METADATA_RETRY_S = 1.0


class BrokerDiscovery:
    def __init__(self, context: ProxyContext) -> None:
        self._context = context
        #: why the cluster's brokers are not known yet (None once a response named them)
        self.problem: str | None = "not read yet"
        self._retrying: asyncio.Task[None] | None = None

    @property
    def unread(self) -> str | None:
        """None once the cluster's brokers are known, else why not (readiness)."""
        return None if self._context.brokers.upstream else self.problem

    async def start(self) -> None:
        """Ask once; while unanswered, ask again in the background."""
        if await self._try():
            return
        settings = self._context.settings
        log.warning(
            "no broker listeners opened at start-up ([proxy] upstream_bootstrap_servers "
            "= [%s]: %s): asking again every %gs, not ready until then",
            ", ".join(settings.upstream_bootstrap_servers),
            self.problem,
            METADATA_RETRY_S,
        )
        self._retrying = asyncio.get_running_loop().create_task(self._retry())

    def stop(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()

    async def _try(self) -> bool:
        """Whether the brokers were read; an unreachable or not yet answering cluster is
        False. Anything else (the proxy's own credentials refused) is raised: at start-up,
        a clear error rather than an instance that never turns ready."""
        try:
            await self.ask()
        except (OSError, TimeoutError, ValueError, EOFError, ProtocolError) as exc:
            # a SASL listener closes on a request before authentication (without [cluster]
            # credentials); listeners then open as clients' own Metadata responses name them
            self.problem = f"the cluster's metadata cannot be read: {exc!r}"
            return False
        return True

    async def _retry(self) -> None:
        while not self._context.brokers.upstream:
            await asyncio.sleep(METADATA_RETRY_S)
            try:
                if await self._try():
                    log.info("broker listeners opened: the cluster's metadata was read")
            except Exception as exc:  # asked again whatever it is: readiness waits on it
                problem = f"the cluster's metadata cannot be read: {exc!r}"
                if problem != self.problem:
                    log.error("%s; asking again every %gs", problem, METADATA_RETRY_S)
                self.problem = problem

    async def ask(self) -> None:
        """Every broker the cluster names is advertised (its listener opens at once)."""
        settings = self._context.settings
        version = OWN_METADATA_VERSION
        async with ClusterClient(
            self._context.own_client, settings.upstream_addresses(), settings.connect_timeout_s
        ) as cluster:
            frame = await cluster.ask(METADATA, version, metadata_request_body([]))  # brokers only
        for broker in read_metadata_response(frame, version).brokers:
            self._context.brokers.advertise(broker.node_id, broker.host, broker.port)
