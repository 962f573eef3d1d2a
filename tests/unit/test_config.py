"""Config errors name the file, the section/entity and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ConfigError
from config.loader import load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return path


def test_valid_proxy_section(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
[proxy]
upstream_bootstrap_servers = ["kafka-1:9092", "kafka-2:9092"]
listen_host = "0.0.0.0"
advertised_host = "proxy.example"
bootstrap_port = 19092
broker_port_base = 19100
""",
        )
    )
    assert config.proxy.upstream_addresses() == [("kafka-1", 9092), ("kafka-2", 9092)]
    assert config.proxy.advertised == "proxy.example"


def test_every_problem_is_reported_with_file_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[proxy]
bootstrap_port = "9092"
max_frame_bytes = 0
uvloop = 1
listen_hots = "x"
upstream_bootstrap_servers = ["no-port"]

[quota]
""",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    text = str(caught.value)
    assert "[proxy] key 'bootstrap_port': expected int, got str '9092'" in text
    assert "[proxy] key 'max_frame_bytes': must be > 0, got 0" in text
    assert "[proxy] key 'uvloop': expected bool, got int 1" in text
    assert "[proxy] key 'listen_hots': unknown key" in text
    assert "[proxy] key 'upstream_bootstrap_servers'" in text
    assert "unknown section [quota]" in text
    assert len(lines) == 6


def test_unreadable_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[proxy\n"))
