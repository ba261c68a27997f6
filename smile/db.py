"""Small helpers at the PostgreSQL edge: connecting with errors that keep their SQLSTATE, piping
one COPY into another, what kind of relation a name is, and turning a libpq DSN into a JDBC URL
for Spark.

Must not: hold SMILE logic.
"""

from __future__ import annotations

import contextlib
import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from smile.errors import SmileError

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Iterable, Iterator, Mapping

log = logging.getLogger("smile.db")

SYNC_COMMIT = "-c synchronous_commit=on"
OPERATOR_SESSION = f"{SYNC_COMMIT} -c jit=off -c work_mem=64MB"
"""SMILE's sessions run short set-based operators: JIT compilation (≈0.1 s a statement) costs more
than it saves, and grouping a delta must not spill to disk at the 4 MB default."""


def connect(
    dsn: str, *, autocommit: bool = False, what: str = "database", application_name: str = "smile",
    connect_timeout: int = 10,
) -> psycopg.Connection[Any]:
    """A psycopg 3 connection; failure raises `SmileError` with the server's SQLSTATE.

    SMILE's own writes commit synchronously whatever the server's default: metadata, deltas
    and progress must survive a crash once acknowledged (`OPERATOR_SESSION`).
    """
    try:
        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=connect_timeout,
                               options=OPERATOR_SESSION, application_name=application_name)
    except psycopg.Error as exc:
        raise SmileError(f"cannot connect to {what}: {exc}".strip(), sqlstate=exc.sqlstate) from exc


@contextmanager
def connect_all(machines: Iterable[Any], *, application_name: str = "smile"
                ) -> Iterator[dict[str, psycopg.Connection[Any]]]:
    """Autocommit connections to each of `machines` (anything with `name` and `dsn`), by
    name; all of them closed on the way out, also when one of them cannot be opened."""
    conns: dict[str, psycopg.Connection[Any]] = {}
    try:
        for m in machines:
            conns[m.name] = connect(m.dsn, autocommit=True, what=m.name,
                                    application_name=application_name)
        yield conns
    finally:
        for c in conns.values():
            c.close()


@contextmanager
def session_timeouts(conns: Iterable[psycopg.Connection[Any]], timeout_s: float
                     ) -> Iterator[None]:
    """`statement_timeout` = `timeout_s` and `lock_timeout` = a fifth of it (at least 1 s) on
    `conns` (autocommit sessions) for the block, the defaults again after it; no limit for 0."""
    if timeout_s <= 0:
        yield
        return
    ms = max(1, round(timeout_s * 1000))
    lock_ms = min(ms, max(1000, ms // 5))
    live = [c for c in conns if not (c.closed or c.broken)]
    try:  # one round trip each way (a push's connections are set and reset on every push)
        for conn in live:
            conn.execute(f"SET statement_timeout = {ms}; SET lock_timeout = {lock_ms}")
        yield
    finally:
        for conn in live:
            if not (conn.closed or conn.broken):
                with contextlib.suppress(psycopg.Error):
                    conn.execute("RESET statement_timeout; RESET lock_timeout")


def heal(conns: dict[str, psycopg.Connection[Any]], dsns: Mapping[str, str], *,
         application_name: str = "smile") -> list[str]:
    """Open again, in place, every connection of `conns` that its server dropped (a restart, a
    terminated backend); returns their names. One that cannot be opened yet is left broken, to
    be healed by a later call."""
    healed = []
    for name, conn in list(conns.items()):
        if not (conn.closed or conn.broken):
            continue
        try:
            fresh = connect(dsns[name], autocommit=conn.autocommit, what=name,
                            application_name=application_name)
        except SmileError:
            continue
        conn.close()
        conns[name] = fresh
        healed.append(name)
    return healed


SESSION_USES = 1000
"""Commands (or rounds) one of SMILE's long-lived sessions serves before it is closed and opened
again (`renew`). PostgreSQL 15 never lets go of what a backend's catalog caches learned about a
relation once it is dropped: DeltaToRel makes a temporary table — a relation with a new OID —
on every push it nets, and planning a query on it leaves entries behind. Measured on a real
cluster, a session that makes, reads and drops a temporary table per transaction keeps ≈0.2 KB
(making it) to ≈0.6 KB (and reading it) of `CacheMemoryContext` per transaction, without end;
one that keeps its temporary table and empties it, next to nothing (≈0.005 KB;
`tests/test_footprint_memory`).
Over the hour at 800 tweets/s each agent worker's grew 2.1 → 4.3 MB, and the clusters
0.15–0.24 MB a minute after the first 12. A fresh session every 1000 bounds it at ≈0.6 MB;
opening them again costs ≈40 ms for a worker's three (median of 10, measured beside the
long run), and the first push after it a few ms more (its caches fill again): per push,
0.04 ms."""


def renew(conns: dict[str, psycopg.Connection[Any]], dsns: Mapping[str, str], *,
          application_name: str = "smile") -> list[str]:
    """Close every connection of `conns` and open it again, in place (`SESSION_USES`): a new
    backend, with empty caches. Returns the names opened again; one that cannot be opened now
    is left closed, and `heal` opens it when it is next needed."""
    for conn in conns.values():
        with contextlib.suppress(psycopg.Error):
            conn.close()
    return heal(conns, dsns, application_name=application_name)


def every(dsn: str, period_s: float, stop: threading.Event,
          body: Callable[[psycopg.Connection[Any]], object], *, what: str,
          application_name: str = "smile", uses: int = SESSION_USES) -> None:
    """`body(conn)` every `period_s` until `stop`, on an autocommit connection of its own to
    `dsn`: a round that fails (the database away, a lock not granted in time) is logged and
    skipped, and a dropped connection opened again for the next. The connection is renewed
    every `uses` rounds (`SESSION_USES`)."""
    conns: dict[str, psycopg.Connection[Any]] = {}
    rounds = 0
    try:
        while not stop.wait(period_s):
            try:
                if what not in conns:
                    conns[what] = connect(dsn, autocommit=True, what=what,
                                          application_name=application_name)
                elif rounds >= uses:
                    renew(conns, {what: dsn}, application_name=application_name)
                    rounds = 0
                rounds += 1
                body(conns[what])
            except Exception as exc:
                log.warning("%s: %s", what, exc)
                heal(conns, {what: dsn}, application_name=application_name)
    finally:
        for conn in conns.values():
            conn.close()


PIPE_BLOCK = 1 << 19
"""Bytes gathered from a COPY TO before they are written to the COPY FROM. The server sends a
row per message: written one by one, 1M rows of three columns took 2.4 s between two machines
here, gathered into blocks 1.2 s (reading alone 0.8 s)."""


def pipe(reader: Iterable[Any], writer: Any) -> int:
    """Everything `reader` (a `COPY … TO STDOUT`) yields into `writer` (a `COPY … FROM
    STDIN`), in blocks of about `PIPE_BLOCK` bytes; the bytes moved."""
    block = bytearray()
    moved = 0
    for chunk in reader:
        block += chunk
        if len(block) >= PIPE_BLOCK:
            moved += len(block)
            writer.write(bytes(block))
            block.clear()
    if block:
        moved += len(block)
        writer.write(bytes(block))
    return moved


def relkind(conn: psycopg.Connection[Any], table: tuple[str, str]) -> str | None:
    """'r' for a table, 'v' for a view (`pg_class.relkind`), None when `table` does not exist."""
    row = conn.execute(sql.SQL("SELECT {}").format(relkind_of(table))).fetchone()
    return str(row[0]) if row and row[0] is not None else None


def relkind_of(table: tuple[str, str]) -> sql.Composed:
    """`relkind` as an expression, for a caller that reads it inside another statement."""
    return sql.SQL("(SELECT relkind::text FROM pg_class WHERE oid = to_regclass({}))").format(
        regclass_name(table))


def regclass_name(table: tuple[str, str]) -> sql.Literal:
    """`table`'s quoted name as a text literal, for `to_regclass` inside a statement."""
    return sql.Literal(sql.Identifier(*table).as_string(None))


def jdbc_target(dsn: str) -> tuple[str, dict[str, str]]:
    """JDBC URL and connection properties for a libpq DSN.

    >>> jdbc_target("postgresql://u:p@127.0.0.1:5433/db")[0]
    'jdbc:postgresql://127.0.0.1:5433/db?reWriteBatchedInserts=true'
    """
    d = conninfo_to_dict(dsn)
    host, port, db = d.get("host", "localhost"), d.get("port", "5432"), d.get("dbname", "postgres")
    props = {"driver": "org.postgresql.Driver"}
    if "user" in d:
        props["user"] = str(d["user"])
    if "password" in d:
        props["password"] = str(d["password"])
    return f"jdbc:postgresql://{host}:{port}/{db}?reWriteBatchedInserts=true", props


def host_port(dsn: str) -> str:
    """`host:port` of a libpq DSN and nothing else of it (it carries a password).

    >>> host_port("postgresql://u:secret@127.0.0.1:5433/db")
    '127.0.0.1:5433'
    >>> host_port("dbname=x")
    ':5432'
    """
    d = conninfo_to_dict(dsn)
    return f"{d.get('host', '')}:{d.get('port', 5432)}"
