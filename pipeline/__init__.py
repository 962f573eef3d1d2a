"""The PySpark usage pipeline (optional extra: pyspark)."""
