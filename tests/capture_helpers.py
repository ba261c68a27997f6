"""Helpers for capture tests: a capturer as a real process (to SIGKILL) or a thread, an audit
trail of the true change history kept by triggers, and waiting until capture has caught up."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from smile.delta_capture.capturer import CaptureOptions, Capturer
from smile.delta_capture.decode import parse_lsn
from smile.delta_capture.registry import delta_table
from smile.housekeeping.capture import Housekeeping, run_beside

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

_names = itertools.count(1)


def fresh_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


class CapturerProcess:
    """`smile capture run` for one machine (or several: one process capturing each) as a child
    process."""

    def __init__(self, handle: CloudHandle, machine: str | tuple[str, ...] = "m1",
                 shadow_every: float = 0) -> None:
        self.handle, self.shadow_every = handle, shadow_every
        self.machines = (machine,) if isinstance(machine, str) else machine
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = os.environ | {"SMILE_STATE_DIR": str(self.handle.settings.state_dir)}
        machines = [arg for m in self.machines for arg in ("--machine", m)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "smile.cli.main", "capture", "run", *machines,
             "--shadow-every", str(self.shadow_every)],
            env=env, stdout=subprocess.DEVNULL,
            stderr=(self.handle.settings.state_dir / "capturer.log").open("ab"),
        )

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> CapturerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class CapturerThread:
    """A capturer with its housekeeping beside it, as `smile capture run` composes them;
    `shadow_s` and `retention_s` go to the housekeeping, the other options to the capturer."""

    def __init__(self, dsn: str, *, shadow_s: float = 10.0, retention_s: float = 5.0,
                 **options: Any) -> None:
        self.capturer = Capturer(dsn, options=CaptureOptions(**options))
        self.stop_event = threading.Event()
        keep = Housekeeping(retention_s=retention_s, shadow_s=shadow_s)
        self.thread = threading.Thread(target=run_beside,
                                       args=(self.capturer, self.stop_event, keep), daemon=True)

    def __enter__(self) -> CapturerThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(15)


# Test clouds run with synchronous_commit=off; a crash (immediate restart) may then lose
# transactions that were acknowledged, which is that setting's contract, not capture's. Test
# sessions that write the "true history" therefore commit synchronously.
SYNC = "-c synchronous_commit=on"


def connect_retry(dsn: str, timeout: float = 30) -> psycopg.Connection[Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True, connect_timeout=3, options=SYNC)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def wait_caught_up(dsn: str, timeout: float = 60) -> None:
    """Until capture's durable progress passes the source's current WAL position."""
    with connect_retry(dsn) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = parse_lsn(row[0])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with connect_retry(dsn) as conn:
                got = conn.execute(
                    "SELECT end_lsn::text FROM _smile.capture_progress").fetchone()
            if got and parse_lsn(got[0]) >= target:
                return
        except psycopg.OperationalError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"capture did not catch up with {row[0]} in {timeout}s")


def install_audit(conn: psycopg.Connection[Any], table: str) -> None:
    """Triggers recording the true change history of `table` (aborted transactions vanish)."""
    conn.execute("CREATE SCHEMA IF NOT EXISTS audit")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS audit.log (seq bigserial PRIMARY KEY, xid bigint, "
        "tbl text, sign int, row jsonb)"
    )
    conn.execute("""
        CREATE OR REPLACE FUNCTION audit.row_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP IN ('UPDATE', 'DELETE') THEN
            INSERT INTO audit.log (xid, tbl, sign, row)
            VALUES (txid_current(), TG_TABLE_NAME, -1, to_jsonb(OLD));
          END IF;
          IF TG_OP IN ('UPDATE', 'INSERT') THEN
            INSERT INTO audit.log (xid, tbl, sign, row)
            VALUES (txid_current(), TG_TABLE_NAME, 1, to_jsonb(NEW));
          END IF;
          RETURN NULL;
        END $$""")
    conn.execute("""
        CREATE OR REPLACE FUNCTION audit.truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          EXECUTE format('INSERT INTO audit.log (xid, tbl, sign, row) '
                         'SELECT txid_current(), %L, -1, to_jsonb(t) FROM %I.%I t',
                         TG_TABLE_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME);
          RETURN NULL;
        END $$""")
    t = sql.Identifier("public", table)
    conn.execute(sql.SQL("CREATE TRIGGER audit_rows AFTER INSERT OR UPDATE OR DELETE ON {} "
                         "FOR EACH ROW EXECUTE FUNCTION audit.row_change()").format(t))
    conn.execute(sql.SQL("CREATE TRIGGER audit_truncate BEFORE TRUNCATE ON {} "
                         "FOR EACH STATEMENT EXECUTE FUNCTION audit.truncate()").format(t))


History = list[Counter[tuple[int, str]]]


def audit_history(conn: psycopg.Connection[Any], table: str) -> History:
    """Per committed transaction, in commit order, the multiset of (sign, row as JSON)."""
    rows = conn.execute(
        "SELECT xid, sign, row::text FROM audit.log WHERE tbl = %s ORDER BY seq", (table,)
    ).fetchall()
    groups: dict[int, Counter[tuple[int, str]]] = {}
    for xid, sign, row in rows:
        groups.setdefault(xid, Counter())[(sign, _canon(row))] += 1
    return list(groups.values())


def delta_history(conn: psycopg.Connection[Any], table: str) -> History:
    """The same, read back from ΔR; checks timestamps and positions on the way."""
    d = sql.Identifier("_smile", delta_table("public", table))
    rows = conn.execute(sql.SQL(
        "SELECT __lsn::text, __ts, __idx, __sign, "
        "(to_jsonb(x) - '__sign' - '__ts' - '__lsn' - '__idx')::text "
        "FROM {} x ORDER BY __lsn, __idx").format(d)).fetchall()
    groups: dict[str, Counter[tuple[int, str]]] = {}
    ts_of: dict[str, Any] = {}
    last_ts = None
    for lsn, ts, _idx, sign, row in rows:
        if lsn not in groups:
            assert last_ts is None or ts > last_ts, "__ts must grow with the commit LSN"
            last_ts = ts
            ts_of[lsn] = ts
        assert ts_of[lsn] == ts, "one transaction, one __ts"
        groups.setdefault(lsn, Counter())[(sign, _canon(row))] += 1
    idx = conn.execute(sql.SQL(
        "SELECT count(*) = count(DISTINCT (__lsn, __idx)) FROM {}").format(d)).fetchone()
    assert idx and idx[0], "(__lsn, __idx) must be unique"
    return list(groups.values())


def as_bag(history: History) -> Counter[frozenset[tuple[tuple[int, str], int]]]:
    """A history's transactions as a bag, their order forgotten: the audit log orders
    concurrent transactions by when they wrote, not by when they committed."""
    return Counter(frozenset(txn.items()) for txn in history)


def _canon(row: str) -> str:
    return json.dumps(json.loads(row), sort_keys=True)


def bag_difference(conn: psycopg.Connection[Any], a: sql.Composable, b: sql.Composable) -> int:
    row = conn.execute(sql.SQL(
        "SELECT (SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}) x) + "
        "(SELECT count(*) FROM (SELECT * FROM {b} EXCEPT ALL SELECT * FROM {a}) y)"
    ).format(a=a, b=b)).fetchone()
    assert row is not None
    return int(row[0])
