"""A PostgreSQL cluster as an app's owner runs it, for the tests that attach databases to SMILE
(and `bare_smile`, a live SMILE to attach them to): its own `initdb` (bootstrap superuser
`admin`), its own databases and owners, data of its own, and the server's default
`wal_level = replica` until the test changes it. It is the local cloud's cluster code
(`LocalCluster`: initdb as the service user, pg_ctl start, stop) with the app's configuration
instead of SMILE's.

Its data directory is under `SMILE_TEST_APP_DIR` (default /var/tmp) and its port the first free
one from `SMILE_TEST_APP_PORT` (default 30300 + the test port shift / 10), away from the test
clouds.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import sql

from smile.cloud.postgres import LocalCluster, new_password
from smile.cloud.procs import free_port, give_to_service_user
from smile.deploy.install import stream_rows
from smile.settings import Settings
from tests.fix_api import Live, live_smile
from tests.fix_cloud import PORT_SHIFT

if TYPE_CHECKING:
    from collections.abc import Iterator

    from smile.topology import Topology

USERS = ("CREATE TABLE users (uid bigint PRIMARY KEY, screen_name text NOT NULL, "
         "followers int NOT NULL DEFAULT 0)")


def _small_users(topology: Topology) -> None:
    for m in topology.machines:
        with psycopg.connect(m.dsn, autocommit=True) as conn:
            conn.execute(USERS)
            conn.execute("INSERT INTO users SELECT i, 'user' || i, i % 50 "
                         "FROM generate_series(1, 2000) i")


@contextmanager
def bare_smile(label: str, port_offset: int, machines: int) -> Iterator[Live]:
    """A live SMILE without the dataset (no Spark): `machines` local machines (0: none) with
    their capturers and agents, each with a small `users` table, and `smile serve`."""
    with live_smile(label, port_offset, machines, 0, _small_users) as live:
        yield live


def caught_up(live: Live, sid: int, timeout: float = 60) -> dict[str, Any]:
    """The sharing once its MV's timestamp passes the moment the sources went quiet."""
    quiet = time.time() + 1
    deadline = time.monotonic() + timeout
    while True:
        status, body = live.call("GET", f"/sharings/{sid}")
        assert status == 200, body
        if body["mv_ts"] and datetime.fromisoformat(body["mv_ts"]).timestamp() >= quiet:
            return dict(body)
        assert time.monotonic() < deadline, f"the sharing did not catch up: {body}"
        time.sleep(0.5)


def submit(live: Live, body: dict[str, Any], token: str | None = None) -> tuple[int, Any]:
    """POST /sharings, again for up to 90 s while it is refused for want of room: on a box
    shared with other work the idle cores admission measures come and go."""
    deadline = time.monotonic() + 90
    while True:
        status, doc = live.call("POST", "/sharings", body, token=token)
        reason = str(doc.get("reason", "")) if isinstance(doc, dict) else ""
        if status != 422 or not ("no room" in reason or "capacity" in reason) \
                or time.monotonic() > deadline:
            return status, doc
        time.sleep(5)


def oracle_diff(home: str, sources: dict[str, str], query: str, mv_table: str
                ) -> tuple[int, int]:
    """(rows in the MV `mv_table` on the database `home`, rows differing from `query` run by
    PostgreSQL there on copies of the public tables `sources` names (table → its DSN))."""
    schema = f"oracle_{time.monotonic_ns()}"
    with psycopg.connect(home, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            for rel, dsn in sources.items():
                with psycopg.connect(dsn, autocommit=True) as src:
                    cols = src.execute(
                        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
                        "ORDER BY attnum", (f"public.{rel}",)).fetchall()
                    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(
                        sql.Identifier(schema, rel), sql.SQL(", ").join(
                            sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t))
                            for c, t in cols)))
                    stream_rows(src, sql.SQL("SELECT * FROM {}").format(
                        sql.Identifier("public", rel)), conn, sql.Identifier(schema, rel),
                        [c for c, _ in cols])
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            want = Counter(conn.execute(query).fetchall())
            conn.execute("RESET search_path")
            got = Counter(conn.execute(f"SELECT * FROM {mv_table}").fetchall())
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    return sum(got.values()), sum(((got - want) + (want - got)).values())


def app_port() -> int:
    start = int(os.environ.get("SMILE_TEST_APP_PORT", str(30300 + PORT_SHIFT // 10)))
    return free_port(start)


def app_root() -> Path:
    base = Path(os.environ.get("SMILE_TEST_APP_DIR", "/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    root = Path(tempfile.mkdtemp(prefix="smile-appdb-", dir=base))
    root.chmod(0o755)
    return root


@dataclass(frozen=True)
class AppCluster(LocalCluster):
    """An app's own cluster: superuser `admin`, SCRAM passwords, listening on 127.0.0.1."""

    superuser: ClassVar[str] = "admin"
    conf_file: ClassVar[str] = "app.conf"

    def dsn_as(self, user: str, password: str, database: str) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def admin_dsn(self) -> str:
        return self.dsn_as(self.superuser, self.password, "postgres")

    @property
    def dsn(self) -> str:
        return self.admin_dsn()

    def _write_conf(self) -> None:
        """The app's settings: where it listens, and PostgreSQL's defaults otherwise
        (`wal_level = replica`); `ALTER SYSTEM` overrides them."""
        path = self.datadir / self.conf_file
        path.write_text(f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                        f"unix_socket_directories = '{self.socket_dir}'\nfsync = off\n")
        give_to_service_user(path, 0o600)

    def _ensure_database(self) -> None:
        """An app's cluster has no database of SMILE's."""

    def alter_system(self, setting: str, value: str) -> None:
        with psycopg.connect(self.admin_dsn(), autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET {setting} = '{value}'")


@contextmanager
def app_cluster(name: str) -> Iterator[AppCluster]:
    """A new app cluster, running; stopped and deleted afterwards."""
    cluster = AppCluster(name=name, root=app_root() / "pg", port=app_port(),
                         password=new_password(), bindir=Settings().pg_bindir, durable=False)
    try:
        cluster.initialize()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root.parent, ignore_errors=True)
