"""The operators' tools the deploy/ files are proven with, as `make test` provides them:
Debian's Prometheus (unpacked into .cache/prometheus, or on the PATH), docker-compose, and
Helm (built from the Go module proxy into .cache/helm, `make helm`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNPACKED = ROOT / ".cache" / "prometheus" / "usr" / "bin"
#: `make helm` builds this version (the Makefile's HELM_VERSION)
HELM = ROOT / ".cache" / "helm" / "v3.22.0" / "helm"


#: the Helm chart, and the value sets beside it that the suite renders besides its defaults
CHART = DEPLOY / "helm" / "kafka-quota-proxy"
VALUE_SETS = sorted((DEPLOY / "helm" / "values").glob("*.yaml"))


def chart_value_sets() -> list[Any]:
    """The chart's defaults (None) and each value set, as pytest parameters."""
    return [pytest.param(None, id="defaults")] + [
        pytest.param(path, id=path.stem) for path in VALUE_SETS
    ]


def tool(name: str) -> str:
    """The path of prometheus, promtool, docker-compose or helm; a clear failure when missing,
    since `make test` installs each of them."""
    unpacked = HELM if name == "helm" else UNPACKED / name
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
