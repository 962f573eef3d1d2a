"""Reading usage samples into Spark: from the proxy's JSON-lines files, or from the Kafka topic
through Spark's Kafka source (spark-sql-kafka). The Spark schema is built from the one the
proxy writes with (quotas/usage_samples.py SAMPLE_FIELDS), so the two cannot drift apart."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from quotas.usage_samples import READABLE_VERSIONS, SAMPLE_FIELDS

_SPARK_TYPES: dict[type, DataType] = {int: LongType(), str: StringType(), float: DoubleType()}

SAMPLE_SCHEMA = StructType(
    [StructField(name, _SPARK_TYPES[kind], nullable=True) for name, kind in SAMPLE_FIELDS]
)


class SampleError(Exception):
    """Samples this job cannot read: a schema version it does not know, or none at all."""


def read_files(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Every sample file under these paths. Files still being written are hidden (a leading
    '.') and Spark skips them, as it skips '_' files."""
    return spark.read.schema(SAMPLE_SCHEMA).json(list(paths))


def read_kafka(
    spark: SparkSession, bootstrap_servers: str, topic: str, options: dict[str, str]
) -> DataFrame:
    """The whole topic, earliest to latest offsets, as one batch."""
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    values = reader.load().select(F.col("value").cast("string").alias("json"))
    return values.select(F.from_json("json", SAMPLE_SCHEMA).alias("s")).select("s.*")


def check_versions(versions: Sequence[int]) -> None:
    """Refuse samples of a schema this job does not know, naming the versions found. (A line
    that is not JSON at all reads as nulls and has no window; it is skipped.)"""
    unknown = sorted(set(versions) - set(READABLE_VERSIONS))
    if unknown:
        shown = ", ".join(map(str, unknown))
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise SampleError(
            f"samples of schema version {shown}: this report reads versions {readable}"
        )
