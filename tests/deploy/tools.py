"""The operators' tools the deploy/ files are proven with, as `make test` provides them:
Debian's Prometheus (unpacked into .cache/prometheus, or on the PATH) and docker-compose."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNPACKED = ROOT / ".cache" / "prometheus" / "usr" / "bin"


def tool(name: str) -> str:
    """The path of prometheus, promtool or docker-compose; a clear failure when missing,
    since `make test` installs each of them."""
    unpacked = UNPACKED / name
    if unpacked.exists():
        return str(unpacked)
    found = shutil.which(name)
    if found is None:
        raise AssertionError(f"{name} is missing: `make test` installs it (make {name})")
    return found


def read_yaml(path: Path) -> Any:
    """A YAML file of deploy/, read as the tool that takes it would."""
    document = yaml.safe_load(path.read_text())
    assert isinstance(document, dict), f"{path}: not a YAML mapping"
    return document
