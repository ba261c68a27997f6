"""One warm Spark session per process, configured from `Settings`.

`local[*]` embeds Spark; a `spark://` master uses a cluster. The PostgreSQL JDBC driver comes from
Debian's `libpostgresql-jdbc-java`. `SPARK_LOCAL_IP` defaults to 127.0.0.1 so nothing listens
beyond loopback.

Must not: hold SMILE logic; callers build their jobs on the session.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smile.errors import ConfigError

if TYPE_CHECKING:
    from smile.settings import Settings

_LOG4J2 = Path(__file__).with_name("spark_log4j2.properties")


class _Warm:
    lock = threading.Lock()
    session: Any = None


def spark_session(settings: Settings) -> Any:
    """The process's Spark session, started on first use (~7 s) and kept warm."""
    with _Warm.lock:
        if _Warm.session is not None:
            return _Warm.session
        if not settings.jdbc_jar.exists():
            raise ConfigError(
                f"{settings.jdbc_jar} is missing: install Debian's libpostgresql-jdbc-java"
            )
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        builder = (
            SparkSession.builder.master(settings.spark_master)
            .appName("smile")
            .config("spark.jars", str(settings.jdbc_jar))
            .config("spark.driver.memory", "2g")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_LOG4J2}")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.sql.session.timeZone", "UTC")
        )
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        _Warm.session = session
        return session


def stop_spark() -> None:
    with _Warm.lock:
        if _Warm.session is not None:
            _Warm.session.stop()
            _Warm.session = None
