"""Retention of delta rows — capture's ΔR and the plan's intermediate deltas alike: rows every
reader of a delta is past are deleted, in batches, and the delta remembers how far it was
pruned (`_smile.delta_pruned`), so that a vertex that starts reading it later (a re-route, a
new vertex filled at t0) is first brought past that point.

The rule: a delta holds every row stamped after TS(r) of each of its readers r (a reader on
another machine is stood for by a mirror TS on the delta's machine, moved by each copy).
Retention deletes rows at or below the least of those TS; a delta with no reader, or a reader
with no TS yet, loses nothing. A *lease* (a reader at the epoch) freezes a delta's retention
while a new version of the plan is installed; lease and retention serialise on one advisory
lock per machine, so once a lease is committed no retention running beside it can still
delete, and `pruned` read after it is final.

A batch waits at most `LOCK_WAIT` for the delta's table (a withdrawal dropping it, an index
being built on it): past that it gives the delta up until the next round, rather than holding
the machine's lock — and so every other retention and lease — behind someone else's DDL.

A round over many deltas (`prune_due`) first asks, in three statements whatever their number,
which of them hold a row at or below their floor, and prunes only those: most rounds find
most deltas with nothing to delete (their readers have not moved since), and a transaction
per delta per round cost a machine more CPU than some of its operators. The look is only a
filter: the deletion itself still goes through `prune`, under the lock, with the floor read
again there.

A delta with no row past its floor — an intermediate one between two pushes, read whole — is
emptied with TRUNCATE when nobody holds it at that instant (`_empty`), else its rows are deleted
in batches like any other's.

Each batch commits synchronously (the connection's default): a reader's TS committed
asynchronously before it (`vertex_ts.begin_local_advance`) is then on disk too.

Must not: decide who reads what (install registers readers) or run on the critical path of a
push (the capturer and the agent call it from their own loops, on connections of their own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import errors, sql

from smile.errors import AgentError
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    import psycopg

LOCK_KEY = 0x534D494C45  # "SMILE": one advisory lock per machine for retention and leases
BATCH = 20_000
"""Rows deleted per transaction: a long backlog goes in short steps beside the pushes."""
LOCK_WAIT = "500ms"
"""How long a batch waits for its delta's table before leaving it to the next round."""


def serialise(conn: psycopg.Connection[Any]) -> None:
    """In the caller's transaction: wait for (and then hold out) any retention on this machine."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))


def floor(conn: psycopg.Connection[Any], delta_vertex: str) -> datetime | None:
    """The least TS of the delta's readers, or None when it has none (or one has no TS)."""
    return floors(conn, [delta_vertex]).get(delta_vertex)


def floors(conn: psycopg.Connection[Any], deltas: Iterable[str]) -> dict[str, datetime]:
    """`floor` of each of `deltas` that has one, in one statement."""
    return {d: f for d, f in conn.execute(
        "SELECT r.delta_vertex, CASE WHEN bool_and(v.ts IS NOT NULL) THEN min(v.ts) END "
        f"FROM _smile.delta_readers r LEFT JOIN {vertex_ts.TABLE} v "
        "ON v.vertex = r.reader_vertex "
        "WHERE r.delta_vertex = ANY(%s) GROUP BY 1", (list(deltas),)).fetchall()
        if f is not None}


def prune(conn: psycopg.Connection[Any], delta_vertex: str, table: tuple[str, str],
          batch: int = BATCH) -> int:
    """Delete the rows of `table` (the delta `delta_vertex`) every reader is past, `batch` rows
    per transaction; returns how many. `conn` must be in autocommit mode. A table locked by
    someone else for longer than `LOCK_WAIT` is left as it is until the next call."""
    deleted = 0
    while True:
        try:
            n = _prune_batch(conn, delta_vertex, table, batch)
        except (errors.LockNotAvailable, errors.UndefinedTable):  # busy, or dropped meanwhile
            return deleted
        if n is None:
            return deleted
        deleted += n
        if n < batch:
            return deleted


def _prune_batch(conn: psycopg.Connection[Any], delta_vertex: str, table: tuple[str, str],
                 batch: int) -> int | None:
    """One transaction of `prune`: the rows deleted, None when the delta has no floor."""
    with conn.transaction():
        serialise(conn)
        below = floor(conn, delta_vertex)
        if below is None:
            return None
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (LOCK_WAIT,))
        emptied = _empty(conn, table, below)
        if emptied is not None:
            n, newest = emptied
        else:
            row = conn.execute(sql.SQL(
                "WITH gone AS (DELETE FROM {t} WHERE ctid = ANY(ARRAY("
                "SELECT ctid FROM {t} WHERE __ts <= %s LIMIT %s)) RETURNING __ts) "
                "SELECT count(*), max(__ts) FROM gone").format(t=sql.Identifier(*table)),
                (below, batch)).fetchone()
            n, newest = (int(row[0]), row[1]) if row else (0, None)
        if newest is not None:
            mark_pruned(conn, [delta_vertex], newest)
        return n


def mark_pruned(conn: psycopg.Connection[Any], deltas: Iterable[str], ts: datetime) -> None:
    """Record that rows of these deltas at or below `ts` may be gone (never lowered)."""
    conn.execute(
        "INSERT INTO _smile.delta_pruned SELECT d, %s FROM unnest(%s::text[]) d "
        "ON CONFLICT (delta_vertex) DO UPDATE SET ts = greatest(_smile.delta_pruned.ts, "
        "excluded.ts)", (ts, list(deltas)))


def require_rows_after(conn: psycopg.Connection[Any], deltas: Iterable[str], t: datetime,
                       reader: str) -> None:
    """Refuse (AgentError) unless these deltas still hold every row stamped after `t`: what
    rolls a relation ahead of `t` back to it (`reader` names it in the error). Called under
    `serialise`, so what it found stays true until the caller commits."""
    late = sorted((p, d) for d, p in pruned(conn, deltas).items() if p > t)
    if late:
        p, d = late[-1]
        raise AgentError(f"cannot read {reader} as of {t.isoformat()}: {d} was pruned up to "
                         f"{p.isoformat()}")


def readers_below(conn: psycopg.Connection[Any], deltas: Iterable[str], ts: datetime
                  ) -> list[tuple[str, str, datetime | None]]:
    """The registered readers of these deltas (a lease among them) that are below `ts` or
    have no TS yet: (delta, reader, its TS)."""
    return [(d, r, t) for d, r, t in conn.execute(
        f"SELECT r.delta_vertex, r.reader_vertex, v.ts FROM _smile.delta_readers r "
        f"LEFT JOIN {vertex_ts.TABLE} v ON v.vertex = r.reader_vertex "
        "WHERE r.delta_vertex = ANY(%s) AND (v.ts IS NULL OR v.ts < %s) ORDER BY 1, 2",
        (list(deltas), ts)).fetchall()]


def _empty(conn: psycopg.Connection[Any], table: tuple[str, str], below: datetime
           ) -> tuple[int, datetime | None] | None:
    """When no row of the delta is stamped after `below` — an intermediate delta between two
    pushes, which its readers have taken whole — TRUNCATE it: (rows, newest stamp) gone.
    Deleting them row by row wrote a dead version and its WAL per row, for VACUUM to clean
    after. None (nothing done) when a row is newer, or when someone holds the table: the
    exclusive lock is only taken if it is free at once (`_smile.lock_at_once`, `NOWAIT`, its
    refusal caught in the server so that it logs no ERROR), so no operator ever waits for
    retention, which then deletes as before. The rows are those the deletion would take
    (all at or below the floor no reader needs), and TRUNCATE's one departure from MVCC — a
    snapshot older than it sees the table empty — cannot matter: a statement reading the table
    holds a lock that keeps TRUNCATE out, and what starts after it needs rows newer than
    the floor, of which there were none."""
    t = sql.Identifier(*table)
    look = sql.SQL("SELECT max(__ts) FROM {}").format(t)
    row = conn.execute(look).fetchone()
    if row is None or row[0] is None or row[0] > below:
        return None
    got = conn.execute("SELECT _smile.lock_at_once(%s::regclass)",
                       (t.as_string(conn),)).fetchone()
    if not (got and got[0]):
        return None
    row = conn.execute(sql.SQL("SELECT count(*), max(__ts) FROM {}").format(t)).fetchone()
    if row is None or row[1] is None or row[1] > below:  # written before the lock was ours
        return None
    conn.execute(sql.SQL("TRUNCATE {}").format(t))
    return int(row[0]), row[1]


def prune_due(conn: psycopg.Connection[Any], tables: dict[str, tuple[str, str]]) -> int:
    """`prune` each delta of `tables` (delta vertex → its table) that holds rows its readers
    are all past, and no other; the rows deleted. A table gone or locked meanwhile is
    tried on its own (`prune` leaves it for the next round)."""
    return sum(prune(conn, delta, tables[delta]) for delta in due(conn, tables))


def due(conn: psycopg.Connection[Any], tables: dict[str, tuple[str, str]]) -> list[str]:
    """The deltas of `tables` with a row at or below their floor (sorted): those a `prune`
    would delete from now. A delta with no floor or no table is not due. When the look
    cannot read a table within `LOCK_WAIT` (or one is dropped meanwhile), every delta with
    a floor and a table is returned, for `prune` to try one by one."""
    if not tables:
        return []
    below = floors(conn, tables)
    names = sorted(below)
    if not names:
        return []
    present = {d for (d,) in conn.execute(
        "SELECT d FROM unnest(%s::text[], %s::text[]) x(d, t) WHERE to_regclass(t) IS NOT NULL",
        (names, [sql.Identifier(*tables[d]).as_string(conn) for d in names])).fetchall()}
    names = [d for d in names if d in present]
    if not names:
        return []
    look = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT %s WHERE EXISTS (SELECT 1 FROM {} WHERE __ts <= %s)").format(
            sql.Identifier(*tables[d])) for d in names)
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (LOCK_WAIT,))
            hits = {d for (d,) in conn.execute(look, [x for d in names
                                                      for x in (d, below[d])]).fetchall()}
    except (errors.LockNotAvailable, errors.UndefinedTable):  # dropped or held meanwhile
        return names
    return [d for d in names if d in hits]


def pruned(conn: psycopg.Connection[Any], deltas: Iterable[str]) -> dict[str, datetime]:
    """How far each of these deltas was pruned (rows at or below may be gone); a delta never
    pruned is absent."""
    rows = conn.execute("SELECT delta_vertex, ts FROM _smile.delta_pruned "
                        "WHERE delta_vertex = ANY(%s)", (list(deltas),)).fetchall()
    return {k: t for k, t in rows}


def forget(conn: psycopg.Connection[Any], deltas: Iterable[str]) -> None:
    """Drop the record of deltas that are gone (a delta made again starts whole)."""
    conn.execute("DELETE FROM _smile.delta_pruned WHERE delta_vertex = ANY(%s)", (list(deltas),))
