"""deploy/prometheus checked by promtool itself: the config and the rules parse, and every
alert fires when its written-out series say it should (alerts-test.yml)."""

from __future__ import annotations

import re
import subprocess

from tests.deploy.tools import DEPLOY, ROOT, read_yaml, tool

PROMETHEUS = DEPLOY / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=60, cwd=PROMETHEUS
    )


def test_the_config_and_its_rules_are_valid() -> None:
    for args in (("check", "config", "prometheus.yml"), ("check", "rules", "alerts.yml")):
        result = promtool(*args)
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_passes_its_unit_tests() -> None:
    result = promtool("test", "rules", "alerts-test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {
        rule["alert"]
        for group in read_yaml(PROMETHEUS / "alerts.yml")["groups"]
        for rule in group["rules"]
    }
    tests = read_yaml(PROMETHEUS / "alerts-test.yml")["tests"]
    fired = {
        case["alertname"]
        for group in tests
        for case in group["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == alerts, f"alerts no test sees firing: {sorted(alerts - fired)}"


def test_every_alert_links_its_runbook_entry() -> None:
    """runbook_url is the entry's path in the repository; the anchor is the heading's, as
    Git hosts and doc sites make it (lower case)."""
    headings = {
        line.removeprefix("#### ").strip().lower()
        for line in (ROOT / "docs" / "monitoring.md").read_text().splitlines()
        if line.startswith("#### ")
    }
    for group in read_yaml(PROMETHEUS / "alerts.yml")["groups"]:
        for rule in group["rules"]:
            link = rule["annotations"].get("runbook_url", "")
            assert re.fullmatch(r"docs/monitoring\.md#[a-z]+", link), (rule["alert"], link)
            anchor = link.partition("#")[2]
            assert anchor == rule["alert"].lower() and anchor in headings, rule["alert"]
