"""A test's tier is the directory it lives in, not a marker line each module must remember:
`pytest -m unit` then runs the unit tests and nothing that starts Kafka, Spark, Chromium,
promtool or a wheel build."""

from __future__ import annotations

from pathlib import Path

import pytest

_ROOT = Path(__file__).parent
#: top-level directories under tests/ and the marker each gives its tests
TIERS = {"unit": "unit", "integration": "integration", "spark": "spark", "deploy": "deploy"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = TIERS.get(item.path.relative_to(_ROOT).parts[0])
        if tier is not None:
            item.add_marker(tier)
