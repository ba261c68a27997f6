"""The one settings object of SMILE.

Values come, highest first, from keyword arguments, environment variables `SMILE_*` (nested lists
as JSON, e.g. `SMILE_MACHINES='[{"name": "m1", "dsn": "postgresql://…"}]'`), a TOML file named by
`SMILE_CONFIG`,
and the defaults below. Leaving `machines`, `catalog_dsn` and `broker_url` unset
means "use the local cloud started by `smile cloud up` in `state_dir`"; setting them points SMILE at
real separate hosts, an existing broker and (with `spark_master`) a Spark cluster.

Must not: open connections or start anything; it only describes where things are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

GROWTH_HORIZON_S = 120.0
"""How far ahead admission looks by default: it charges the tables as they will be this many
seconds from now at their measured growth (`CatalogSnapshot.ahead`). A join whose work grows
with a table (a change of `loc` meets every tweet of its user) admitted at the margin on the
tables of the moment violates once the table has grown. The running vertices' rates are
measured (`CatalogSnapshot.observed`), so this mostly weighs the new sharing's own."""
READER_NICE = 10
"""The nice value agents give consumers' backends by default (`Settings.reader_nice`). At 10
an operator's backend (nice 0) gets about 9 of every 10 time slices of a core both want."""


class MachineConfig(BaseModel):
    """One machine given by hand: a name (`m1`…) and a libpq DSN of a superuser-capable role."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,30}$")
    dsn: str
    cores: float | None = Field(default=None, gt=0)
    """Its cores (None: the optimizer's default machine's)."""
    price_per_hour: float | None = Field(default=None, ge=0)
    """Its price in $ per hour (None: the optimizer's default machine's)."""


class Settings(BaseSettings):
    """Where SMILE's machines, catalog, broker and Spark are; how the local cloud is laid out."""

    model_config = SettingsConfigDict(env_prefix="SMILE_", extra="forbid")

    state_dir: Path = Path("/var/tmp/smile")
    """Local cloud: data directories, logs and `cloud.json` live here."""
    machines: list[MachineConfig] = Field(default_factory=list)
    """External machines; empty means the local cloud's."""
    catalog_dsn: str | None = None
    """External catalog database; None means the local cloud's catalog cluster."""
    broker_url: str | None = None
    """External STOMP broker, `stomp://host:port`; None means the local cloud's ActiveMQ."""
    spark_master: str = "local[*]"
    """`local[*]` embeds Spark in the process; `spark://host:7077` uses a cluster."""
    jdbc_jar: Path = Path("/usr/share/java/postgresql.jar")
    """PostgreSQL JDBC driver (Debian's libpostgresql-jdbc-java)."""
    pg_bindir: Path = Path("/usr/lib/postgresql/15/bin")
    activemq_home: Path = Path("/usr/share/activemq")
    base_port: int = Field(default=54330, ge=1024, le=65000)
    """Local cloud: the catalog cluster listens here, machine `mi` on `base_port + i`."""
    stomp_port: int = Field(default=61613, ge=1024, le=65535)
    durable: bool = True
    """Local cloud: False turns off fsync and synchronous_commit (tests only)."""
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    max_load: float = Field(default=0.7, gt=0, le=1)
    """The share of each machine's cores SMILE's operators may keep busy: admission holds
    every machine's predicted load within `cores × max_load` (on the local cloud each machine
    has cores / N of this box)."""
    reader_nice: int = Field(default=READER_NICE, ge=0, le=19)
    """The nice value each agent gives its cluster's backends serving consumers' reads, so
    that reads keeping every core busy leave a core to SMILE's pushes first (0: reads keep
    the default priority). Works where an agent runs beside its cluster as root or as the
    cluster's user (`smile/agent/reader_priority.py`)."""
    maintenance: Literal["auto", "incremental", "recompute"] = "auto"
    """How the executor's pushes keep relation vertices (`smile serve --maintenance` overrides
    it): by the path the time model prices cheaper per push (auto, docs/design/recompute.md);
    always by their deltas; or always recomputed."""
    growth_horizon_s: float = Field(default=GROWTH_HORIZON_S, ge=0, le=86400)
    """Admission charges the published tables as they will be this many seconds ahead, at
    the rows per second they grow by (0: as they are)."""

    @field_validator("broker_url")
    @classmethod
    def _stomp_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("stomp://"):
            raise ValueError("broker_url must look like stomp://host:port")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config = os.environ.get("SMILE_CONFIG")
        if config:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config)))
        return tuple(sources)
