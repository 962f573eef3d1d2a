"""A real HAProxy (Debian's, `make haproxy`) in TCP mode in front of proxy instances, as
docs/operations.md ("Behind a load balancer") configures it, and what it says of them."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: what the balancer's server connections come from: the proxies' trusted_sources
BALANCER_SOURCE = "127.0.0.9"


@dataclass(frozen=True)
class Server:
    name: str
    address: str
    #: where its /readyz is (the proxy's metrics endpoint)
    health: str


@dataclass(frozen=True)
class Frontend:
    name: str
    bind: str
    servers: Sequence[Server]
    #: "send-proxy-v2" or "send-proxy" (v1)
    header: str = "send-proxy-v2"


def config_text(frontends: Sequence[Frontend], stats_socket: Path) -> str:
    """docs/operations.md's configuration, with these frontends."""
    lines = [
        "global",
        f"    stats socket {stats_socket} level admin",
        "defaults",
        "    mode tcp",
        "    timeout connect 2s",
        "    timeout client 60s",
        "    timeout server 60s",
        "    timeout check 1s",
        "    retries 3",
        "    option redispatch",
    ]
    for frontend in frontends:
        lines += [
            f"frontend {frontend.name}",
            f"    bind {frontend.bind}",
            f"    default_backend {frontend.name}",
            f"backend {frontend.name}",
            "    option httpchk",
            "    http-check send meth GET uri /readyz ver HTTP/1.0",
            "    http-check expect status 200",
        ]
        for server in frontend.servers:
            health_host, health_port = server.health.rsplit(":", 1)
            lines.append(
                f"    server {server.name} {server.address} {frontend.header} "
                f"source {BALANCER_SOURCE} check addr {health_host} port {health_port} "
                "inter 250 fall 1 rise 2"
            )
    return "\n".join(lines) + "\n"


class RunningHaproxy:
    def __init__(self, tmp: Path, frontends: Sequence[Frontend]) -> None:
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.stats_socket = tmp / "haproxy.sock"
        self.config = tmp / "haproxy.cfg"
        self.config.write_text(config_text(frontends, self.stats_socket))
        check = subprocess.run([binary, "-c", "-f", str(self.config)], capture_output=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = tmp / "haproxy.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen([binary, "-db", "-f", str(self.config)], stderr=log)
        deadline = time.monotonic() + 10
        while not self.stats_socket.exists():
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "HAProxy did not start"
            time.sleep(0.05)

    def states(self) -> dict[tuple[str, str], str]:
        """(backend, server) -> its status ("UP", "DOWN", "UP 1/2" ...)."""
        with socket.socket(socket.AF_UNIX) as stats:
            stats.connect(str(self.stats_socket))
            stats.sendall(b"show stat\n")
            data = b""
            while chunk := stats.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        columns = lines[0].lstrip("# ").split(",")
        status = columns.index("status")
        rows = [line.split(",") for line in lines[1:] if line]
        return {
            (row[0], row[1]): row[status] for row in rows if row[1] not in ("FRONTEND", "BACKEND")
        }

    def until_up(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(state == "UP" for state in self.states().values()):
            assert time.monotonic() < deadline, self.states()
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
