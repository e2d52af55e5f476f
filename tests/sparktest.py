"""The local Spark session the Spark tests share: one per test run, local[2], no UI.

Without pyspark (the `[spark]` extra) the Spark tests skip with the reason shown, except under
CI=true, where they fail: CI must really run them (`dev.py test` installs the extra).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

if not os.environ.get("CI"):
    pytest.importorskip("pyspark", reason="the [spark] extra is not installed")


def local_session() -> SparkSession:
    """local[2] with few shuffle partitions (the test data are small); reused across modules."""
    from dprelease.mechanism.engines.spark import spark_session

    session = spark_session(
        master="local[2]",
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
