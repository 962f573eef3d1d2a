"""Which build runs: `kafka-quota-proxy --version` and the `kafka_quota_proxy_build_info`
series, so that a dashboard or an incident note can say which release served, on which
Python and codec, without a shell in the container."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from prometheus_client.core import InfoMetricFamily
from prometheus_client.registry import Collector

PACKAGE: Final = "kafka-quota-proxy"


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return "unknown"


def build_labels() -> dict[str, str]:
    return {
        "version": _version(PACKAGE),
        "python": platform.python_version(),
        "kafka_python": _version("kafka-python"),
        "aiokafka": _version("aiokafka"),
    }


def version_line() -> str:
    labels = build_labels()
    return (
        f"{PACKAGE} {labels['version']} (Python {labels['python']}, kafka-python "
        f"{labels['kafka_python']}, aiokafka {labels['aiokafka']})"
    )


class BuildInfo(Collector):
    """One constant series: labels read once, at start-up."""

    def __init__(self) -> None:
        self._labels = build_labels()

    def collect(self) -> list[InfoMetricFamily]:
        family = InfoMetricFamily(
            "kafka_quota_proxy_build", "The build serving: its version, Python and codecs."
        )
        family.add_metric([], self._labels)
        return [family]
