"""CopyDelta(Δv@m1 → Δv@m2): the rows of the source delta with `__ts ∈ (TS(dst), t]`, streamed
with COPY from one database to the other (never row by row through Python), optionally
filtered and projected on the way; the rows and TS(dst) = t are written in one transaction of
the destination, under a lock on its timestamp row.

Must not: read a live base table; the source delta must be complete up to `t`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import pipe
from smile.errors import AgentError
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    import psycopg


@dataclass(frozen=True)
class Copied:
    from_ts: datetime
    to_ts: datetime
    rows: int
    bytes: int


def copy_delta(
    src: psycopg.Connection[Any],
    dst: psycopg.Connection[Any],
    *,
    src_table: tuple[str, str],
    src_vertex: str,
    dst_table: tuple[str, str],
    dst_vertex: str,
    columns: Sequence[str],
    to_ts: datetime,
    where: str | None = None,
    alias: str = "d",
    dst_columns: Sequence[str] | None = None,
) -> Copied:
    """Copy `columns` (plus __sign, __ts) of rows in (TS(dst), to_ts] into `dst_columns` (the
    same names by default); `where` is a predicate over `alias` (a pushed-down selection)."""
    with dst.transaction():
        have = vertex_ts.lock(dst, dst_vertex, fresh=True)
        if have >= to_ts:
            return Copied(have, have, 0, 0)
        with src.transaction():
            ready = vertex_ts.read_input(src, src_vertex)
            if ready < to_ts:
                raise AgentError(f"cannot copy {src_vertex} to {to_ts.isoformat()}: it is complete "
                                 f"only up to {ready.isoformat()}")
            cols = sql.SQL(", ").join(sql.Identifier(alias, c) for c in columns)
            dcols = sql.SQL(", ").join(sql.Identifier(c) for c in (dst_columns or columns))
            cond = sql.SQL(" AND ({})").format(sql.SQL(where)) if where else sql.SQL("")
            select = sql.SQL(
                "SELECT {cols}, {a}.__sign, {a}.__ts FROM {t} AS {a} "
                "WHERE {a}.__ts > {lo} AND {a}.__ts <= {hi}{cond}"
            ).format(cols=cols, a=sql.Identifier(alias), t=sql.Identifier(*src_table),
                     lo=sql.Literal(have), hi=sql.Literal(to_ts), cond=cond)
            if src is dst:  # one machine, one connection: two COPYs on it would deadlock
                rows = dst.execute(sql.SQL("INSERT INTO {} ({}, __sign, __ts) {}").format(
                    sql.Identifier(*dst_table), dcols, select)).rowcount
                nbytes = 0
            else:
                rows, nbytes = _stream(src, dst, sql.SQL("COPY ({}) TO STDOUT").format(select),
                                       sql.SQL("COPY {} ({}, __sign, __ts) FROM STDIN").format(
                                           sql.Identifier(*dst_table), dcols))
        vertex_ts.advance(dst, dst_vertex, to_ts)
        return Copied(have, to_ts, max(rows, 0), nbytes)


def _stream(src: psycopg.Connection[Any], dst: psycopg.Connection[Any], out: sql.Composed,
            inp: sql.Composed) -> tuple[int, int]:
    """COPY `out` on `src` into `inp` on `dst` (`db.pipe`); (rows, bytes)."""
    with src.cursor() as rcur, dst.cursor() as wcur:
        with rcur.copy(out) as reader, wcur.copy(inp) as writer:
            nbytes = pipe(reader, writer)
        return max(wcur.rowcount, 0), nbytes
