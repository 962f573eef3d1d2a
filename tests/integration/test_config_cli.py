"""The operator's view of the config: check-config, and start-up refusing a bad file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GOOD = """
[proxy]
upstream_bootstrap_servers = ["127.0.0.1:1"]

[enforcement]
shadow = ["consumer_byte_rate"]

[guards.failed_logins]
max_wait_ms = 30000

[users.alice]
producer_byte_rate = 1048576
producer_ids_rate = 100

[users.alice.clients.reporting]
consumer_byte_rate = 2097152

[users."<default>"]
request_percentage = 25

[clients."<default>"]
producer_byte_rate = 10485760
controller_mutation_rate = 5
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=60
    )


def test_check_config_prints_every_entitys_effective_quotas(tmp_path: Path) -> None:
    path = tmp_path / "quotas.toml"
    path.write_text(GOOD)
    result = cli("check-config", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{path}: valid"
    assert lines[1] == "shadow mode (decided and reported, not enforced): consumer_byte_rate"
    assert lines[2] == (
        "failed-login backoff: a user's or client address's next SASL authentication waits"
        " 100 ms after a refusal, doubling to 30000 ms"
    )
    assert "quota.window.num=11 quota.window.size.seconds=1" in lines
    entities = [line for line in lines if line.startswith(("users/", "clients/"))]
    assert entities == [
        "users/alice/clients/reporting",
        "users/alice",
        "users/<default>",
        "clients/<default>",
    ]
    block = lines[lines.index("users/alice/clients/reporting") + 1 :][:5]
    assert [line.split() for line in block] == [
        ["producer_byte_rate", "1048576", "from", "users/alice"],
        ["consumer_byte_rate", "2097152", "from", "users/alice/clients/reporting"],
        # precedence is per quota type: alice sets no request_percentage of her own
        ["request_percentage", "25", "from", "users/<default>"],
        ["controller_mutation_rate", "5", "from", "clients/<default>"],
        ["producer_ids_rate", "100", "from", "users/alice"],
    ]
    assert lines[lines.index("users/alice") + 2].split() == ["consumer_byte_rate", "unlimited"]
    default_user = lines[lines.index("users/<default>") + 1 :][:5]
    assert default_user[0].split() == [
        "producer_byte_rate",
        "10485760",
        "from",
        "clients/<default>",
    ]
    assert default_user[2].split() == ["request_percentage", "25", "from", "users/<default>"]


def test_check_config_into_a_pipe_closed_early_ends_without_a_traceback(tmp_path: Path) -> None:
    """`check-config file | head -1`: the reader is gone before the output is written."""
    path = tmp_path / "quotas.toml"
    path.write_text(GOOD)
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "check-config", "--offline", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 141
    assert stderr == ""


def test_a_bad_config_is_refused_at_start_up_naming_file_entity_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(GOOD + "\n[clients.app]\nproducer_ids_rate = 5\nrequest_percentage = 0\n")
    for args in (("check-config", str(path)), ("run", "--config", str(path))):
        result = cli(*args)
        assert result.returncode == 2
        assert (
            f"{path}: clients/app: key 'producer_ids_rate': Invalid configuration key "
            "producer_ids_rate (producer_ids_rate applies to" in result.stderr
        )
        assert (
            f"{path}: clients/app: key 'request_percentage': Quota request_percentage must be "
            "greater than 0" in result.stderr
        )
