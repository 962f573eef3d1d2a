"""deploy/helm/kafka-quota-proxy proven by Helm itself (`make helm` builds it from the Go
module proxy): linted and rendered for its default values and for the value sets of
deploy/helm/values/, every rendered manifest validated against Kubernetes' own schemas
(kubernetes-validate, strict: an unknown field is an error) at the chart's oldest supported
version and a pinned current one, the PrometheusRule's rules passed by promtool and equal to
deploy/prometheus/alerts.yml's, the dashboard equal to deploy/grafana's, and wrong values
refused by values.schema.json at install. The rendered proxy config passes the proxy's own
check-config in tests/integration/test_helm_config.py (it reads the cluster)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.tools import CHART, DEPLOY, chart_value_sets, read_yaml, tool

#: the chart's kubeVersion floor, and the version the chart is pinned to be current with
KUBERNETES = ("1.25.0", "1.33.0")
#: kinds of the prometheus-operator's CRDs, which Kubernetes' own schemas do not hold
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("helm"), *args], capture_output=True, text=True, timeout=120, cwd=CHART
    )


def render(values: Path | None = None, *sets: str) -> list[dict[str, Any]]:
    """`helm template` as an install would render it: every manifest, parsed."""
    args = ["template", "kqp", ".", "--namespace", "kafka", "--kube-version", KUBERNETES[-1]]
    if values is not None:
        args += ["--values", str(values)]
    for assignment in sets:
        args += ["--set", assignment]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


@pytest.mark.parametrize("values", chart_value_sets())
def test_helm_lints_the_chart_strictly(values: Path | None) -> None:
    args = ["lint", ".", "--strict", "--kube-version", KUBERNETES[-1]] + (
        [] if values is None else ["--values", str(values)]
    )
    result = helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values", chart_value_sets())
def test_every_manifest_is_valid_for_kubernetes(values: Path | None) -> None:
    manifests = render(values)
    kinds = {m["kind"] for m in manifests}
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget"} <= kinds
    for manifest in manifests:
        if manifest["kind"] in OPERATOR_KINDS:
            assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        for version in KUBERNETES:
            kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize("values", chart_value_sets())
def test_the_pods_drain_before_they_are_killed_and_probe_the_proxy(values: Path | None) -> None:
    manifests = render(values)
    (deployment,) = by_kind(manifests, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config = by_kind(manifests, "ConfigMap")[0]["data"]["proxy.toml"]
    delay = float(config.split("drain_delay_s = ")[1].split()[0])
    timeout = float(config.split("drain_timeout_s = ")[1].split()[0])
    assert pod["terminationGracePeriodSeconds"] > delay + timeout
    # /readyz fails within the delay, so the endpoints drop the pod before its drain starts
    readiness = container["readinessProbe"]
    assert readiness["httpGet"]["path"] == "/readyz"
    assert readiness["periodSeconds"] * (readiness["failureThreshold"] + 1) <= delay
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"]


def test_no_secret_is_in_values_or_rendered() -> None:
    """The proxy's password reaches it from a Secret mounted as files, which it reads at each
    connection (a rotated one is taken without a restart), TLS files through Secret volumes;
    the config holds references only, and no environment variable holds a secret."""
    manifests = render(DEPLOY / "helm" / "values" / "tls-sasl.yaml")
    assert not by_kind(manifests, "Secret")
    config = by_kind(manifests, "ConfigMap")[0]["data"]["proxy.toml"]
    reference = "${directory:/etc/kafka-quota-proxy/cluster-credentials:password}"
    assert f'sasl.password = "{reference}"' in config
    (deployment,) = by_kind(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "env" not in container
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["cluster-credentials"] == {
        "name": "cluster-credentials",
        "mountPath": "/etc/kafka-quota-proxy/cluster-credentials",
        "readOnly": True,
    }  # no subPath: the kubelet updates the files of a rotated Secret only without one
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["listener-tls"]["secret"]["secretName"] == "kafka-quota-proxy-tls"
    assert volumes["cluster-tls"]["secret"]["secretName"] == "kafka-cluster-ca"
    assert volumes["cluster-credentials"]["secret"] == {
        "secretName": "kafka-quota-proxy-credentials",
        "items": [{"key": "password", "path": "password"}],
    }


def test_the_services_carry_every_broker_or_the_one_sni_port() -> None:
    ports = {
        name: [p["port"] for p in by_kind(render(path), "Service")[0]["spec"]["ports"]]
        for name, path in (("ports", None), ("sni", DEPLOY / "helm" / "values" / "sni.yaml"))
    }
    assert ports == {"ports": [9192, *range(9201, 9210)], "sni": [9093]}


def test_broker_ranges_open_a_port_per_id_and_roll_no_pod() -> None:
    """A broker added within a range is served with no upgrade, and widening a range rolls no
    pod: the Service targets numbered ports, which the pods need not declare."""
    narrow = render(None, "cluster.brokerIds={0-2}")
    wide = render(None, "cluster.brokerIds={0-5,7,3}")
    ports = [p["port"] for p in by_kind(wide, "Service")[0]["spec"]["ports"]]
    assert ports == [9192, 9200, 9201, 9202, 9203, 9204, 9205, 9207]
    assert by_kind(narrow, "Deployment") == by_kind(wide, "Deployment")
    for ranges, complaint in (("9-3", "runs backwards"), ("0-999", "at most 200")):
        result = helm(
            *("template", "kqp", ".", "--kube-version", KUBERNETES[-1]),
            *("--set", f"cluster.brokerIds={{{ranges}}}"),
        )
        assert result.returncode != 0 and complaint in result.stderr, result.stderr


def test_the_rules_are_deploys_alerts_and_pass_promtool(tmp_path: Path) -> None:
    manifests = render(DEPLOY / "helm" / "values" / "fleet.yaml")
    (rule,) = by_kind(manifests, "PrometheusRule")
    assert rule["spec"] == read_yaml(DEPLOY / "prometheus" / "alerts.yml")
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run(
        [tool("promtool"), "check", "rules", str(rules)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (monitor,) = by_kind(manifests, "ServiceMonitor")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics-0", "metrics-1"]


def test_each_alerts_runbook_url_is_joined_to_where_the_docs_are_served() -> None:
    base = "https://git.example.com/kafka-quota-proxy/blob/v1.0/"
    (rule,) = by_kind(
        render(
            DEPLOY / "helm" / "values" / "fleet.yaml",
            f"metrics.prometheusRule.runbookBaseUrl={base}",
        ),
        "PrometheusRule",
    )
    links = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert links and all(
        link == f"{base}docs/monitoring.md#{link.rpartition('#')[2]}" for link in links
    ), links


def test_the_dashboard_is_deploys_for_grafanas_sidecar() -> None:
    (dashboard,) = [
        m for m in by_kind(render(), "ConfigMap") if m["metadata"]["name"].endswith("-dashboard")
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((DEPLOY / "grafana" / "dashboards" / "kafka-quota-proxy.json").read_text())
    assert json.loads(dashboard["data"]["kafka-quota-proxy.json"]) == shipped


@pytest.mark.parametrize(
    ("assignment", "complaint"),
    [
        ("routing=ports-and-sni", "routing"),
        ("replicaCount=0", "replicaCount"),
        ("cluster.securityProtocol=TLS", "securityProtocol"),
        ("quotas.clients.app.producer_byte_rate=-5", "producer_byte_rate"),
        ("quotas.topics.t.request_percentage=5", "request_percentage"),
        ("ports.metrics=70000", "metrics"),
        ("cluster.bootstrapServers={kafka}", "bootstrapServers"),
        ("routing=sni", "listener"),  # SNI needs TLS towards clients
        ("cluster.securityProtocol=SASL_SSL", "sasl"),  # SASL needs its Secret
        ("colour=blue", "colour"),
    ],
)
def test_a_wrong_value_is_refused_at_install(assignment: str, complaint: str) -> None:
    result = helm("template", "kqp", ".", "--kube-version", KUBERNETES[-1], "--set", assignment)
    assert result.returncode != 0, f"{assignment} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert complaint in result.stderr, result.stderr


def config_of(manifests: list[dict[str, Any]]) -> str:
    (config_map,) = [m for m in by_kind(manifests, "ConfigMap") if "proxy.toml" in m["data"]]
    text: str = config_map["data"]["proxy.toml"]
    return text


@pytest.mark.parametrize(
    ("extra", "section"),
    [("[usage]\ninterval_s = 5\n", "[usage]"), ("  [proxy] # again\nworkers = 2\n", "[proxy]")],
)
def test_extra_config_never_declares_a_rendered_section_twice(extra: str, section: str) -> None:
    """TOML refuses a table declared twice: the pod would crash-loop, so Helm refuses first."""
    result = helm(
        *("template", "kqp", ".", "--kube-version", KUBERNETES[-1]),
        *("--set", "cluster.bootstrapServers[0]=kafka:9092"),
        *("--set-string", f"extraConfig={extra}"),
    )
    assert result.returncode != 0, f"extraConfig {extra!r} was accepted"
    assert f"extraConfig: {section} is already rendered from the chart's values" in result.stderr


def test_extra_config_adds_sections_the_chart_does_not_render() -> None:
    config = config_of(render(DEPLOY / "helm" / "values" / "usage-samples.yaml"))
    assert config.count("[broker]") == 1 and config.count("[usage]") == 1
    assert 'kafka_topic = "kafka-quota-proxy-usage"' in config


def test_usage_samples_go_to_a_topic_and_a_claim_that_outlive_the_pods() -> None:
    manifests = render(DEPLOY / "helm" / "values" / "usage-samples.yaml")
    (deployment,) = by_kind(manifests, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["usage"] == {
        "name": "usage",
        "persistentVolumeClaim": {"claimName": "kafka-quota-proxy-usage"},
    }
    assert "emptyDir" in {v["name"]: v for v in render_volumes(None)}["usage"]


def render_volumes(values: Path | None) -> list[dict[str, Any]]:
    (deployment,) = by_kind(render(values, "cluster.bootstrapServers[0]=kafka:9092"), "Deployment")
    volumes: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["volumes"]
    return volumes


def test_client_certificates_need_the_acknowledgement_the_proxy_asks_for() -> None:
    """The proxy refuses ssl.client.auth without acknowledge.broker.sees.proxy: rendered
    together, or refused by Helm, never a pod that crash-loops."""
    mtls = DEPLOY / "helm" / "values" / "mtls.yaml"
    config = config_of(render(mtls))
    assert 'ssl.client.auth = "required"' in config
    assert "acknowledge.broker.sees.proxy = true" in config
    result = helm(
        *("template", "kqp", ".", "--kube-version", KUBERNETES[-1], "--values", str(mtls)),
        *("--set", "listener.tls.acknowledgeBrokerSeesProxy=false"),
    )
    assert result.returncode != 0
    assert "set listener.tls.acknowledgeBrokerSeesProxy=true" in result.stderr
