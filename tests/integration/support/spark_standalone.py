"""A Spark standalone cluster on loopback, one master and one worker, started from the pip
pyspark distribution's own launcher (bin/spark-class), as `start-master.sh` would."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

from localkafka.ports import LOOPBACK, free_ports

SPARK_HOME = Path(pyspark.__file__).parent


@dataclass
class StandaloneSpark:
    master_url: str
    ui_url: str
    workdir: Path
    daemons: list[subprocess.Popen[bytes]]

    def applications(self) -> list[dict[str, object]]:
        """Running and completed applications, as the master's web UI lists them."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as response:
            state = json.load(response)
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def alive_workers(self) -> int:
        """Zero until the master answers JSON: while it starts, it may answer `/json/` with its
        HTML status page (seen once on CI, where the test then failed on the parse)."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=1) as response:
                return int(json.load(response)["aliveworkers"])
        except (OSError, ValueError, KeyError):
            return 0

    def wait_for_worker(self, timeout_s: float = 120) -> None:
        """Until the worker has registered with the master (its JVMs start in about 10 s:
        a test does its own work meanwhile)."""
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < 1:
            for daemon, name in zip(self.daemons, ("master", "worker"), strict=True):
                if daemon.poll() is not None:
                    log = (self.workdir / f"{name}.log").read_text()[-2000:]
                    raise RuntimeError(f"Spark {name} exited with {daemon.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no Spark worker registered within {timeout_s}s")
            time.sleep(0.25)


@contextmanager
def standalone_spark(workdir: Path) -> Iterator[StandaloneSpark]:
    """Launched, not yet ready: see StandaloneSpark.wait_for_worker."""
    port, ui, worker_port, worker_ui = free_ports(4)
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_DAEMON_MEMORY": "256m",
    }
    launcher = str(SPARK_HOME / "bin" / "spark-class")
    master_url = f"spark://{LOOPBACK}:{port}"
    daemons = [
        subprocess.Popen(
            [launcher, "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
             "--port", str(port), "--webui-port", str(ui)],
            env=env, stdout=(workdir / "master.log").open("wb"), stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [launcher, "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
             "--port", str(worker_port), "--webui-port", str(worker_ui), "--cores", "1",
             "--memory", "1g", "--work-dir", str(workdir / "work"), master_url],
            env=env, stdout=(workdir / "worker.log").open("wb"), stderr=subprocess.STDOUT,
        ),
    ]  # fmt: skip
    try:
        yield StandaloneSpark(master_url, f"http://{LOOPBACK}:{ui}", workdir, daemons)
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
