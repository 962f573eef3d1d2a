"""deploy/prometheus checked by promtool itself: the config and the rules parse, and every
alert fires when its written-out series say it should (alerts-test.yml)."""

from __future__ import annotations

import subprocess

from tests.deploy.tools import DEPLOY, read_yaml, tool

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
