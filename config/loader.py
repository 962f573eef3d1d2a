"""Reading the TOML config file into validated settings."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from config.errors import ConfigError
from config.settings import ProxySettings, parse_proxy_settings

_SECTIONS = ("proxy",)


@dataclass(frozen=True)
class ProxyConfig:
    path: Path | None
    proxy: ProxySettings


def load_config(path: Path | str) -> ProxyConfig:
    """Parse and validate; raises ConfigError listing every problem found, not just the first."""
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(path, [f"cannot read: {exc.strerror or exc}"]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, [f"not valid TOML: {exc}"]) from exc
    problems: list[str] = []
    for section in document:
        if section not in _SECTIONS:
            problems.append(f"unknown section [{section}] (known: {', '.join(_SECTIONS)})")
    raw_proxy = document.get("proxy", {})
    if not isinstance(raw_proxy, dict):
        problems.append("[proxy] must be a table")
        raw_proxy = {}
    proxy = parse_proxy_settings(raw_proxy, problems)
    if problems:
        raise ConfigError(path, problems)
    return ProxyConfig(path=path, proxy=proxy)
