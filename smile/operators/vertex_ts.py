"""TS(v) of vertices, stored in `_smile.vertex_ts` beside the vertex's contents.

An operator locks its destination vertex's row (`lock`), returns early if it is already at or
past the target, and writes the new TS in the same transaction as the contents (`advance`).

Must not: commit; the caller owns the transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.errors import AgentError

if TYPE_CHECKING:
    from datetime import datetime

    import psycopg


def lock(conn: psycopg.Connection[Any], vertex: str, *, shared: bool = False) -> datetime:
    """Lock vertex `vertex` for this transaction and return its TS: exclusively to change it,
    `shared` to keep it (and the contents it stamps) from changing while it is read."""
    mode = "SHARE" if shared else "UPDATE"
    row = conn.execute(
        f"SELECT ts FROM _smile.vertex_ts WHERE vertex = %s FOR {mode}", (vertex,)
    ).fetchone()
    if row is None:
        raise AgentError(f"vertex {vertex!r} has no timestamp on this machine")
    ts: datetime = row[0]
    return ts


def begin_local_advance(conn: psycopg.Connection[Any], vertex: str) -> datetime:
    """`lock(vertex)` for an advance whose contents are read only on this machine, committed
    without waiting for the WAL flush (`synchronous_commit = off`, fsync stays on).

    Safe because a vertex's contents and its TS commit together and are a deterministic
    function of inputs that are themselves durable or recomputed: a crash that loses the
    commit loses both, TS(v) is back at its old value, and the next PUSH redoes the interval
    with the same result. Anything that reads the vertex and commits synchronously on this
    server (retention deleting input deltas below TS(v), DeltaToRel of a reader) writes its
    commit record after this one, and flushing it flushes this one too. Not for CopyDelta:
    its destination's TS releases rows on *another* machine (the mirror that retention there
    reads), which that machine's flush does not cover (docs/design/agents.md)."""
    conn.execute("SET LOCAL synchronous_commit = off")
    return lock(conn, vertex)


def read(conn: psycopg.Connection[Any], vertex: str) -> datetime:
    row = conn.execute("SELECT ts FROM _smile.vertex_ts WHERE vertex = %s", (vertex,)).fetchone()
    if row is None:
        raise AgentError(f"vertex {vertex!r} has no timestamp on this machine")
    ts: datetime = row[0]
    return ts


def advance(conn: psycopg.Connection[Any], vertex: str, ts: datetime) -> None:
    conn.execute("UPDATE _smile.vertex_ts SET ts = %s WHERE vertex = %s", (ts, vertex))


def slice_rows(conn: psycopg.Connection[Any], table: tuple[str, str], lo: datetime,
               hi: datetime) -> int:
    """How many rows of a delta table are stamped in (lo, hi] (what an operator reads of it)."""
    from psycopg import sql

    row = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE __ts > %s AND __ts <= %s").format(
        sql.Identifier(*table)), (lo, hi)).fetchone()
    return int(row[0]) if row else 0
