"""The Grafana dashboard (deploy/grafana/dashboards/kafka-quota-proxy.json), written from the
panels below: `python -m deploy.dashboard` writes it again after a change here.

Panels are declared by what they answer and their PromQL; the layout, the datasource and the
filters are the same for every panel, so they are made in one place rather than kept by hand
in a thousand lines of JSON. Every query is run against a real Prometheus scraping a real
proxy in tests/integration/test_operators_view.py, and docs/monitoring.md ("What an operator
looks at") names every panel.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

DASHBOARD = Path(__file__).parent / "grafana" / "dashboards" / "kafka-quota-proxy.json"
UID = "kafka-quota-proxy"
#: the proxies of one deployment (`job`) and of one host (`instance`)
PROXIES = 'job="$job", instance=~"$instance"'
#: the principals chosen at the top of the dashboard
PRINCIPALS = f'{PROXIES}, user=~"$user", client_id=~"$client_id"'
#: the rate window Grafana derives from the scrape interval (at least 4 scrapes)
WINDOW = "$__rate_interval"
#: Kafka's throttle-time metric of every quota type, named by its metric group
THROTTLE_TIME = (
    '{__name__=~"kafka_server_(produce|fetch|request|controllermutation|producerids)'
    '_throttle_time", ' + PRINCIPALS + "}"
)
WIDTH = 24


#: a stat's colour from the value up: (from, colour), the first from None (any value)
Steps = tuple[tuple[float | None, str], ...]
#: a count where anything above 0 wants a look, and a 0/1 health where 0 does
ZERO_IS_GOOD: Steps = ((None, "green"), (1, "orange"))
ONE_IS_GOOD: Steps = ((None, "red"), (1, "green"))


@dataclass(frozen=True)
class Query:
    """One PromQL target, and its series' legend (Grafana's {{label}} templates)."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    """What a panel answers and how; its place, datasource and filters come from the row."""

    title: str
    #: the question it answers, shown as the panel's description
    answers: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: Literal["timeseries", "stat"] = "timeseries"
    width: int = 8
    #: a stat's value mappings: value -> text
    texts: tuple[tuple[str, str], ...] = ()
    #: a stat's colours; none: Grafana's default, which would show a bad value green
    steps: Steps = ((None, "blue"),)


@dataclass(frozen=True)
class Row:
    """Panels under one heading, laid out left to right and wrapped at the grid's width."""

    title: str
    panels: tuple[Panel, ...]


def use_of(quota: str, rate_metric: str, per_user: bool = False) -> Panel:
    """A principal's rate as a share of its quota; in a fleet every member reports the
    fleet's rate as it judges it, so the largest is the one to read."""
    by = "user" if per_user else "user, client_id"
    selector = f'{PROXIES}, user=~"$user"' if per_user else PRINCIPALS
    return Panel(
        f"Use of {quota}",
        f"Each principal's {rate_metric} as a share of its {quota} (1 = at its quota; a "
        "principal over it is throttled). Principals without this quota are not shown.",
        (
            Query(
                f"max by ({by}) ({rate_metric}{{{selector}}} / ignoring(quota) "
                f'kafka_quota_proxy_quota_limit{{{PROXIES}, quota="{quota}"}})',
                "{{user}} {{client_id}}",
            ),
        ),
        unit="percentunit",
    )


ROWS = (
    Row(
        "Now",
        (
            Panel(
                "Principals throttled",
                "How many principals had a response throttled in the last few scrapes "
                "(shadow mode's decisions not counted).",
                (
                    Query(
                        "count(sum by (user, client_id) (rate(kafka_quota_proxy_throttles_total"
                        f"{{{PROXIES}}}[{WINDOW}])) > 0) or vector(0)"
                    ),
                ),
                kind="stat",
                width=4,
                steps=ZERO_IS_GOOD,
            ),
            Panel(
                "Proxies up",
                "How many proxy processes Prometheus scrapes successfully.",
                (Query(f"sum(up{{{PROXIES}}})"),),
                kind="stat",
                width=4,
            ),
            Panel(
                "Client connections",
                "Client connections open on every proxy.",
                (Query(f"sum(kafka_quota_proxy_connections_active{{{PROXIES}}})"),),
                kind="stat",
                width=4,
            ),
            Panel(
                "Listeners down",
                "Broker listeners refusing clients because their broker is unreachable.",
                (Query(f"count(kafka_quota_proxy_listener_up{{{PROXIES}}} == 0) or vector(0)"),),
                kind="stat",
                width=4,
                steps=((None, "green"), (1, "red")),
            ),
            Panel(
                "Last config reload",
                "Whether every proxy's last reload of its config file was taken (a refused "
                "file leaves the previous config running).",
                (Query(f"min(kafka_quota_proxy_config_last_reload_successful{{{PROXIES}}})"),),
                kind="stat",
                width=4,
                texts=(("0", "refused"), ("1", "taken")),
                steps=ONE_IS_GOOD,
            ),
            Panel(
                "Usage samples dropped",
                "Usage samples lost over the dashboard's time range: the usage report "
                "undercounts by these.",
                (
                    Query(
                        "sum(increase(kafka_quota_proxy_usage_samples_dropped_total"
                        f"{{{PROXIES}}}[$__range]))"
                    ),
                ),
                kind="stat",
                width=4,
                steps=ZERO_IS_GOOD,
            ),
        ),
    ),
    Row(
        "Principals against their quotas",
        (
            use_of("producer_byte_rate", "kafka_server_produce_byte_rate"),
            use_of("consumer_byte_rate", "kafka_server_fetch_byte_rate"),
            use_of("request_percentage", "kafka_server_request_request_time"),
            use_of("controller_mutation_rate", "kafka_server_controllermutation_mutation_rate"),
            use_of("producer_ids_rate", "kafka_server_producerids_rate", per_user=True),
            Panel(
                "Throttle time",
                "Kafka's throttle-time of each principal and quota type: the mean throttle "
                "of its throttled responses over the last minute, shadow mode's decisions "
                "included.",
                (
                    Query(
                        f"max by (group, user, client_id) (label_replace({THROTTLE_TIME}, "
                        '"group", "$1", "__name__", "kafka_server_(.+)_throttle_time"))',
                        "{{group}} {{user}} {{client_id}}",
                    ),
                ),
                unit="ms",
            ),
            Panel(
                "Throttled responses",
                "Responses per second that carried a throttle and held the principal, by the "
                "quota that decided it.",
                (
                    Query(
                        "sum by (quota, user, client_id) (rate(kafka_quota_proxy_throttles_total"
                        f"{{{PRINCIPALS}}}[{WINDOW}]))",
                        "{{quota}} {{user}} {{client_id}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Shadow-mode throttles",
                "Throttles per second decided but not applied, for the quota types in shadow "
                "mode: what enforcing them would do.",
                (
                    Query(
                        "sum by (quota, user, client_id) (rate("
                        f"kafka_quota_proxy_shadow_throttles_total{{{PRINCIPALS}}}[{WINDOW}]))",
                        "{{quota}} {{user}} {{client_id}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Quotas in force",
                "Each principal's quotas as the proxy applies them, in the unit of the rate "
                "beside them (producer_ids_rate per second).",
                (
                    Query(
                        "max by (quota, user, client_id) (kafka_quota_proxy_quota_limit"
                        f"{{{PRINCIPALS}}})",
                        "{{quota}} {{user}} {{client_id}}",
                    ),
                ),
            ),
        ),
    ),
    Row(
        "Mutation and producer-id buckets",
        (
            Panel(
                "Partition mutation tokens",
                "KIP-599's bucket of each principal: below 0, its CreateTopics, "
                "CreatePartitions and DeleteTopics are refused (error 89) or throttled.",
                (
                    Query(
                        "min by (user, client_id) (kafka_server_controllermutation_tokens"
                        f"{{{PRINCIPALS}}})",
                        "{{user}} {{client_id}}",
                    ),
                ),
                width=12,
            ),
            Panel(
                "Producer-id tokens",
                "KIP-936's bucket of each user: below 0, Produce requests carrying a "
                "producer id it has not used lately are refused (error 89).",
                (
                    Query(
                        "min by (user) (kafka_server_producerids_tokens"
                        f'{{{PROXIES}, user=~"$user"}})',
                        "{{user}}",
                    ),
                ),
                width=12,
            ),
        ),
    ),
    Row(
        "Connections and listeners",
        (
            Panel(
                "Client connections by proxy",
                "Client connections open on each proxy.",
                (
                    Query(
                        f"sum by (instance) (kafka_quota_proxy_connections_active{{{PROXIES}}})",
                        "{{instance}}",
                    ),
                ),
            ),
            Panel(
                "Connections by listener",
                "Connections per second served, closed at once over max_connections_per_ip, "
                "held and closed over connection_creation_rate, and closed idle.",
                (
                    *(
                        Query(
                            f"sum by (listener) (rate(kafka_quota_proxy_connections_{kind}_total"
                            f"{{{PROXIES}}}[{WINDOW}]))",
                            "{{listener}} " + kind,
                        )
                        for kind in ("accepted", "refused", "throttled")
                    ),
                    Query(
                        "sum(rate(kafka_quota_proxy_connections_idle_closed_total"
                        f"{{{PROXIES}}}[{WINDOW}]))",
                        "closed idle",
                    ),
                ),
                unit="cps",
            ),
            Panel(
                "Listeners up",
                "1 while a listener accepts; 0 while its broker is unreachable and clients "
                "get the refused connection the broker would give.",
                (
                    Query(
                        f"min by (instance, listener) (kafka_quota_proxy_listener_up{{{PROXIES}}})",
                        "{{instance}} {{listener}}",
                    ),
                ),
            ),
            Panel(
                "Failed logins",
                "SASL authentications per second the brokers refused, and the attempts the "
                "failed-login backoff held, by the user's or the client address's backoff "
                "([guards.failed_logins]; 0 without it).",
                (
                    Query(
                        f"sum(rate(kafka_quota_proxy_failed_logins_total{{{PROXIES}}}[{WINDOW}]))",
                        "refused",
                    ),
                    Query(
                        "sum by (by) (rate(kafka_quota_proxy_logins_held_total"
                        f"{{{PROXIES}}}[{WINDOW}]))",
                        "held by {{by}}",
                    ),
                ),
                unit="reqps",
                width=24,
            ),
            Panel(
                "Guarded requests",
                "Requests per second of each API with a request-rate guard, over the "
                "principals it guards ([guards.requests]; none without a guard's key).",
                (
                    Query(
                        f"sum by (api) (kafka_quota_proxy_guard_rate{{{PROXIES}}})",
                        "{{api}}",
                    ),
                ),
                unit="reqps",
                width=12,
            ),
            Panel(
                "Guard throttles",
                "The longest mean throttle a request-rate guard gives a principal, by API: "
                "above 0, a principal is over its guard and muted for it.",
                (
                    Query(
                        f"max by (api) (kafka_quota_proxy_guard_throttle_time{{{PROXIES}}})",
                        "{{api}}",
                    ),
                ),
                unit="ms",
                width=12,
            ),
            Panel(
                "Principal connections",
                "Open connections of each principal with a connection limit, across the fleet "
                "as each proxy knows them, against the limit "
                "(kafka-quota-proxy.connections; none without one).",
                (
                    Query(
                        "max by (user, client_id) "
                        f"(kafka_quota_proxy_principal_connections_fleet{{{PROXIES}}})",
                        "{{user}} {{client_id}}",
                    ),
                    Query(
                        "max by (user, client_id) (kafka_quota_proxy_quota_limit"
                        f'{{{PROXIES}, quota="kafka-quota-proxy.connections"}})',
                        "limit {{user}} {{client_id}}",
                    ),
                ),
                width=12,
            ),
            Panel(
                "Connections refused by principal",
                "Connections per second a connection guard closed once their principal was "
                "known: over its count at once, over its creation rate after a hold.",
                (
                    Query(
                        "sum by (quota, user, client_id) (rate("
                        f"kafka_quota_proxy_principal_connections_refused_total{{{PROXIES}}}"
                        f"[{WINDOW}]))",
                        "{{quota}} {{user}} {{client_id}}",
                    ),
                ),
                unit="cps",
                width=12,
            ),
        ),
    ),
    Row(
        "Broker ceilings",
        (
            Panel(
                "Broker intake against its ceiling",
                "What every principal together sends each broker with a ceiling (or reads from "
                "it), summed over the proxies, against the ceiling (docs/ceilings.md).",
                (
                    Query(
                        f"sum by (ceiling, broker) (kafka_quota_proxy_ceiling_rate{{{PROXIES}}})",
                        "{{ceiling}} broker {{broker}}",
                    ),
                    Query(
                        f"max by (ceiling, broker) (kafka_quota_proxy_ceiling{{{PROXIES}}})",
                        "ceiling {{ceiling}} broker {{broker}}",
                    ),
                ),
                width=12,
            ),
            Panel(
                "Brokers shedding",
                "1 while a broker's ceiling holds principals to their shares: best-effort "
                "first, guaranteed ones down to their floors, exempt ones never.",
                (
                    Query(
                        "max by (ceiling, broker) "
                        f"(kafka_quota_proxy_ceiling_shedding{{{PROXIES}}})",
                        "{{ceiling}} broker {{broker}}",
                    ),
                ),
                width=12,
            ),
            Panel(
                "Shares of a shedding broker",
                "Each principal's rate into a broker with a ceiling, by class, beside its share "
                "while the broker sheds.",
                (
                    Query(
                        "sum by (ceiling, broker, class, user, client_id) "
                        f"(kafka_quota_proxy_ceiling_principal_rate{{{PRINCIPALS}}})",
                        "{{broker}} {{class}} {{user}} {{client_id}}",
                    ),
                    Query(
                        "max by (ceiling, broker, class, user, client_id) "
                        f"(kafka_quota_proxy_ceiling_allowance{{{PRINCIPALS}}})",
                        "share {{broker}} {{user}} {{client_id}}",
                    ),
                ),
                width=12,
            ),
            Panel(
                "Log directories",
                "Each log directory's usable bytes as its broker last described them "
                "([guards.disk]), and 1 on the right axis while the disk guard holds its writers.",
                (
                    Query(
                        "min by (broker, log_dir) "
                        f"(kafka_quota_proxy_disk_usable_bytes{{{PROXIES}}})",
                        "{{broker}} {{log_dir}}",
                    ),
                    Query(
                        f"max by (broker, log_dir) (kafka_quota_proxy_disk_guarded{{{PROXIES}}})",
                        "guarded {{broker}} {{log_dir}}",
                    ),
                ),
                unit="bytes",
                width=12,
            ),
            Panel(
                "Ceiling throttles by principal",
                "Responses per second whose largest throttle was a broker's ceiling.",
                (
                    Query(
                        "sum by (ceiling, broker, user, client_id) (rate("
                        f"kafka_quota_proxy_ceiling_throttles_total{{{PRINCIPALS}}}[{WINDOW}]))",
                        "{{ceiling}} {{broker}} {{user}} {{client_id}}",
                    ),
                ),
                unit="reqps",
                width=12,
            ),
        ),
    ),
    Row(
        "Memory",
        (
            Panel(
                "Request memory pool",
                "queued_max_request_bytes not granted to request frames being read; near 0, "
                "slow senders hold the pool.",
                (
                    Query(
                        "min by (instance) (kafka_quota_proxy_memory_pool_available_bytes"
                        f"{{{PROXIES}}})",
                        "{{instance}}",
                    ),
                ),
                unit="bytes",
            ),
            Panel(
                "Connections waiting for memory",
                "Connections not read until the memory pool has memory again.",
                (
                    Query(
                        "sum by (instance) (kafka_quota_proxy_memory_pool_waiting_connections"
                        f"{{{PROXIES}}})",
                        "{{instance}}",
                    ),
                ),
            ),
            Panel(
                "Resident memory",
                "Each proxy process's resident memory, and what its producer-id filters "
                "take of it.",
                (
                    Query(
                        f"sum by (instance) (process_resident_memory_bytes{{{PROXIES}}})",
                        "{{instance}}",
                    ),
                    Query(
                        "sum by (instance) (kafka_quota_proxy_producer_id_filter_bytes"
                        f"{{{PROXIES}}})",
                        "{{instance}} producer-id filters",
                    ),
                ),
                unit="bytes",
            ),
        ),
    ),
    Row(
        "Usage samples, config and quota store",
        (
            Panel(
                "Usage samples",
                "Usage samples per second written, and dropped, by sink (file, kafka).",
                (
                    Query(
                        "sum by (sink) (rate(kafka_quota_proxy_usage_samples_total"
                        f"{{{PROXIES}}}[{WINDOW}]))",
                        "{{sink}} written",
                    ),
                    Query(
                        "sum by (sink) (rate(kafka_quota_proxy_usage_samples_dropped_total"
                        f"{{{PROXIES}}}[{WINDOW}]))",
                        "{{sink}} dropped",
                    ),
                ),
            ),
            Panel(
                "Config reloads",
                "Reloads of the config file, taken and refused, and whether each proxy's "
                "last one was taken (1).",
                (
                    Query(
                        "sum by (result) (increase(kafka_quota_proxy_config_reloads_total"
                        f"{{{PROXIES}}}[{WINDOW}]))",
                        "{{result}}",
                    ),
                    Query(
                        "min by (instance) (kafka_quota_proxy_config_last_reload_successful"
                        f"{{{PROXIES}}})",
                        "{{instance}} last taken",
                    ),
                ),
            ),
            Panel(
                "Quota store read",
                "1 while a proxy reads the quota store's topic; 0 while it enforces the "
                "quotas it last read and refuses kafka-configs alterations.",
                (
                    Query(
                        f"min by (instance) (kafka_quota_proxy_quota_store_up{{{PROXIES}}})",
                        "{{instance}}",
                    ),
                ),
            ),
        ),
    ),
    Row(
        "Fleet",
        (
            Panel(
                "Fleet members and watched sensors",
                "Members each proxy heard from lately, itself included; and the quota "
                "sensors each watches: those past their line, near their limit, whose use it "
                "shares on the bus (the others cost the bus nothing).",
                (
                    Query(
                        f"max by (instance) (kafka_quota_proxy_fleet_members{{{PROXIES}}})",
                        "{{instance}} members",
                    ),
                    Query(
                        f"sum by (instance) (kafka_quota_proxy_fleet_watched{{{PROXIES}}})",
                        "{{instance}} watched",
                    ),
                ),
                width=6,
            ),
            Panel(
                "Fleet bus and budget share",
                "Whether each member reads its own publications back (bus up = 1), the "
                "share of every quota it enforces on its own (1 with the bus up), and, "
                "through owners, the partitions whose owner is silent, whose principals it "
                "holds at its share.",
                (
                    Query(
                        f"min by (instance) (kafka_quota_proxy_fleet_bus_up{{{PROXIES}}})",
                        "{{instance}} bus up",
                    ),
                    Query(
                        f"min by (instance) (kafka_quota_proxy_fleet_budget_share{{{PROXIES}}})",
                        "{{instance}} budget share",
                    ),
                    Query(
                        f"max by (instance) (kafka_quota_proxy_fleet_partitions_held{{{PROXIES}}})",
                        "{{instance}} partitions held",
                    ),
                ),
                width=6,
            ),
            Panel(
                "Fleet bus traffic",
                "Bytes per second each member writes to and reads from the fleet's topic, "
                "and publications per second the bus did not take.",
                (
                    *(
                        Query(
                            f"sum by (instance) (rate(kafka_quota_proxy_fleet_{kind}_total"
                            f"{{{PROXIES}}}[{WINDOW}]))",
                            "{{instance}} " + kind.replace("_", " "),
                        )
                        for kind in ("bytes_published", "bytes_read", "publications_lost")
                    ),
                ),
                width=4,
            ),
            Panel(
                "Fleet bus CPU",
                "The share of a core each member spends on the fleet's own work: publishing "
                "the principals near their limit, and reading the others' (not the Kafka "
                "client's I/O).",
                (
                    Query(
                        "sum by (instance) (rate(kafka_quota_proxy_fleet_cpu_seconds_total"
                        f"{{{PROXIES}}}[{WINDOW}]))",
                        "{{instance}}",
                    ),
                ),
                unit="percentunit",
                width=4,
            ),
            Panel(
                "Use charged at each member",
                "The rate of each fleet-shared quota charged on each member alone; the "
                "members' lines add up to the fleet's rate.",
                (
                    Query(
                        "sum by (instance, quota, user, client_id) (kafka_quota_proxy_local_rate"
                        f"{{{PRINCIPALS}}})",
                        "{{instance}} {{quota}} {{user}} {{client_id}}",
                    ),
                ),
                width=4,
            ),
        ),
    ),
    Row(
        "Topics against their quotas",
        (
            Panel(
                "Use of topic quotas",
                "Each limited topic's bytes per second, written or read by every client "
                "together, as a share of its topic quota (1 = at its quota; above it, every "
                "connection writing or reading it is held).",
                (
                    Query(
                        "max by (quota, topic) (kafka_quota_proxy_topic_byte_rate"
                        f"{{{PROXIES}}} / kafka_quota_proxy_topic_quota_limit{{{PROXIES}}})",
                        "{{quota}} {{topic}}",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "Topic throttle time",
                "The mean throttle a topic's quota decided over the last minute, as Kafka's "
                "throttle-time is averaged.",
                (
                    Query(
                        "max by (quota, topic) (kafka_quota_proxy_topic_throttle_time"
                        f"{{{PROXIES}}})",
                        "{{quota}} {{topic}}",
                    ),
                ),
                unit="ms",
            ),
            Panel(
                "Topic-throttled responses",
                "Responses per second whose largest throttle was a topic's quota.",
                (
                    Query(
                        "sum by (quota, topic) (rate(kafka_quota_proxy_topic_throttles_total"
                        f"{{{PROXIES}}}[{WINDOW}]))",
                        "{{quota}} {{topic}}",
                    ),
                ),
            ),
        ),
    ),
)

_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_HEIGHT = {"stat": 4, "timeseries": 8}


def _variable(name: str, label: str, metric: str, everyone: bool) -> dict[str, Any]:
    """A template variable of a label's values; `everyone`: several may be chosen, or All."""
    query = f"label_values({metric}, {name})"
    variable: dict[str, Any] = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": _DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-values"},
        "refresh": 2,
        "sort": 1,
        "includeAll": everyone,
        "multi": everyone,
    }
    if everyone:
        # a principal without a user (a clients/ entity) has the label empty, which "All"
        # must match too, as Grafana's default alternation of the values would not
        variable["allValue"] = ".*"
        variable["current"] = {"text": "All", "value": "$__all"}
    return variable


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    """The panel in Grafana's dashboard model (schema 39), its targets on the datasource
    variable so that an imported copy follows the Prometheus chosen for it."""
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.texts:
        defaults["mappings"] = [
            {"type": "value", "options": {value: {"text": text} for value, text in panel.texts}}
        ]
    body: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.answers,
        "datasource": _DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": _HEIGHT[panel.kind]},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": _DATASOURCE,
                "expr": query.expr,
                "legendFormat": query.legend or "__auto",
                "range": True,
            }
            for index, query in enumerate(panel.queries)
        ],
    }
    if panel.kind == "stat":
        defaults["color"] = {"mode": "thresholds"}
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"value": value, "color": color} for value, color in panel.steps],
        }
        body["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "values": False},
            "colorMode": "background",
        }
    else:
        body["options"] = {"legend": {"displayMode": "table", "placement": "bottom"}}
    return body


def dashboard() -> dict[str, Any]:
    """The whole dashboard: rows of panels, top to bottom, and the variables they use."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row in ROWS:
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"x": 0, "y": y, "w": WIDTH, "h": 1},
                "panels": [],
            }
        )
        y += 1
        x = 0
        height = 0
        for panel in row.panels:
            if x + panel.width > WIDTH:
                x, y, height = 0, y + height, 0
            panels.append(_panel(panel, len(panels) + 1, x, y))
            x += panel.width
            height = max(height, _HEIGHT[panel.kind])
        y += height
    return {
        "uid": UID,
        "title": "kafka-quota-proxy",
        "description": "Principals against their Kafka quotas, and the proxy's own health",
        "tags": ["kafka", "quotas"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "graphTooltip": 1,
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": "Prometheus", "value": "prometheus"},
                },
                _variable("job", "Job", "kafka_quota_proxy_connections_active", False),
                _variable(
                    "instance",
                    "Proxy",
                    'kafka_quota_proxy_connections_active{job="$job"}',
                    True,
                ),
                _variable("user", "User", 'kafka_quota_proxy_quota_limit{job="$job"}', True),
                _variable(
                    "client_id", "Client id", 'kafka_quota_proxy_quota_limit{job="$job"}', True
                ),
            ]
        },
        "panels": panels,
    }


def render() -> str:
    """The JSON as committed: indented, so that a change reads as a diff."""
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> int:
    """Write the dashboard file again after a change to the panels here."""
    DASHBOARD.write_text(render())
    print(f"wrote {DASHBOARD}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
