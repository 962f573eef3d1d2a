"""Kafka's jars and tools, pinned in the pom beside this file and copied by Maven into a
git-ignored cache; Java commands on that classpath."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent


REPO = HERE.parent


POM = HERE / "pom.xml"


SPARK_KAFKA_POM = HERE / "spark-kafka-pom.xml"


CACHE = Path(os.environ.get("KQP_CACHE", REPO / ".cache"))


def _pinned(pom: Path, prop: str) -> str:
    """A pom's pinned version, read from the pom so there is a single place to change it."""
    match = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", pom.read_text())
    if match is None:
        raise RuntimeError(f"{pom}: no <{prop}> property")
    return match.group(1)


def kafka_version() -> str:
    return _pinned(POM, "kafka.version")


def spark_version() -> str:
    """The Spark release whose Kafka source the usage report's Kafka-topic path uses."""
    return _pinned(SPARK_KAFKA_POM, "spark.version")


def libs_dir() -> Path:
    return CACHE / f"kafka-{kafka_version()}" / "libs"


def ensure_jars() -> Path:
    """Fetch the broker and tools jars from Maven Central once; later calls are free."""
    return _fetch(POM, libs_dir(), kafka_version())


def ensure_spark_kafka_jars() -> list[Path]:
    """Spark's Kafka source and what it needs beside pyspark's jars, fetched once."""
    libs = _fetch(SPARK_KAFKA_POM, CACHE / f"spark-kafka-{spark_version()}", spark_version())
    return sorted(libs.glob("*.jar"))


def _fetch(pom: Path, libs: Path, version: str) -> Path:
    marker = libs / ".complete"
    if marker.exists():
        return libs
    libs.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}",
            "-DincludeScope=runtime",
        ],
        check=True,
    )
    marker.write_text(version)
    return libs


def java_command(
    main_class: str,
    args: Sequence[str],
    heap: str = "512m",
    server: bool = False,
    logging: Sequence[Path] = (),
) -> list[str]:
    """A command line running one of Kafka's main classes from the cached jars.

    A tool (anything but a broker) runs a few seconds at most: it gets the client JIT only and
    the serial collector, which start it in about 60 % of the time and CPU (TopicCommand
    --version: 0.38 s against 0.63 s here); a broker keeps C2 and G1. `logging`: log4j2
    configurations merged over localkafka's own."""
    libs = ensure_jars()
    runtime = ["-XX:+UseG1GC"] if server else ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    configurations = ",".join(str(path) for path in (HERE / "log4j2.properties", *logging))
    return [
        shutil.which("java") or "java",
        f"-Xmx{heap}",
        *runtime,
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={configurations}",
        "-cp",
        f"{libs}/*",
        main_class,
        *args,
    ]
