"""One local Spark session for the pipeline's tests: starting one takes seconds."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipeline.report import session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    args = argparse.Namespace(
        master="local[2]",
        kafka_topic=None,
        jars=None,
        conf=["spark.ui.showConsoleProgress=false", "spark.sql.shuffle.partitions=2"],
    )
    spark = session(args)
    yield spark
    spark.stop()
