"""[proxy] workers = N: N processes that share every listener port, each with its own event
loop and its own connections.

The parent forks the workers once the config is loaded and then only looks after them: it
forwards SIGTERM, SIGINT and SIGHUP to every worker, starts again one that dies (after
RESTART_S), stops them all if one fails to start, and exits once all have drained. The kernel
spreads connections over the workers (SO_REUSEPORT); the workers of an instance are members
of one fleet (ProxyConfig.fleet_name), so a principal holds one budget whichever worker its
connections land on. A worker whose parent is gone stops too.

Metrics are per worker, on [metrics] port + the worker's index, with a `worker` label on every
series: a worker's sensors and connections are its own, one endpoint for the host would have
every scrape wait on every worker, and a stuck worker shows as a target down rather than
vanishing into a sum (`sum without (worker)` adds them up in Prometheus).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

log = logging.getLogger(__name__)

#: how long a worker that died is left before it is started again
RESTART_S: Final = 1.0
#: how often the parent looks at its workers, and a worker at its parent
WATCH_S: Final = 0.2
_FORWARDED: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class Worker:
    """One worker, as it knows itself."""

    index: int
    count: int
    #: written to once the worker serves
    ready_fd: int
    parent_pid: int

    def ready(self) -> None:
        os.write(self.ready_fd, b"r")

    def orphaned(self) -> bool:
        return os.getppid() != self.parent_pid

    def port(self, base: int) -> int:
        """A port of its own from a base ([metrics] port); 0 stays 0 (the system picks)."""
        return base + self.index if base else 0


def run_workers(count: int, serve: Callable[[Worker], int], announce: Callable[[], None]) -> int:
    """Fork `count` workers, each running serve(worker) to its exit code; `announce()` once
    all serve. Returns once every worker has exited: 0 after a signal, else the first
    failing worker's code."""
    ready_read, ready_write = os.pipe()
    parent = os.getpid()
    children: dict[int, int] = {}
    stopping: list[int] = []  # the signal that stops the workers, once one came

    def spawn(index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            for sig in _FORWARDED:
                signal.signal(sig, signal.SIG_DFL)
            os.close(ready_read)
            code = 1
            try:
                code = serve(Worker(index, count, ready_write, parent))
            finally:
                os._exit(code)
        children[pid] = index

    def forward(sig: int, _frame: object) -> None:
        if sig != signal.SIGHUP:
            stopping.append(sig)
        for pid in children:
            os.kill(pid, sig)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    for index in range(count):
        spawn(index)
    ready, code = 0, 0
    restarts: dict[int, float] = {}  # worker index -> when to start it again
    while children or restarts:
        readable, _, _ = select.select([ready_read], [], [], WATCH_S)
        if readable:
            before = ready
            ready += len(os.read(ready_read, 64))
            if before < count <= ready:
                announce()
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            index = children.pop(pid)
            exit_code = os.waitstatus_to_exitcode(status)
            if stopping:
                continue
            if ready < count:  # a worker that cannot start: none will
                log.error("worker %d could not start (exit %d): stopping", index, exit_code)
                code = exit_code or 1
                forward(signal.SIGTERM, None)
            else:
                log.error("worker %d exited (%d): starting it again", index, exit_code)
                restarts[index] = time.monotonic() + RESTART_S
        if stopping:
            restarts.clear()
        for index, when in list(restarts.items()):
            if time.monotonic() >= when:
                del restarts[index]
                spawn(index)
    return code
