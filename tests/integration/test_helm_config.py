"""The proxy config the Helm chart renders passes the proxy's own check-config (issue 39).

For the chart's defaults and each value set of deploy/helm/values/, `helm template` renders
the ConfigMap as an install would, pointed at the session's broker; the files the pod would
mount from Secrets are put where the config names them (a certificate of a throwaway CA, the
cluster's CA, the password's file). check-config
then loads the file, opens its TLS files and reads the quota store topic from the cluster.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from localkafka.cluster import KafkaCluster
from localkafka.tls import ThrowawayCA
from tests.deploy.test_helm_chart import KUBERNETES
from tests.deploy.tools import CHART, chart_value_sets, tool
from tests.integration.support.clients import SASL_USERS

USER = "alice"
MOUNTED = "/etc/kafka-quota-proxy/"


@pytest.mark.parametrize("values", chart_value_sets())
def test_the_rendered_config_passes_check_config(
    kafka1: KafkaCluster, values: Path | None, tmp_path: Path
) -> None:
    name = "defaults" if values is None else values.stem
    overrides = {"quotaStore.topic": f"helm-{name}-quotas"}
    chosen = yaml.safe_load(values.read_text()) if values is not None else {}
    protocol = chosen.get("cluster", {}).get("securityProtocol", "PLAINTEXT")
    sasl = protocol == "SASL_SSL"
    broker = kafka1.brokers[0]
    overrides["cluster.bootstrapServers[0]"] = {
        "SASL_SSL": broker.sasl_ssl_address,
        "SSL": broker.ssl_address,
    }.get(protocol, broker.address)
    if sasl:
        overrides["cluster.sasl.username"] = USER
        overrides["cluster.sasl.mechanism"] = "SCRAM-SHA-512"
    args = ["template", "kqp", ".", "--namespace", "kafka", "--kube-version", KUBERNETES[-1]]
    args += [] if values is None else ["--values", str(values)]
    for key, value in overrides.items():
        args += ["--set", f"{key}={value}"]
    rendered = subprocess.run(
        [tool("helm"), *args], capture_output=True, text=True, timeout=120, cwd=CHART, check=True
    )
    (config_map,) = [
        doc
        for doc in yaml.safe_load_all(rendered.stdout)
        if doc and doc["kind"] == "ConfigMap" and "proxy.toml" in doc["data"]
    ]
    # what the pod mounts from its Secrets, where the config names it
    mounts = tmp_path / "mounts"
    (mounts / "listener").mkdir(parents=True)
    (mounts / "cluster").mkdir()
    keystore = ThrowawayCA(tmp_path / "ca").server("proxy", "127.0.0.1", ["kqp-kafka-quota-proxy"])
    (mounts / "listener" / "proxy.pem").write_bytes(keystore.read_bytes())
    # mtls.yaml's clients' CA (clientAuth), beside the keystore in the listener's Secret
    (mounts / "listener" / "clients-ca.pem").write_bytes(kafka1.ca_certificate.read_bytes())
    (mounts / "cluster" / "ca.crt").write_bytes(kafka1.ca_certificate.read_bytes())
    (mounts / "cluster-credentials").mkdir()
    (mounts / "cluster-credentials" / "password").write_text(SASL_USERS[USER])
    config = config_map["data"]["proxy.toml"].replace(MOUNTED, f"{mounts}/")
    path = tmp_path / "proxy.toml"
    path.write_text(config.replace("/var/lib/kafka-quota-proxy/usage", str(tmp_path / "usage")))
    checked = subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert checked.returncode == 0, config + checked.stderr
    assert f"{path}: valid" in checked.stdout
    assert "altered quotas: read from the quota store topic" in checked.stdout
    print(checked.stdout)
