"""Running the proxy's real CLI as a subprocess, as an operator would (tests and benchmarks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from localkafka.ports import LOOPBACK, free_port, free_ports
from quotas.entities import GUARDS, QuotaType

#: Kafka's quota windows cut to 2 x 1 s, for tests that measure rates over 30 s: with Kafka's
#: 11 x 1 s a greedy client's first burst echoes every 11 s (docs/enforcement.md, "Quota windows")
SHORT_QUOTA_WINDOWS = "[broker]\nquota.window.num = 2\nquota.window.size.seconds = 1\n"
#: every guard on for every user: each request-rate guard and the connection creation rate
#: at 100 a second (a burst of 1,000), and 1,000 connections open: far above what a
#: well-behaved client sends or opens, so the tests that use it show that a guard breaks none
#: (issue 52)
GENEROUS_GUARDS = (
    '\n[users."<default>"]\n'
    + "".join(f"{guard.key} = 100\n" for guard in GUARDS.values())
    + f"{QuotaType.CONNECTION_CREATION_RATE.key} = 100\n"
    + f"{QuotaType.CONNECTIONS.key} = 1000\n"
)


def tls_sections(
    keystore: Path, truststore: Path, protocol: str = "SSL", listener: str = ""
) -> str:
    """[listener] and [upstream] of a proxy serving `protocol` with `keystore` in front of a
    cluster whose certificates `truststore` signs; `listener` adds lines to [listener]."""
    return (
        f'\n[listener]\nsecurity.protocol = "{protocol}"\nssl.keystore.location = "{keystore}"\n'
        f'{listener}\n[upstream]\nsecurity.protocol = "{protocol}"\n'
        f'ssl.truststore.location = "{truststore}"\n'
    )


def free_port_block(count: int) -> int:
    """A base port such that base+1 .. base+count are all free (for broker listeners)."""
    return free_ports(count, contiguous=True)[0] - 1


@dataclass
class RunningProxy:
    process: subprocess.Popen[str]
    bootstrap: str
    broker_port_base: int
    config_path: Path
    log_path: Path
    #: http://host:port/metrics (of the first worker, with several)
    metrics_url: str
    #: variables added to the proxy's environment, kept across restarts
    env: dict[str, str]
    #: every worker's metrics, in the order of their index
    metrics_urls: list[str]

    def broker_address(self, node_id: int) -> str:
        return f"{LOOPBACK}:{self.broker_port_base + node_id}"

    def log(self) -> str:
        return self.log_path.read_text()

    def rss_bytes(self) -> int:
        """The proxy's resident memory now (VmRSS)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for the proxy (pid {self.process.pid})")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_proxy(
    tmp: Path,
    upstream: str,
    brokers: int,
    extra: str = "",
    name: str = "proxy",
    env: dict[str, str] | None = None,
    ports: tuple[int, int] | None = None,
    metrics_port: int = 0,
) -> RunningProxy:
    """Run `kafka-quota-proxy run` as an operator would, and wait for its bootstrap line;
    `env` is added to its environment (an LD_PRELOAD that counts its connections); `ports`
    are its bootstrap port and broker port base (free ones by default), `metrics_port` its
    [metrics] port (one the system picks by default; a restart then picks another)."""
    bootstrap_port, base = ports or (free_port(), free_port_block(brokers))
    config = tmp / f"{name}.toml"
    servers = ", ".join(f'"{s}"' for s in upstream.split(","))
    config.write_text(
        f"[proxy]\nupstream_bootstrap_servers = [{servers}]\n"
        f"bootstrap_port = {bootstrap_port}\nbroker_port_base = {base}\n{extra}"
        f"\n[metrics]\nport = {metrics_port}\n"
    )
    return _launch(config, tmp / f"{name}.log", base, env or {})


def restart_proxy(proxy: RunningProxy) -> RunningProxy:
    """Stop the proxy (SIGTERM: it drains) and run it again on the same config and ports, as
    a rolling restart does."""
    proxy.stop()
    return _launch(proxy.config_path, proxy.log_path, proxy.broker_port_base, proxy.env)


def _launch(config: Path, log_path: Path, base: int, env: dict[str, str]) -> RunningProxy:
    log = log_path.open("a")
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        cwd=config.parent,  # where its usage samples go by default ([usage] directory)
    )
    assert process.stdout is not None
    printed = {}
    for line in iter(process.stdout.readline, ""):
        label, _, value = line.partition(": ")
        printed[label] = value.strip()
        if label == "kafka-quota-proxy bootstrap":
            break
    else:
        process.kill()
        raise RuntimeError(f"proxy did not start: {printed}\n{log_path.read_text()}")
    # one "metrics" line, or one "metrics (worker N)" line per worker
    workers = [f"kafka-quota-proxy metrics (worker {index})" for index in range(len(printed))]
    urls = [printed[label] for label in ("kafka-quota-proxy metrics", *workers) if label in printed]
    return RunningProxy(
        process,
        printed["kafka-quota-proxy bootstrap"],
        base,
        config,
        log_path,
        urls[0],
        env,
        urls,
    )
