"""docker-compose.yml as a real compose implementation reads it (Debian's docker-compose
`config`, which needs no engine), held against the files it mounts: every proxy's config
exists and validates, Prometheus scrapes each proxy where its config serves metrics and
loads the rules promtool tests, and Grafana finds its datasource and dashboard. The image
itself is built and run in test_image.py, and the whole file brought up in
test_compose_up.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.loader import load_config
from tests.deploy.tools import DEPLOY, ROOT, read_yaml, tool


@pytest.fixture(scope="module")
def compose() -> Any:
    public = {  # the file as a user reads it: the public images, not the suite's
        name: value
        for name, value in os.environ.items()
        if name not in ("KAFKA_IMAGE", "PROMETHEUS_IMAGE", "PYTHON_IMAGE")
    }
    result = subprocess.run(
        [tool("docker-compose"), "--file", "docker-compose.yml", "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=public,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """A service's bind mounts: where in the container -> which path of the checkout (compose
    1 resolves them to "SOURCE:TARGET:MODE", compose 2 to mappings)."""
    binds = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        if source.startswith("/"):
            binds[target] = Path(source)
    return binds


def published(service: dict[str, Any]) -> dict[int, int]:
    """Host port -> container port (compose 2 gives the host's as a string)."""
    return {int(port["published"]): int(port["target"]) for port in service["ports"]}


def in_checkout(service: dict[str, Any], container_path: str) -> Path:
    """The checkout's file that a container path of a bind mount names."""
    for target, source in mounts(service).items():
        if container_path == target or container_path.startswith(target + "/"):
            return source / container_path[len(target) :].lstrip("/")
    raise AssertionError(f"{container_path} is not in a bind mount of {service}")


def proxies(compose: Any) -> dict[str, Any]:
    return {name: s for name, s in compose["services"].items() if "build" in s}


def config_file(proxy: dict[str, Any]) -> Path:
    """The checkout's config file a proxy service runs (`run --config PATH`)."""
    return in_checkout(proxy, proxy["command"][2])


def test_every_proxy_runs_a_config_of_the_checkout_on_the_ports_it_publishes(
    compose: Any,
) -> None:
    found = proxies(compose)
    assert set(found) == {"proxy", "proxy-b"}
    for name, service in found.items():
        assert Path(service["build"]["context"]) == ROOT
        command = service["command"]
        assert command[:2] == ["run", "--config"], command
        config = load_config(config_file(service))
        ports = published(service)
        proxy = config.proxy
        for port in (proxy.bootstrap_port, proxy.broker_port_base + 1, config.metrics.port):
            assert ports.get(port) == port, f"{name} does not publish {port}"
        assert config.fleet_name == "docker", name


def test_prometheus_scrapes_every_proxy_and_loads_the_tested_rules(compose: Any) -> None:
    service = compose["services"]["prometheus"]
    config_dir = in_checkout(service, "/etc/prometheus")
    assert config_dir == DEPLOY / "prometheus"
    prometheus = read_yaml(config_dir / "prometheus.yml")
    assert prometheus["rule_files"] == ["alerts.yml"]
    (job,) = prometheus["scrape_configs"]
    assert job["job_name"] == "kafka-quota-proxy"  # what KafkaQuotaProxyDown selects
    targets = {target for each in job["static_configs"] for target in each["targets"]}
    expected = {
        f"{name}:{load_config(config_file(s)).metrics.port}" for name, s in proxies(compose).items()
    }
    assert targets == expected
    waits = {name: each["condition"] for name, each in service["depends_on"].items()}
    assert waits == {name: "service_healthy" for name in proxies(compose)}


def readyz_port(command: str) -> int:
    """The port of the 127.0.0.1 /readyz URL a health check command asks."""
    match = re.search(r"http://127\.0\.0\.1:(\d+)/readyz", command)
    assert match is not None, command
    return int(match.group(1))


def test_every_proxy_is_healthy_by_its_own_readyz(compose: Any) -> None:
    """The image's HEALTHCHECK asks config/docker.toml's metrics port; a proxy serving on
    another overrides it, so no service is judged by another's port (or by none)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    healthcheck = dockerfile.split("\nHEALTHCHECK ", 1)[1].split("\n\n", 1)[0]
    image_port = readyz_port(healthcheck)
    assert "USER 10001" in dockerfile.split("\nHEALTHCHECK ", 1)[0]  # not root, by number
    for name, service in proxies(compose).items():
        port = load_config(config_file(service)).metrics.port
        if "healthcheck" in service:
            assert readyz_port(" ".join(service["healthcheck"]["test"])) == port, name
        else:
            assert image_port == port, name


def test_the_prometheus_image_is_the_version_the_suite_proves(compose: Any) -> None:
    image = compose["services"]["prometheus"]["image"]
    result = subprocess.run(
        [tool("prometheus"), "--version"], capture_output=True, text=True, timeout=30
    )
    version = result.stdout.split()[2].split("+")[0]  # "prometheus, version 2.42.0+ds ..."
    assert image == f"prom/prometheus:v{version}"


def test_grafana_provisions_the_datasource_and_opens_the_dashboard(compose: Any) -> None:
    service = compose["services"]["grafana"]
    provisioning = in_checkout(service, "/etc/grafana/provisioning")
    assert provisioning == DEPLOY / "grafana" / "provisioning"
    (datasource,) = read_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    prometheus = compose["services"]["prometheus"]
    (port,) = published(prometheus).values()
    assert datasource["url"] == f"http://prometheus:{port}"
    assert (
        datasource["jsonData"]["timeInterval"]
        == read_yaml(DEPLOY / "prometheus" / "prometheus.yml")["global"]["scrape_interval"]
    )
    (provider,) = read_yaml(provisioning / "dashboards" / "kafka-quota-proxy.yml")["providers"]
    dashboards = in_checkout(service, provider["options"]["path"])
    assert dashboards == DEPLOY / "grafana" / "dashboards"
    home = in_checkout(service, service["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    variables = json.loads(home.read_text())["templating"]["list"]
    (chosen,) = [v["current"]["value"] for v in variables if v["type"] == "datasource"]
    assert chosen == datasource["uid"]
