"""TS(v) of vertices, stored in `_smile.vertex_ts` beside the vertex's contents: the only
module that names that table. Everything SMILE reads or writes of it goes through the
functions here, or, inside a larger statement, through `TABLE` and `ts_of`.

An operator locks its destination vertex's row (`lock`, `begin_local_advance`), returns early
if it is already at or past the target, checks its inputs are complete and counts its slice
(`ready_slice`), and writes the new TS in the same transaction as the contents (`advance`).
Round trips are what a small push is made of (docs/design/agents.md, *Push speed*), so the
lock's statement can carry what the operator reads next (`begin_local_advance_with`: the
inputs' TS and the slice's size, another lock, a statistic), and the contents' last write can
carry the new TS (`write_and_advance`).
A relation vertex may be *stale* (docs/design/recompute.md, *Stale relations*): its TS moved
with its contents emptied, to be recomputed before anything reads it (`mark_stale`); a reader's
share lock and an advance by delta refuse it, a recomputation clears it (`advance`). A
relation kept in an UNLOGGED table (`unlogged`; docs/design/agents.md, *Unlogged relations*)
is stale too once a crash has emptied it: the one-row UNLOGGED table `ALIVE`, emptied by the
same crash recovery, says so until `settle_reset` marks them all. So is a delta kept in one
(*Unlogged deltas*): its readers refuse it below its TS (`input_ts_of`, `read_input`), its
producers refuse to add to it, and a skip clears it.
Deploys create and drop rows (`put`, `delete`), capture raises watermarks (`raise_to`), the
executor and auditor read them (`read_all`, `read_many`, `read_with_clock`).

Must not: commit; the caller owns the transaction.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from psycopg import sql

from smile.errors import AgentError, StaleRelation

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from datetime import datetime

    import psycopg

TABLE = "_smile.vertex_ts"
"""The table's qualified name, for statements that join it (`sql.SQL(TABLE)`)."""
ALIVE = "_smile.alive"
"""An UNLOGGED table of one row: empty after a crash, as every UNLOGGED table then is."""
STALE = f"(stale OR (unlogged AND NOT EXISTS (SELECT 1 FROM {ALIVE})))"
"""Whether a row's relation is stale: marked so, or unlogged and emptied by a crash not yet
settled (`settle_reset`)."""
_COLUMNS = {"stale": "boolean NOT NULL DEFAULT false",
            "unlogged": "boolean NOT NULL DEFAULT false"}

OnConflict = Literal["replace", "keep", "lower"]
_ON_CONFLICT: dict[str, str] = {
    "replace": "DO UPDATE SET ts = excluded.ts, stale = false",
    "keep": "DO NOTHING",
    "lower": f"DO UPDATE SET ts = least({TABLE}.ts, excluded.ts)",
}


def ts_of(vertex: sql.Composable) -> sql.Composed:
    """A scalar subquery giving the TS of `vertex` (a literal or a placeholder), to use inside
    a larger statement."""
    return sql.SQL("(SELECT ts FROM {} WHERE vertex = {})").format(sql.SQL(TABLE), vertex)


def input_ts_of(vertex: sql.Composable) -> sql.Composed:
    """`ts_of` for an input read from below its TS: NULL where it is stale — a delta a
    crash emptied (docs/design/agents.md, *Unlogged deltas*) holds none of the rows its TS
    stamps — which `ready` refuses."""
    return sql.SQL("(SELECT CASE WHEN {} THEN NULL ELSE ts END FROM {} WHERE vertex = {})"
                   ).format(sql.SQL(STALE), sql.SQL(TABLE), vertex)


def ensure_table(conn: psycopg.Connection[Any]) -> None:
    """Create the table if missing (schema `_smile` exists; capture's schema setup calls this).
    One row per vertex kept on this machine — delta watermarks, shadow copies, copies,
    intermediates and MVs — updated in the same transaction as the vertex's contents."""
    conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (vertex text PRIMARY KEY, "
                 "ts timestamptz NOT NULL, "
                 + ", ".join(f"{c} {ty}" for c, ty in _COLUMNS.items()) + ")")
    # on a table made before a column existed, added; only then: `ADD COLUMN IF NOT EXISTS`
    # takes an ACCESS EXCLUSIVE lock even when it is there, and this runs beside operators
    have = {c for (c,) in conn.execute(
        f"SELECT attname FROM pg_attribute WHERE attrelid = '{TABLE}'::regclass "
        "AND NOT attisdropped").fetchall()}
    for column, definition in _COLUMNS.items():
        if column not in have:  # two processes upgrading at once: the second finds it
            conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS {column} {definition}")
    # never filled here: only `settle_reset` may say the unlogged relations are whole
    conn.execute(f"CREATE UNLOGGED TABLE IF NOT EXISTS {ALIVE} "
                 "(one boolean PRIMARY KEY DEFAULT true CHECK (one))")


def exists(conn: psycopg.Connection[Any]) -> bool:
    """Whether this machine has the table at all (SMILE's schema set up)."""
    row = conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()
    return row is not None and row[0] is not None


def read_all(conn: psycopg.Connection[Any]) -> dict[str, datetime]:
    """Every vertex's TS on this machine; empty where SMILE's schema is not set up."""
    if not exists(conn):
        return {}
    return dict(conn.execute(f"SELECT vertex, ts FROM {TABLE}").fetchall())


def read_many(conn: psycopg.Connection[Any], vertices: Collection[str]) -> dict[str, datetime]:
    """The TS of each of `vertices` that has one."""
    return dict(conn.execute(f"SELECT vertex, ts FROM {TABLE} WHERE vertex = ANY(%s)",
                             (list(vertices),)).fetchall())


def keys_like(conn: psycopg.Connection[Any], pattern: str) -> list[str]:
    """The vertices whose key matches the LIKE `pattern`, sorted."""
    return [k for (k,) in conn.execute(
        f"SELECT vertex FROM {TABLE} WHERE vertex LIKE %s ORDER BY 1", (pattern,)).fetchall()]


def read_with_clock(conn: psycopg.Connection[Any], vertex: str) -> tuple[datetime, datetime]:
    """TS(`vertex`) and the machine's clock, in one round trip."""
    row = conn.execute(f"SELECT ts, clock_timestamp() FROM {TABLE} WHERE vertex = %s",
                       (vertex,)).fetchone()
    if row is None:
        raise AgentError(f"vertex {vertex!r} has no timestamp on this machine")
    return row[0], row[1]


def put(conn: psycopg.Connection[Any], stamps: Mapping[str, datetime],
        on_conflict: OnConflict = "replace") -> None:
    """Create the TS rows of `stamps`; an existing one is replaced, kept, or lowered to the
    given TS (`on_conflict`)."""
    if not stamps:
        return
    keys, values = list(stamps), list(stamps.values())
    conn.execute(f"INSERT INTO {TABLE} (vertex, ts) SELECT * FROM unnest(%s::text[], "
                 f"%s::timestamptz[]) ON CONFLICT (vertex) {_ON_CONFLICT[on_conflict]}",
                 (keys, values))


def raise_to(conn: psycopg.Connection[Any], vertices: Collection[str], ts: datetime) -> None:
    """TS of each of `vertices` to at least `ts` (a watermark or a mirror never goes back)."""
    conn.execute(f"UPDATE {TABLE} SET ts = greatest(ts, %s) WHERE vertex = ANY(%s)",
                 (ts, list(vertices)))


def delete(conn: psycopg.Connection[Any], vertices: Collection[str]) -> None:
    """Forget the TS rows of `vertices` (their vertices dropped)."""
    conn.execute(f"DELETE FROM {TABLE} WHERE vertex = ANY(%s)", (list(vertices),))


def delete_like(conn: psycopg.Connection[Any], pattern: str) -> None:
    """Forget the TS rows whose key matches the LIKE `pattern`."""
    conn.execute(f"DELETE FROM {TABLE} WHERE vertex LIKE %s", (pattern,))


def lock(conn: psycopg.Connection[Any], vertex: str, *, shared: bool = False,
         fresh: bool = False) -> datetime:
    """Lock vertex `vertex` for this transaction and return its TS: exclusively to change it,
    `shared` to keep it (and the contents it stamps) from changing while it is read.
    A stale vertex is refused to a shared lock, its contents not its TS's, and to an
    exclusive one taken to add to them (`fresh`: a copy of a delta appending rows)."""
    return _checked(conn, vertex, f" FOR {'SHARE' if shared else 'UPDATE'}", shared or fresh)


def _checked(conn: psycopg.Connection[Any], vertex: str, lock_clause: str,
             refuse_stale: bool) -> datetime:
    """TS(`vertex`), its row locked by `lock_clause` ('' for none); AgentError where it has
    none, StaleRelation where it is stale and `refuse_stale`."""
    row = conn.execute(
        f"SELECT ts, {STALE} FROM {TABLE} WHERE vertex = %s{lock_clause}", (vertex,)
    ).fetchone()
    if row is None:
        raise AgentError(f"vertex {vertex!r} has no timestamp on this machine")
    if refuse_stale and row[1]:
        raise StaleRelation(vertex)
    ts: datetime = row[0]
    return ts


def lock_rolled(conn: psycopg.Connection[Any], rel_vertex: str, deltas: Sequence[str]
                ) -> datetime:
    """`lock(rel_vertex, shared=True)` for a reader that rolls it back with `deltas` (its own
    delta, or the tables behind it), refused while one of them is behind it: rolling back
    over `(t, TS(rel)]` needs their rows up to TS(rel). Applying deltas never puts a relation
    ahead of its delta; a recomputation does until its delta is pushed too, and the executor
    orders it after it (`optimizer.recompute.waits_for`) — this makes a slip an error that
    the push retries, not rows lost."""
    ts = lock(conn, rel_vertex, shared=True)
    require_deltas_at(conn, rel_vertex, ts, deltas)
    return ts


def require_deltas_at(conn: psycopg.Connection[Any], rel_vertex: str, ts: datetime,
                      deltas: Sequence[str], known: Mapping[str, datetime] | None = None
                      ) -> None:
    """AgentError unless each of `deltas` is at or past `ts`, the TS `rel_vertex` was locked
    at (`lock_rolled`'s check, for a caller that holds the lock already); `known`: their TS
    read after the lock was taken, not read again."""
    for key in deltas:
        ready = known[key] if known is not None and key in known else read_input(conn, key)
        if ready < ts:
            raise AgentError(f"{rel_vertex} is at {ts.isoformat()}, ahead of its delta {key} "
                             f"(at {ready.isoformat()}): it cannot be rolled back yet")


@dataclass(frozen=True)
class Ready:
    """What `ready_slice` read in one round trip."""

    ts: Mapping[str, datetime]
    """The TS of each input asked about (each at or past the target)."""
    rows: int
    """Rows of the delta stamped in the slice."""
    leaving: int
    """Of those, rows with a negative sign."""


def ready_slice(conn: psycopg.Connection[Any], refused: str, inputs: Sequence[str],
                delta: tuple[str, str], lo: datetime, hi: datetime) -> Ready:
    """In one round trip: the TS of each of `inputs`, and how many rows of the delta table
    `delta` are stamped in `(lo, hi]` and how many of them leave. AgentError (`refused`, the
    advance that cannot be made, then the input) unless each input is complete up to `hi`."""
    row = conn.execute(sql.SQL("SELECT {}, {}").format(
        sql.SQL(", ").join(input_ts_of(sql.Literal(k)) for k in inputs),
        slice_counts(delta, sql.Literal(lo), hi))).fetchone()
    assert row is not None  # a SELECT without FROM returns a row
    return ready(refused, inputs, row[:len(inputs)], row[len(inputs)], hi)


def slice_counts(delta: tuple[str, str], lo: sql.Composable, hi: datetime) -> sql.Composed:
    """An expression: [rows, rows leaving] of the delta table `delta` stamped in `(lo, hi]`
    (`lo` an expression: a literal, or `v.ts` in `begin_local_advance`'s `also`)."""
    return sql.SQL("(SELECT ARRAY[count(*), count(*) FILTER (WHERE __sign < 0)] FROM {} "
                   "WHERE __ts > {} AND __ts <= {})").format(
        sql.Identifier(*delta), lo, sql.Literal(hi))


def ready(refused: str, inputs: Sequence[str], stamps: Sequence[datetime | None],
          counts: Sequence[int], hi: datetime) -> Ready:
    """`Ready` from the TS of `inputs` (`input_ts_of`) and a slice's `slice_counts`, read
    together; AgentError (`refused`, then the input) unless each input is complete up to
    `hi` and not stale."""
    ts: dict[str, datetime] = {}
    for key, at in zip(inputs, stamps, strict=True):
        if at is None:
            raise AgentError(f"{refused}: {key} has no timestamp on this machine, or is stale "
                             "(a crash emptied it)")
        if at < hi:
            raise AgentError(f"{refused}: {key} is complete only up to {at.isoformat()}")
        ts[key] = at
    return Ready(ts, int(counts[0]), int(counts[1]))


LOCKED_TS = sql.SQL("v.ts")
"""In `begin_local_advance`'s `also`: the TS of the vertex just locked (its latest, should
the lock have waited for another advance of it)."""


def shared_ts(vertex: str) -> sql.Composed:
    """In `begin_local_advance`'s `also`: `lock(vertex, shared=True)` taken after the
    destination's lock, as an expression — TS(`vertex`), NULL where it is stale or has none
    (`shared_value` tells which)."""
    return sql.SQL("(SELECT CASE WHEN {} THEN NULL ELSE ts END FROM {} "
                   "WHERE vertex = {} FOR SHARE)").format(
        sql.SQL(STALE), sql.SQL(TABLE), sql.Literal(vertex))


def if_behind(expr: sql.Composable, to_ts: datetime) -> sql.Composed:
    """In `begin_local_advance`'s `also`: `expr` evaluated only when the vertex locked is
    behind `to_ts` (NULL otherwise) — a lock or a read an advance with nothing to do must
    not wait for."""
    return sql.SQL("CASE WHEN {} < {} THEN {} END").format(LOCKED_TS, sql.Literal(to_ts), expr)


def shared_value(conn: psycopg.Connection[Any], vertex: str, value: datetime | None
                 ) -> datetime:
    """The TS `shared_ts(vertex)` read; where it read NULL, `lock(vertex, shared=True)`, which
    raises StaleRelation or AgentError as the case is."""
    return value if value is not None else lock(conn, vertex, shared=True)


def begin_local_advance(conn: psycopg.Connection[Any], vertex: str) -> datetime:
    """`lock(vertex)` for an advance whose contents are read only on this machine, committed
    without waiting for the WAL flush (`synchronous_commit = off` for the transaction, set in
    the same round trip; fsync stays on).

    Safe because a vertex's contents and its TS commit together and are a deterministic
    function of inputs that are themselves durable or recomputed: a crash that loses the
    commit loses both, TS(v) is back at its old value, and the next PUSH redoes the interval
    with the same result. Anything that reads the vertex and commits synchronously on this
    server (retention deleting input deltas below TS(v), DeltaToRel of a reader) writes its
    commit record after this one, and flushing it flushes this one too. Not for CopyDelta:
    its destination's TS releases rows on *another* machine (the mirror that retention there
    reads), which that machine's flush does not cover (docs/design/agents.md).

    A stale vertex is refused: no delta applies to contents it does not hold (a recomputation
    and a stale mark take `begin_stale_advance`)."""
    return begin_local_advance_with(conn, vertex, ())[0]


def begin_local_advance_with(conn: psycopg.Connection[Any], vertex: str,
                             also: Sequence[sql.Composable]) -> tuple[datetime, tuple[Any, ...]]:
    """`begin_local_advance`, and the values of the expressions `also` evaluated in the same
    statement after the lock (`begin_stale_advance`)."""
    ts, stale, values = begin_stale_advance(conn, vertex, also)
    if stale:
        raise StaleRelation(vertex)
    return ts, values


def begin_stale_advance(conn: psycopg.Connection[Any], vertex: str,
                        also: Sequence[sql.Composable] = ()
                        ) -> tuple[datetime, bool, tuple[Any, ...]]:
    """`begin_local_advance` for an advance that may find the vertex stale (a recomputation,
    a stale mark): (its TS, whether it is stale, the values of `also`). A crash's emptied
    unlogged relations are marked before the advance locks or writes anything
    (`settle_reset`), so that what it writes is not marked after it, and two advances that
    each hold a lock never wait for each other's marking. A connection that found the machine
    settled needs not ask again (`_ALIVE_SEEN`); should `_smile.alive` be empty all the same
    (the settle that filled it rolled back), the lock's statement says so and the marking
    follows the lock.

    `also`: expressions evaluated in the lock's statement once the lock is held — the next
    lock a caller takes (`shared_ts`), the TS of its inputs and the size of its slice
    (`ts_of`, `slice_counts` from `LOCKED_TS`), a statistic — each a round trip saved. They
    read the statement's snapshot, taken before the lock: should the lock wait for another
    advance of the vertex, an input's TS may be older than it now is (the advance is then
    refused and retried, never wrong: an input's rows up to the TS read are final), and
    `LOCKED_TS` is the vertex's latest."""
    if conn not in _ALIVE_SEEN and not settle_reset(conn):  # before any lock, once
        _ALIVE_SEEN.add(conn)  # it found the machine settled, committed: for its life
    lock_row = sql.SQL(
        "SELECT v.ts, {}, EXISTS (SELECT 1 FROM {}){} "
        "FROM (SELECT ts, stale, unlogged, set_config('synchronous_commit', 'off', true) "
        "FROM {} WHERE vertex = {} FOR UPDATE) v").format(
        sql.SQL(STALE), sql.SQL(ALIVE), sql.SQL("").join(sql.SQL(", {}").format(a) for a in also),
        sql.SQL(TABLE), sql.Literal(vertex))
    row = conn.execute(lock_row).fetchone()
    if row is not None and not row[2]:  # emptied again: the settle above was rolled back
        settle_reset(conn)
        row = conn.execute(lock_row).fetchone()
    if row is None:
        raise AgentError(f"vertex {vertex!r} has no timestamp on this machine")
    return row[0], bool(row[1]), tuple(row[3:])


def is_stale(conn: psycopg.Connection[Any], vertex: str) -> bool:
    """Whether `vertex` is marked stale (read under the caller's lock of its row)."""
    row = conn.execute(f"SELECT {STALE} FROM {TABLE} WHERE vertex = %s", (vertex,)).fetchone()
    return bool(row and row[0])


def mark_stale(conn: psycopg.Connection[Any], vertex: str, ts: datetime) -> None:
    """TS(`vertex`) to `ts`, its contents no longer those of its TS (the caller empties them,
    in the same transaction)."""
    conn.execute(f"UPDATE {TABLE} SET ts = %s, stale = true WHERE vertex = %s", (ts, vertex))


def read_stale(conn: psycopg.Connection[Any]) -> dict[str, datetime]:
    """The vertices of this machine marked stale (or emptied by a crash), with their TS."""
    if not exists(conn):
        return {}
    return dict(conn.execute(f"SELECT vertex, ts FROM {TABLE} WHERE {STALE}").fetchall())


def settle_reset(conn: psycopg.Connection[Any]) -> bool:
    """After a crash emptied the UNLOGGED tables, mark every unlogged vertex stale and say
    the machine settled (`ALIVE` filled again), in one statement: only the first of
    concurrent callers marks; with `ALIVE` filled (committed), nothing happens. Whether this
    call marked them."""
    row = conn.execute(
        f"WITH settled AS (INSERT INTO {ALIVE} VALUES (true) ON CONFLICT DO NOTHING "
        f"RETURNING 1), marked AS (UPDATE {TABLE} SET stale = true "
        "WHERE unlogged AND EXISTS (SELECT 1 FROM settled)) "
        "SELECT count(*) FROM settled").fetchone()
    return bool(row and row[0])


_ALIVE_SEEN: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
"""Connections that found `ALIVE` filled and committed: a crash that empties it ends them
all, so they never need to settle."""


def set_unlogged(conn: psycopg.Connection[Any], vertices: Collection[str], unlogged: bool
                 ) -> None:
    """Record whether the contents of `vertices` are kept in UNLOGGED tables."""
    conn.execute(f"UPDATE {TABLE} SET unlogged = %s WHERE vertex = ANY(%s)",
                 (unlogged, list(vertices)))


def read_input(conn: psycopg.Connection[Any], vertex: str) -> datetime:
    """`read` for an input read from below its TS: StaleRelation where it is stale (a delta
    a crash emptied, `input_ts_of`)."""
    return _checked(conn, vertex, "", True)


def read(conn: psycopg.Connection[Any], vertex: str) -> datetime:
    row = conn.execute(f"SELECT ts FROM {TABLE} WHERE vertex = %s", (vertex,)).fetchone()
    if row is None:
        raise AgentError(f"vertex {vertex!r} has no timestamp on this machine")
    ts: datetime = row[0]
    return ts


def advance(conn: psycopg.Connection[Any], vertex: str, ts: datetime) -> None:
    """TS(`vertex`) to `ts`, its contents those of `ts` (a recomputation clears a stale mark)."""
    conn.execute(f"UPDATE {TABLE} SET ts = %s, stale = false WHERE vertex = %s", (ts, vertex))


def write_and_advance(conn: psycopg.Connection[Any], vertex: str, ts: datetime,
                      statement: sql.Composable) -> int:
    """Run `statement` — an INSERT, UPDATE or DELETE of the vertex's contents, without
    RETURNING or parameters — and `advance(vertex, ts)` in one statement, one round trip
    instead of two; the rows it wrote."""
    row = conn.execute(sql.SQL(
        "WITH __w AS ({} RETURNING 1), __a AS ({}) SELECT count(*) FROM __w").format(
        statement, advance_statement(vertex, ts))).fetchone()
    return int(row[0]) if row else 0


def advance_statement(vertex: str, ts: datetime) -> sql.Composed:
    """`advance(vertex, ts)` as a statement, for a caller that makes it a CTE of its own
    write (`write_and_advance`)."""
    return sql.SQL("UPDATE {} SET ts = {}, stale = false WHERE vertex = {}").format(
        sql.SQL(TABLE), sql.Literal(ts), sql.Literal(vertex))


def slice_rows(conn: psycopg.Connection[Any], table: tuple[str, str], lo: datetime,
               hi: datetime) -> int:
    """How many rows of a delta table are stamped in (lo, hi] (what an operator reads of it)."""
    row = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE __ts > %s AND __ts <= %s").format(
        sql.Identifier(*table)), (lo, hi)).fetchone()
    return int(row[0]) if row else 0
