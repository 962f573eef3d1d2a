"""A real Prometheus (Debian's, as `make test` provides it) on loopback, run on deploy/'s
own config and rules with two changes a test needs: its targets are the test's proxies,
and it scrapes and evaluates every second. Queried through its HTTP API, as Grafana does."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localkafka.ports import LOOPBACK, free_port
from tests.deploy.tools import DEPLOY, read_yaml, tool

INTERVAL = "1s"


@dataclass
class RunningPrometheus:
    url: str

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def query_range(self, expr: str, start: float, end: float) -> list[Any]:
        """The series a range query returns, as a Grafana time series panel asks for them."""
        data = self.api("query_range", query=expr, start=str(start), end=str(end), step="1")
        assert data["resultType"] == "matrix", data
        return list(data["result"])

    def label_values(self, label: str, match: str) -> list[str]:
        """Grafana's label_values(match, label), as its Prometheus datasource asks it."""
        return list(self.api(f"label/{label}/values", **{"match[]": match}))

    def firing(self) -> list[dict[str, str]]:
        """The labels of every firing alert, its name among them."""
        return [
            {"alertname": alert["labels"].pop("alertname"), **alert["labels"]}
            for alert in self.api("alerts")["alerts"]
            if alert["state"] == "firing"
        ]


@contextmanager
def prometheus(
    workdir: Path, targets: list[str], waits: Mapping[str, str]
) -> Iterator[RunningPrometheus]:
    """Prometheus scraping `targets`; `waits` gives alerts another `for` (the rules' own is
    minutes, which promtool's unit tests hold)."""
    rules = read_yaml(DEPLOY / "prometheus" / "alerts.yml")
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in waits:
                rule["for"] = waits[rule["alert"]]
    (workdir / "alerts.yml").write_text(yaml.safe_dump(rules))
    config = read_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    config["global"] = {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL}
    config["rule_files"] = [str(workdir / "alerts.yml")]
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": targets}]
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    address = f"{LOOPBACK}:{free_port()}"
    log_path = workdir / "prometheus.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={address}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        running = RunningPrometheus(f"http://{address}")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{running.url}/-/ready", timeout=1):
                    break
            except OSError as exc:
                if process.poll() is not None or time.monotonic() > deadline:
                    printed = log_path.read_text()
                    raise RuntimeError(f"Prometheus did not start:\n{printed}") from exc
                time.sleep(0.1)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
