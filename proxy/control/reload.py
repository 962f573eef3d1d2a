"""Config reload on SIGHUP and on file change: new limits for live connections, or nothing.

A file that does not validate is refused with the same errors start-up would print, and
the running config stays in force; connections never drop for a reload. The certificate,
key and truststore files of [listener] and [upstream] are watched too: a renewed
certificate is taken by the connections made after it, as Kafka's dynamic SSL configs are.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from config.errors import ConfigError
from config.loader import ProxyConfig, load_config
from config.proxy import LIVE_PROXY_KEYS
from proxy.runtime.counters import ProxyStats

log = logging.getLogger(__name__)

_FileState = tuple[int, int, int] | None


def _refuse_protocol_changes(running: ProxyConfig, new: ProxyConfig) -> None:
    """A reload takes renewed certificates, truststores and mapping rules, never a new
    security.protocol: listeners and upstream connections would change what they speak
    under clients already connected."""
    problems = [
        f"[{side}] key 'security.protocol': {old.security_protocol} -> "
        f"{changed.security_protocol} needs a restart"
        for side, old, changed in (
            ("listener", running.listener, new.listener),
            ("upstream", running.upstream, new.upstream),
        )
        if old.security_protocol != changed.security_protocol
    ]
    if problems:
        raise ConfigError(running.path or "config", problems)


def _file_state(path: Path) -> _FileState:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


class ConfigReloader:
    def __init__(
        self, config: ProxyConfig, apply: Callable[[ProxyConfig], None], stats: ProxyStats
    ) -> None:
        assert config.path is not None
        self.path = config.path
        self.config = config
        self._apply = apply
        self._stats = stats
        self._seen = self._states(config)

    @staticmethod
    def _states(config: ProxyConfig) -> dict[Path, _FileState]:
        return {path: _file_state(path) for path in config.watched_files()}

    def reload(self, reason: str) -> bool:
        # taken before the files are read: one replaced while they are is seen as changed
        self._seen = self._states(self.config)  # a refused file is not retried until it changes
        try:
            config = load_config(self.path)
            _refuse_protocol_changes(self.config, config)
        except ConfigError as exc:
            self._stats.reloads_failed += 1
            self._stats.last_reload_succeeded = False
            log.error("config reload (%s) refused; the running config stays:\n%s", reason, exc)
            return False
        live = {key: getattr(config.proxy, key) for key in LIVE_PROXY_KEYS}
        for section, old, new in (
            ("proxy", replace(self.config.proxy, **live), config.proxy),
            ("metrics", self.config.metrics, config.metrics),
            ("usage", self.config.usage, config.usage),
            ("quota_store", self.config.quota_store, config.quota_store),
            ("proxy_protocol", self.config.proxy_protocol, config.proxy_protocol),
            ("sni", self.config.sni, config.sni),
        ):
            if old != new:
                log.warning(
                    "config reload (%s): [%s] changes apply after a restart%s",
                    reason,
                    section,
                    f" (except {', '.join(LIVE_PROXY_KEYS)})" if section == "proxy" else "",
                )
        self._apply(config)
        self.config = config
        seen = self._seen  # files the new config names for the first time are read now
        self._seen = {
            path: seen[path] if path in seen else _file_state(path)
            for path in config.watched_files()
        }
        self._stats.reloads_succeeded += 1
        self._stats.last_reload_succeeded = True
        log.info("config reloaded (%s) from %s", reason, self.path)
        return True

    async def watch(self, interval_s: float) -> None:
        """Poll the files' mtime, size and inode (editors and certificate renewals often
        replace a file rather than write it)."""
        while True:
            await asyncio.sleep(interval_s)
            changed = [path for path, seen in self._seen.items() if _file_state(path) != seen]
            if changed:
                self.reload(f"{', '.join(map(str, changed))} changed")
