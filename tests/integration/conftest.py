"""A real Kafka (from the Maven-fetched jars) and the real proxy CLI in front of it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from localkafka import LOOPBACK, KafkaCluster, free_port


def free_port_block(count: int) -> int:
    """A base port such that base+1 .. base+count are all free (for broker listeners)."""
    for _ in range(200):
        base = free_port() - count - 1
        try:
            socks = []
            for offset in range(1, count + 1):
                sock = socket.socket()
                socks.append(sock)
                sock.bind((LOOPBACK, base + offset))
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
        return base
    raise RuntimeError("no free block of ports")


@dataclass
class RunningProxy:
    process: subprocess.Popen[str]
    bootstrap: str
    broker_port_base: int
    config_path: Path
    log_path: Path

    def broker_address(self, node_id: int) -> str:
        return f"{LOOPBACK}:{self.broker_port_base + node_id}"

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_proxy(
    tmp: Path, upstream: str, brokers: int, extra: str = "", name: str = "proxy"
) -> RunningProxy:
    """Run `kafka-quota-proxy run` as an operator would, and wait for its bootstrap line."""
    base = free_port_block(brokers)
    config = tmp / f"{name}.toml"
    servers = ", ".join(f'"{s}"' for s in upstream.split(","))
    config.write_text(
        f"[proxy]\nupstream_bootstrap_servers = [{servers}]\n"
        f"bootstrap_port = {free_port()}\nbroker_port_base = {base}\n{extra}"
    )
    log_path = tmp / f"{name}.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("kafka-quota-proxy bootstrap: "):
        process.kill()
        raise RuntimeError(f"proxy did not start: {line!r}\n{log_path.read_text()}")
    return RunningProxy(process, line.split(": ", 1)[1].strip(), base, config, log_path)


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(brokers_count=3, workdir=tmp_path_factory.mktemp("kafka3"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def proxy3(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    # the proxy learns the other two brokers from the first one's metadata
    proxy = start_proxy(tmp_path_factory.mktemp("proxy3"), kafka3.brokers[0].address, 3)
    yield proxy
    proxy.stop()


def wait_until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
