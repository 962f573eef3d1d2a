"""One local Spark session for the pipeline's tests: starting one takes seconds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipeline.report import ReportOptions, session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    options = ReportOptions(
        master="local[2]",
        conf=(
            "spark.ui.showConsoleProgress=false",
            "spark.ui.enabled=false",
            "spark.sql.shuffle.partitions=2",
        ),
    )
    spark = session(options)
    yield spark
    spark.stop()
