"""/livez and /readyz: what an orchestrator or a load balancer asks before it sends clients.

Liveness depends on nothing outside the process: it is answered from the event loop, so an
answer means the loop runs, and a cluster that is down never gets an instance restarted.
Readiness is the list of conditions under which this instance serves as its operator
configured it; each one names why it fails, so a 503 says what to look at.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

#: a condition of readiness: None while it holds, else why it does not
Check = Callable[[], str | None]

OK = 200
UNAVAILABLE = 503


class Probes:
    def __init__(self, checks: Mapping[str, Check]) -> None:
        self._checks = dict(checks)

    def live(self) -> tuple[int, bytes]:
        return OK, b'{"status":"live"}\n'

    def ready(self) -> tuple[int, bytes]:
        """200 with every condition "ok", or 503 naming the ones that fail."""
        checks = {name: check() for name, check in self._checks.items()}
        ready = all(why is None for why in checks.values())
        body = {
            "status": "ready" if ready else "not ready",
            "checks": {name: "ok" if why is None else why for name, why in checks.items()},
        }
        return (OK if ready else UNAVAILABLE), json.dumps(body).encode() + b"\n"
