"""The disk guard's eyes ([guards.disk]; docs/ceilings.md#the-disk-guard): every broker's log
directories read with DescribeLogDirs, as the proxy's own principal ([cluster]), every
interval, into the guard (quotas/disk_guard.py), whose ceilings then move.

A broker that does not answer keeps the guard's last decisions for it; once it has not been
read for stale_after_s the log says so, once, and kafka_quota_proxy_disk_guard_stale shows it
until it is read again. The guard never lets a directory go because it could not look.
"""

from __future__ import annotations

import asyncio
import logging

from config.guards import DiskGuardSettings
from protocol.errors import ProtocolError
from protocol.log_dirs import DESCRIBE_LOG_DIRS, VOLUME_VERSION, describe_body, read_log_dirs
from proxy.control.cluster import ClusterClient
from proxy.runtime.context import ProxyContext
from quotas.disk_guard import Reading

log = logging.getLogger(__name__)


class DiskWatch:
    def __init__(self, context: ProxyContext, settings: DiskGuardSettings) -> None:
        self._context = context
        self._settings = settings
        #: the brokers said stale, and the directories said guarded, in the log
        self._stale: set[int] = set()
        self._guarded: set[str] = set()
        context.quotas.engine.disk.configure(
            settings.minimum_rate, int(settings.stale_after_s * 1000)
        )

    async def run(self) -> None:
        while True:
            await self.read_all()
            await asyncio.sleep(self._settings.interval_s)

    async def read_all(self) -> None:
        """Every broker the proxy knows of, each on a connection of its own."""
        context = self._context
        guard = context.quotas.engine.disk.guard
        for node_id, (host, port) in list(context.brokers.upstream.items()):
            try:
                async with ClusterClient(
                    context.own_client, [(host, port)], context.settings.connect_timeout_s
                ) as cluster:
                    frame = await cluster.ask(DESCRIBE_LOG_DIRS, VOLUME_VERSION, describe_body())
                error, dirs = read_log_dirs(frame)
                if error:
                    raise ProtocolError(f"DescribeLogDirs answered error code {error}")
            except (OSError, TimeoutError, ValueError, EOFError, ProtocolError) as exc:
                guard.failed(node_id)
                log.debug("disk guard: broker %d's log directories not read: %r", node_id, exc)
                continue
            readings = [
                Reading(d.path, d.total_bytes, d.usable_bytes, frozenset(d.partitions))
                for d in dirs
                if d.error_code == 0
            ]
            guard.read(node_id, readings, context.clock.now_ms())
        context.quotas.disk_read()
        self._report(context.clock.now_ms())

    def _report(self, now_ms: int) -> None:
        """A line when a broker turns stale or is read again, and when a directory is
        guarded or let go."""
        guard = self._context.quotas.engine.disk.guard
        stale = set(guard.stale(now_ms))
        for node_id in sorted(stale - self._stale):
            log.warning(
                "disk guard: broker %d's log directories not read for %gs: its directories "
                "keep the guard's last decisions until it is read again",
                node_id,
                self._settings.stale_after_s,
            )
        for node_id in sorted(self._stale - stale):
            log.info("disk guard: broker %d's log directories read again", node_id)
        self._stale = stale
        guarded = set(guard.guarded)
        for directory in sorted(guarded - self._guarded):
            held = guard.guarded[directory]
            log.warning(
                "disk guard: log directory %s under its soft limit (%d bytes usable): its "
                "writers of %d partitions are held to %.0f bytes/s",
                directory,
                guard.readings[directory].usable_bytes,
                len(held.partitions),
                held.limit,
            )
        for directory in sorted(self._guarded - guarded):
            log.info("disk guard: log directory %s let go", directory)
        self._guarded = guarded
