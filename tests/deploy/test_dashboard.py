"""The Grafana dashboard as Grafana would lay it out: written by deploy/dashboard.py (an
edit of the JSON alone would be lost), every panel on the 24-column grid without overlap,
on the datasource variable, and every variable its queries use defined. Whether each query
returns series is asked of a real Prometheus (tests/integration/test_operators_view.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from deploy.dashboard import DASHBOARD, WIDTH, render
from tests.deploy.tools import DEPLOY, ROOT, read_yaml

#: Grafana's own variables that the queries use
BUILT_IN = {"__rate_interval", "__range"}


def dashboard() -> Any:
    return json.loads(DASHBOARD.read_text())


def test_the_json_is_what_the_generator_writes() -> None:
    assert DASHBOARD.read_text() == render(), "run `python -m deploy.dashboard`"


def test_panels_tile_the_grid_without_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    ids = []
    for panel in dashboard()["panels"]:
        ids.append(panel["id"])
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["x"] + box["w"] <= WIDTH, panel["title"]
        cells = {(box["x"] + dx, box["y"] + dy) for dx in range(box["w"]) for dy in range(box["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
    assert len(ids) == len(set(ids))


def test_every_query_uses_the_datasource_and_defined_variables() -> None:
    document = dashboard()
    variables = {variable["name"] for variable in document["templating"]["list"]}
    for panel in document["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["description"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"1"}  # label_replace's $1
            assert used <= variables | BUILT_IN, (panel["title"], used - variables)


def test_the_monitoring_page_says_what_each_panel_and_alert_answers() -> None:
    page = (ROOT / "docs" / "monitoring.md").read_text()
    section = page[page.index("## What an operator looks at") :]
    section = section[: section.index("\n## ", 1)]
    titles = [p["title"] for p in dashboard()["panels"] if p["type"] != "row"]
    alerts = [
        rule["alert"]
        for group in read_yaml(DEPLOY / "prometheus" / "alerts.yml")["groups"]
        for rule in group["rules"]
    ]
    # a panel is described in bold, an alert under its runbook heading (its runbook_url)
    missing = [name for name in titles if f"**{name}**" not in section]
    missing += [name for name in alerts if f"\n#### {name}\n" not in section]
    assert not missing, f"docs/monitoring.md does not describe {missing}"
