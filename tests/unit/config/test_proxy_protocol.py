"""[proxy_protocol]: which listeners read a balancer's header, and whose header counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ConfigError
from config.loader import ProxyConfig, load_config
from config.proxy_protocol import HeaderMode, ProxyProtocolSettings


def load(tmp_path: Path, text: str) -> ProxyConfig:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return load_config(path)


def test_off_by_default() -> None:
    settings = ProxyProtocolSettings()
    assert settings.mode_for(bootstrap=True) is HeaderMode.OFF
    assert settings.mode_for(bootstrap=False) is HeaderMode.OFF


def test_a_mode_for_every_listener_and_one_per_listener(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        '[proxy_protocol]\nmode = "required"\nbrokers_mode = "optional"\n'
        'trusted_sources = ["10.0.0.0/8", "127.0.0.1", "2001:db8::/32"]\n',
    )
    settings = config.proxy_protocol
    assert settings.mode_for(bootstrap=True) is HeaderMode.REQUIRED
    assert settings.mode_for(bootstrap=False) is HeaderMode.OPTIONAL
    assert settings.trusts("10.1.2.3") and settings.trusts("127.0.0.1")
    assert settings.trusts("2001:db8::9")
    assert not settings.trusts("127.0.0.2") and not settings.trusts("192.0.2.1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('mode = "on"', "[proxy_protocol] key 'mode': expected one of off, optional, required"),
        ('mode = "required"', "[proxy_protocol] key 'trusted_sources': missing or empty"),
        (
            'bootstrap_mode = "optional"\ntrusted_sources = []',
            "[proxy_protocol] key 'trusted_sources': missing or empty",
        ),
        (
            'mode = "optional"\ntrusted_sources = ["10.0.0.0/33"]',
            "[proxy_protocol] key 'trusted_sources': '10.0.0.0/33' is not an address",
        ),
        ("mode = 2", "[proxy_protocol] key 'mode': expected str, got int 2"),
    ],
)
def test_problems_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load(tmp_path, f"[proxy_protocol]\n{text}\n")
    assert str(tmp_path / "proxy.toml") in str(error.value)
    assert message in str(error.value)
