"""pytest plugin: one warm Spark session for the whole test session (local[*] by default,
SMILE_SPARK_MASTER to use a cluster)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from smile.settings import Settings
from smile.spark import spark_session, stop_spark

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = spark_session(Settings())
    yield session
    stop_spark()
