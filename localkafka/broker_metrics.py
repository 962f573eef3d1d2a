"""A broker's request counts and request-handler idle time while a workload runs, read over
JMX by localkafka's BrokerRequestMetrics helper: what reached the broker, whoever sent it."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from localkafka.cluster import KafkaCluster
from localkafka.jars import java_command

HELPER = Path(__file__).parent / "java" / "BrokerRequestMetrics.java"
INTERVAL_MS = 500


@dataclass
class Snapshot:
    #: monotonic seconds when it was read here
    at: float
    #: request type -> requests since the broker started
    requests: dict[str, int] = field(default_factory=dict)
    #: the handler pool's idle nanoseconds per thread since the broker started
    idle_ns: int = 0


@dataclass(frozen=True)
class Span:
    """Between two snapshots: requests per second by type, and the handlers' idle share."""

    seconds: float
    rates: dict[str, float]
    idle: float


class BrokerMetrics:
    def __init__(self, kafka: KafkaCluster, broker: int = 0, seconds: float = 3600) -> None:
        process = kafka.brokers[broker].process
        assert process is not None
        count = str(int(seconds * 1000 / INTERVAL_MS))
        self._jmx = subprocess.Popen(
            java_command(str(HELPER), [str(process.pid), str(INTERVAL_MS), count], heap="128m"),
            stdout=subprocess.PIPE,
            text=True,
        )
        self._snapshots: list[Snapshot] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._jmx.stdout is not None
        current = Snapshot(0.0)
        for line in self._jmx.stdout:
            parts = line.split()
            if parts == ["end"]:
                current.at = time.monotonic()
                with self._changed:
                    self._snapshots.append(current)
                    self._changed.notify_all()
                current = Snapshot(0.0)
            elif len(parts) == 4 and parts[1] == "requests":
                current.requests[parts[2]] = int(parts[3])
            elif len(parts) == 3 and parts[1] == "idle":
                current.idle_ns = int(float(parts[2]))

    def snapshot(self, timeout_s: float = 30.0) -> Snapshot:
        """The next snapshot read from now on."""
        with self._changed:
            seen = len(self._snapshots)
            if not self._changed.wait_for(lambda: len(self._snapshots) > seen, timeout_s):
                raise TimeoutError("the broker's JMX metrics did not come")
            return self._snapshots[-1]

    @staticmethod
    def span(first: Snapshot, last: Snapshot) -> Span:
        seconds = last.at - first.at
        rates = {
            kind: (count - first.requests.get(kind, 0)) / seconds
            for kind, count in last.requests.items()
        }
        return Span(seconds, rates, (last.idle_ns - first.idle_ns) / (seconds * 1e9))

    def stop(self) -> None:
        self._jmx.terminate()
        self._jmx.wait(10)
