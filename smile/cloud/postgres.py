"""One local PostgreSQL 15 cluster standing in for a machine (or the catalog).

`initdb` refuses root, so when we are root every server-side command runs as `postgres`
(`runuser`), and the data directory's parent belongs to that user. The cluster listens on
127.0.0.1 only, with SCRAM passwords, `wal_level=logical` and commit timestamps on.

Must not: hold SMILE's own schema or data logic; it only makes a healthy server exist.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import psycopg
from psycopg import sql

from smile.cloud.procs import as_service_user, give_to_service_user, pid_alive, run, stop_pid
from smile.errors import CloudError

if TYPE_CHECKING:
    from pathlib import Path

ROLE = "smile"
DATABASE = "smile"
MAX_SLOT_WAL_KEEP_MB = 4096
"""WAL a replication slot may hold back; a slot further behind is invalidated by PostgreSQL
and capture recovers by re-synchronising its relations (smile/delta_capture/resync.py)."""


def shared_buffers_mb() -> int:
    """Each cluster's buffer cache: a sixteenth of this box's memory, within [128 MB, 1 GB].
    At 128 MB a push on 1M-row relations spent most of its time evicting and re-reading pages
    that PostgreSQL had just written (the operating system's cache held them all)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return max(128, min(1024, total // 16))


def new_password() -> str:
    return secrets.token_urlsafe(18)


@dataclass(frozen=True)
class LocalCluster:
    name: str
    root: Path
    """Parent directory owned by the service user: holds `<name>/` (data), logs and sockets."""
    port: int
    password: str
    bindir: Path
    durable: bool = True
    superuser: ClassVar[str] = ROLE
    """The role `initdb` makes."""
    conf_file: ClassVar[str] = "smile.conf"
    """The file `postgresql.conf` includes, written at each start (`_write_conf`)."""

    @property
    def datadir(self) -> Path:
        return self.root / self.name

    @property
    def logfile(self) -> Path:
        return self.root / f"{self.name}.log"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    @property
    def dsn(self) -> str:
        return f"postgresql://{ROLE}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def admin_dsn(self) -> str:
        return f"postgresql://{ROLE}:{self.password}@127.0.0.1:{self.port}/postgres"

    def pid(self) -> int | None:
        """The postmaster's pid, if its pid file names a live process."""
        try:
            first = (self.datadir / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first)
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def initialized(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def initialize(self) -> None:
        """initdb once; later calls do nothing."""
        if self.initialized():
            return
        for d in (self.root, self.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
            give_to_service_user(d, 0o755)
        pwfile = self.root / f".{self.name}.pw"
        pwfile.write_text(self.password + "\n")
        give_to_service_user(pwfile, 0o600)
        try:
            run(
                as_service_user([
                    str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", self.superuser,
                    f"--pwfile={pwfile}", "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8",
                ]),
                f"initdb of {self.name}",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write(f"\ninclude_if_exists = '{self.conf_file}'\n")

    def _write_conf(self) -> None:
        lines = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "wal_level": "logical",
            "track_commit_timestamp": "on",
            "max_replication_slots": "32",
            "max_wal_senders": "32",
            "max_connections": "120",
            "shared_buffers": f"{shared_buffers_mb()}MB",
            "effective_cache_size": "4GB",
            "random_page_cost": "1.1",
            # at 1000 tweets/s a machine wrote 1 GB of WAL a minute and checkpointed every
            # minute at 2 GB, most of it full-page images after each checkpoint, all of which
            # its walsender decodes: fewer checkpoints and compressed page images
            "max_wal_size": "4GB",
            "wal_compression": "lz4",
            # a capturer away for long (stopped, far behind) must not fill the disk: beyond
            # this its slot is invalidated, and capture re-synchronises from snapshots
            "max_slot_wal_keep_size": f"{MAX_SLOT_WAL_KEEP_MB}MB",
            "logging_collector": "off",
            "log_min_messages": "warning",
        }
        if not self.durable:
            lines |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        path = self.datadir / self.conf_file
        path.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
        give_to_service_user(path, 0o600)

    def start(self) -> None:
        """Start the server (and create SMILE's database); a running server is left alone."""
        if self.pid() is None:
            self._write_conf()
            run(
                as_service_user([
                    str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l",
                    str(self.logfile), "-w", "-t", "60", "start",
                ]),
                f"start of {self.name}",
                timeout=90,
            )
        self._ensure_database()

    def _ensure_database(self) -> None:
        try:
            with psycopg.connect(self.admin_dsn(), autocommit=True, connect_timeout=10) as conn:
                exists = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
                ).fetchone()
                if not exists:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        except psycopg.Error as exc:
            raise CloudError(f"{self.name}: cannot create database {DATABASE}: {exc}") from exc

    def stop(self, mode: str = "fast") -> None:
        """Shut down (`fast`, or `immediate` as a crash would); a server that does not stop in
        time is killed."""
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(CloudError):
            run(
                as_service_user([
                    str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", mode,
                    "-w", "-t", "30", "stop",
                ]),
                f"stop of {self.name}",
                timeout=40,
            )
        stop_pid(pid, timeout=5)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def healthy(self) -> bool:
        if self.pid() is None:
            return False
        try:
            with psycopg.connect(self.dsn, connect_timeout=3) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.Error:
            return False
