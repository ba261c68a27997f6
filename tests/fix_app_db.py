"""A PostgreSQL cluster as an app's owner runs it, for the tests that attach databases to SMILE
(and `bare_smile`, a live SMILE to attach them to):
its own `initdb` (bootstrap superuser `admin`), its own database and owner, data of its own,
and the server's default `wal_level = replica` until the test changes it. It reuses the local
cloud's cluster code (`LocalCluster`: initdb as the service user, pg_ctl start, stop) with the
app's configuration instead of SMILE's.

Its data directory is under `SMILE_TEST_APP_DIR` (default /var/tmp) and its port the first free
one from `SMILE_TEST_APP_PORT` (default 30300 + the test port shift / 10), away from the test
clouds.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from smile.cloud.local import LocalCloud
from smile.cloud.postgres import LocalCluster, new_password
from smile.cloud.procs import as_service_user, free_port, give_to_service_user, run
from smile.settings import Settings
from smile.topology import resolve_topology
from tests.fix_api import Live
from tests.fix_cloud import (
    ARTIFACTS,
    PORT_SHIFT,
    fresh_state_dir,
    keep_logs,
    throwaway_settings,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

ADMIN = "admin"
USERS = ("CREATE TABLE users (uid bigint PRIMARY KEY, screen_name text NOT NULL, "
         "followers int NOT NULL DEFAULT 0)")


@contextmanager
def bare_smile(label: str, port_offset: int, machines: int) -> Iterator[Live]:
    """A live SMILE without the dataset (no Spark): `machines` local machines with their
    capturers and agents, each with a small `users` table, and `smile serve`."""
    settings = throwaway_settings(fresh_state_dir(f"smile-{label}-"), port_offset=port_offset)
    local = LocalCloud(settings)
    handle: Live | None = None
    try:
        status = local.up(machines)
        assert status.healthy, status.to_json()
        topology = resolve_topology(settings)
        for m in topology.machines:
            with psycopg.connect(m.dsn, autocommit=True) as conn:
                conn.execute(USERS)
                conn.execute("INSERT INTO users SELECT i, 'user' || i, i % 50 "
                             "FROM generate_series(1, 2000) i")
        port = free_port(18000 + port_offset)
        env = os.environ | {"SMILE_STATE_DIR": str(settings.state_dir),
                            "SMILE_API_PORT": str(port)}
        handle = Live(settings, topology, f"http://127.0.0.1:{port}", env,
                      subprocess.Popen(["true"]))
        handle.start_serve()
        yield handle
    finally:
        if handle is not None and handle.serve.poll() is None:
            handle.serve.terminate()
            handle.serve.wait(20)
        keep_logs(settings.state_dir, label)
        for log in settings.state_dir.glob("logs/*.log"):
            (ARTIFACTS / label / log.name).write_bytes(log.read_bytes())
        local.down(purge=True)


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

    @classmethod
    def make(cls, name: str = "app") -> AppCluster:
        return cls(name=name, root=app_root() / "pg", port=app_port(), password=new_password(),
                   bindir=Settings().pg_bindir, durable=False)

    def dsn_as(self, user: str, password: str, database: str) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def admin_dsn(self) -> str:
        return self.dsn_as(ADMIN, self.password, "postgres")

    @property
    def dsn(self) -> str:
        return self.admin_dsn()

    def initialize(self) -> None:
        if self.initialized():
            return
        for d in (self.root, self.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
            give_to_service_user(d, 0o755)
        pwfile = self.root / f".{self.name}.pw"
        pwfile.write_text(self.password + "\n")
        give_to_service_user(pwfile, 0o600)
        try:
            run(as_service_user([str(self.bindir / "initdb"), "-D", str(self.datadir), "-U",
                                 ADMIN, f"--pwfile={pwfile}", "--auth=scram-sha-256",
                                 "--encoding=UTF8", "--locale=C.UTF-8"]),
                f"initdb of {self.name}")
        finally:
            pwfile.unlink(missing_ok=True)
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write("\ninclude_if_exists = 'app.conf'\n")

    def _write_conf(self) -> None:
        """The app's settings: where it listens, and PostgreSQL's defaults otherwise
        (`wal_level = replica`); `ALTER SYSTEM` overrides them."""
        path = self.datadir / "app.conf"
        path.write_text(f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                        f"unix_socket_directories = '{self.socket_dir}'\nfsync = off\n")
        give_to_service_user(path, 0o600)

    def _ensure_database(self) -> None:
        """An app's cluster has no database of SMILE's."""

    def alter_system(self, setting: str, value: str) -> None:
        with psycopg.connect(self.admin_dsn(), autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
