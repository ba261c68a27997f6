"""A PostgreSQL cluster as an app's owner runs it, for the tests that attach databases to SMILE:
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
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg

from smile.cloud.postgres import LocalCluster, new_password
from smile.cloud.procs import as_service_user, free_port, give_to_service_user, run
from smile.settings import Settings
from tests.fix_cloud import PORT_SHIFT

ADMIN = "admin"


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
