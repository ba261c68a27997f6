"""Recompute(inputs → v): v's contents at `t` computed afresh from relations whose contents at
`t` it reads, replacing what v held, with TS(v) = t — one transaction on v's machine under
the lock of v's TS row, as every operator (docs/design/semantics.md §4); a call that finds v
at or past `t` does nothing. And Skip: a delta's TS moved to `t` with no row written, once
every reader of the delta is at or past `t` (checked here, under the delta's lock).

Each input is a relation table read as of `t`: as it is when its TS is `t`, otherwise rolled
with its own delta (`as_of.as_of_query`); one on another machine (a base's R̂) is streamed by
COPY into a temporary table first. While it is read, its TS row is held (shared) and
retention on its machine is held off; one ahead of `t` is rolled back with its delta's rows
after `t`, and the recomputation is refused if some of those were pruned already (a concurrent
push may have taken every registered reader of that delta past `t`). The rows are then
joined (the inputs' equalities and filters) and written into v, emptied by TRUNCATE: like
`REFRESH MATERIALIZED VIEW`, a reader of v waits for the commit, and a reader whose snapshot
predates it sees v empty.

Must not: decide whether recomputing pays (the executor does, `optimizer.recompute`), or read
a live base table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import pipe
from smile.errors import AgentError, SkipRefused
from smile.operators import retention, vertex_ts
from smile.operators.as_of import as_of_query

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    import psycopg


@dataclass(frozen=True)
class Input:
    """One relation a recomputation reads, as of `t`."""

    machine: str
    rel: tuple[str, str]
    rel_vertex: str
    delta: tuple[str, str]
    """Its own delta, to roll it to `t`."""
    delta_vertex: str
    columns: tuple[str, ...]
    """Its physical columns read."""
    names: tuple[str, ...]
    """What each is called in the recomputation (the destination's names)."""
    types: tuple[str, ...]
    """Their SQL types, for the temporary table of a moved input."""
    where: str = ""
    """Its selection, over its physical columns ('' for none)."""
    rolls_forward: bool = False
    """It may be behind `t` and rolled forward with its delta (capture's R̂); otherwise it
    must be at `t` or past it."""
    stored: tuple[str, ...] = ()
    """The TS keys of the tables holding its delta's rows (those behind a Union's view; empty:
    `delta_vertex` itself), whose pruning says whether it can still be rolled back."""


@dataclass(frozen=True)
class RecomputeSpec:
    machine: str
    dst: tuple[str, str]
    dst_vertex: str
    columns: tuple[str, ...]
    """The destination's physical columns, in table order."""
    inputs: tuple[Input, ...]
    joins: tuple[tuple[str, str], ...] = ()
    """Equalities between the inputs' names."""
    filters: tuple[str, ...] = ()
    """Selections over the inputs' names."""


@dataclass(frozen=True)
class Recomputed:
    from_ts: datetime
    to_ts: datetime
    read: int
    """Rows of the inputs moved between machines (those read in place are not counted)."""
    rows: int
    """Rows v holds now."""


def _ident(name: str) -> sql.Composable:
    return sql.Identifier(name)


def hold_as_of(conn: psycopg.Connection[Any], rel_vertex: str, stored: Sequence[str],
               t: datetime) -> datetime:
    """Hold relation `rel_vertex` still for the caller's transaction — its TS row shared,
    retention on its machine held off — and return its TS. One ahead of `t` is rolled back
    with the rows after `t` of its delta (held in the tables `stored`): refused when
    retention (or a skip) took some already, as a concurrent push that advanced every
    reader of that delta lets it. One behind `t` (capture's R̂) is rolled forward with the
    rows after its own TS: refused when some are gone, which only a lost registration of it
    as its delta's reader would let retention do — never read past a gap."""
    retention.serialise(conn)
    ts = vertex_ts.lock(conn, rel_vertex, shared=True)
    if ts > t:
        vertex_ts.require_deltas_at(conn, rel_vertex, ts, stored)
        retention.require_rows_after(conn, stored, t, rel_vertex)
    elif ts < t:  # rolled forward (capture's R̂): every row of its delta past its TS is needed
        retention.require_rows_after(conn, stored, ts, rel_vertex)
    return ts


def _hold(conn: psycopg.Connection[Any], i: Input, t: datetime) -> datetime:
    return hold_as_of(conn, i.rel_vertex, i.stored or (i.delta_vertex,), t)


def _input_query(conn: psycopg.Connection[Any], i: Input, t: datetime, ts: datetime
                 ) -> sql.Composable:
    """`i` as of `t`, its columns named as the recomputation names them (`ts`: its TS, held
    by `_hold`)."""
    if ts < t:
        ready = vertex_ts.read_input(conn, i.delta_vertex)
        if not i.rolls_forward or ready < t:
            raise AgentError(f"cannot recompute from {i.rel_vertex} at {t.isoformat()}: it is "
                             f"complete only up to {ts.isoformat()}")
    body: sql.Composable = sql.Identifier(*i.rel) if ts == t else sql.SQL("({})").format(
        as_of_query(rel=i.rel, rel_vertex=i.rel_vertex, delta=i.delta, columns=i.columns, t=t))
    where = sql.SQL(" WHERE {}").format(sql.SQL(i.where)) if i.where else sql.SQL("")
    return sql.SQL("SELECT {} FROM {} AS s{}").format(
        sql.SQL(", ").join(sql.SQL("s.{} AS {}").format(_ident(c), _ident(n))
                           for c, n in zip(i.columns, i.names, strict=True)), body, where)


def _stream(conns: Mapping[str, psycopg.Connection[Any]], conn: psycopg.Connection[Any],
            i: Input, t: datetime, table: sql.Composable, names: Sequence[str]) -> int:
    """A remote input as of `t` streamed by COPY into `table` here; the rows it moved."""
    src = conns[i.machine]
    cols = sql.SQL(", ").join(_ident(n) for n in names)
    with src.transaction(), src.cursor() as rc, conn.cursor() as wc:
        query = _input_query(src, i, t, _hold(src, i, t))
        with rc.copy(sql.SQL("COPY ({}) TO STDOUT").format(query)) as reader, \
                wc.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, cols)) as writer:
            pipe(reader, writer)
        return max(0, wc.rowcount)


def _moved(conns: Mapping[str, psycopg.Connection[Any]], conn: psycopg.Connection[Any],
           i: Input, t: datetime, n: int) -> tuple[sql.Composable, int]:
    """A remote input in a temporary table (dropped at commit): its name, its rows."""
    tmp = _ident(f"__rc_{n}")
    conn.execute(sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP").format(
        tmp, sql.SQL(", ").join(sql.SQL("{} {}").format(_ident(c), sql.SQL(ty))
                                for c, ty in zip(i.names, i.types, strict=True))))
    return tmp, _stream(conns, conn, i, t, tmp, i.names)


def _without_indexes(conn: psycopg.Connection[Any], table: tuple[str, str]) -> list[str]:
    """Drop the indexes of `table` (in the caller's transaction); their definitions, to build
    again once it is filled: one sorted build costs a fraction of a million single
    insertions, as REFRESH builds its indexes afresh."""
    defs = [d for (d,) in conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
        table).fetchall()]
    for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            table).fetchall():
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(table[0], name)))
    return defs


def recompute(conns: Mapping[str, psycopg.Connection[Any]], spec: RecomputeSpec,
              t: datetime) -> Recomputed:
    """Advance v to `t` by recomputing it (see the module)."""
    conn = conns[spec.machine]
    dst = sql.Identifier(*spec.dst)
    with conn.transaction():
        have, at = begin_recompute(conn, spec.dst_vertex, t)
        if at is None:
            return Recomputed(have, have, 0, 0)
        t = at
        conn.execute(sql.SQL("TRUNCATE {}").format(dst))
        indexes = _without_indexes(conn, spec.dst)
        only = spec.inputs[0] if len(spec.inputs) == 1 else None
        if (only is not None and only.machine != spec.machine and not spec.filters
                and tuple(only.names) == spec.columns):  # a copy: streamed straight in
            moved = rows = _stream(conns, conn, only, t, dst, only.names)
        else:
            moved, rows = _join_into(conns, conn, spec, t)
        for definition in indexes:
            conn.execute(definition)
        vertex_ts.advance(conn, spec.dst_vertex, t)
        return Recomputed(have, t, moved, rows)


def begin_recompute(conn: psycopg.Connection[Any], vertex: str, t: datetime
                    ) -> tuple[datetime, datetime | None]:
    """Lock v's TS row for its recomputation at `t`: (its TS, the TS to recompute it at —
    None for nothing to do, v being at or past `t`). A stale v at or past `t` is recomputed
    at its own TS: never brought below it, up to which its delta was let go and its readers
    went, and whole again whatever push asks."""
    have, stale, _ = vertex_ts.begin_stale_advance(conn, vertex)
    if have < t:
        return have, t
    return have, have if stale else None


def mark_stale(conn: psycopg.Connection[Any], vertex: str, table: tuple[str, str],
               t: datetime) -> Skipped:
    """Relation `vertex` left stale at `t`: emptied, TS(v) = t, marked (no reader may take it
    until a recomputation at `t` or later). Nothing is done at or past `t`: v is there, whole
    or stale. The executor marks only a relation nothing in the push reads and nothing
    outside it may read (`optimizer.recompute.recompute_modes`)."""
    with conn.transaction():
        have, _, _ = vertex_ts.begin_stale_advance(conn, vertex)
        if have >= t:
            return Skipped(have, have)
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(*table)))
        vertex_ts.mark_stale(conn, vertex, t)
        return Skipped(have, t)


def _join_into(conns: Mapping[str, psycopg.Connection[Any]], conn: psycopg.Connection[Any],
               spec: RecomputeSpec, t: datetime) -> tuple[int, int]:
    """The inputs joined into the (emptied) destination: (rows moved, rows written)."""
    froms: list[sql.Composable] = []
    moved = 0
    for n, i in enumerate(spec.inputs):
        if i.machine == spec.machine:  # held still while read, as a join holds X̂
            froms.append(sql.SQL("({}) AS {}").format(_input_query(conn, i, t, _hold(conn, i, t)),
                                                      _ident(f"i{n}")))
        else:
            table, got = _moved(conns, conn, i, t, n)
            moved += got
            froms.append(sql.SQL("{} AS {}").format(table, _ident(f"i{n}")))
    conds = [sql.SQL("{} = {}").format(_ident(a), _ident(b)) for a, b in spec.joins]
    conds += [sql.SQL("({})").format(sql.SQL(f)) for f in spec.filters]
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds) if conds else sql.SQL("")
    cols = sql.SQL(", ").join(_ident(c) for c in spec.columns)
    rows = conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}{}").format(
        sql.Identifier(*spec.dst), cols, cols, sql.SQL(", ").join(froms), where)).rowcount
    return moved, rows


@dataclass(frozen=True)
class Skipped:
    from_ts: datetime
    to_ts: datetime


def skip(conn: psycopg.Connection[Any], vertex: str, t: datetime,
         readers: Sequence[tuple[psycopg.Connection[Any], str]], durable: bool = False,
         stored: Sequence[str] = ()) -> Skipped:
    """TS(`vertex`), a delta, to `t` with no row written, when every reader (a connection to
    its machine and its TS key) is at or past `t`: no one will ever read the interval.
    `durable`: committed synchronously (a copy's, whose source then releases rows).

    The interval then holds no rows, as if retention had pruned it: the deltas holding
    `vertex`'s rows (`stored`: itself, or the tables behind a Union's view) are marked pruned
    to `t`, so that a vertex that starts reading them later (filled at t0, re-routed) is
    first brought past it (docs/design/semantics.md §8). Serialised with retention and leases
    like a prune: while a deploy holds a lease here, or while a reader registered on this
    machine (one a newer version of the plan added) is below `t`, the skip is refused
    (`SkipRefused`) and `vertex` left where it is."""
    keys = list(stored) or [vertex]
    with conn.transaction():
        # a delta a crash emptied is skipped all the same: its readers are past what it lost
        have, _, _ = vertex_ts.begin_stale_advance(conn, vertex)
        if durable:
            conn.execute("SET LOCAL synchronous_commit = on")
        if have >= t:
            return Skipped(have, have)
        for where, key in readers:
            ts = vertex_ts.read(where, key)
            if ts < t:
                raise SkipRefused(f"cannot skip {vertex} to {t.isoformat()}: its reader {key} "
                                  f"is at {ts.isoformat()}")
        retention.serialise(conn)
        below = retention.readers_below(conn, keys, t)
        if below:
            _, key, since = below[0]
            raise SkipRefused(f"cannot skip {vertex} to {t.isoformat()}: {key} reads it from "
                              f"{since.isoformat() if since else 'its start'}")
        retention.mark_pruned(conn, keys, t)
        vertex_ts.advance(conn, vertex, t)
        return Skipped(have, t)
