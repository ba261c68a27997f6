"""Union(Δ1, Δ2 → Δ): the slices `(TS(Δ), t]` of both inputs, concatenated into Δ, with
TS(Δ) = t, in one transaction on the machine holding all three.

A plan's Δ is a view over its two inputs (`deploy.physical`): the rows are already there, so
the Union only checks that both inputs are complete up to t and moves TS(Δ). Into a table (the
calibration's baseline, one a re-route turned into a table) it copies the slices, as the
paper's Union does.

Must not: run before both inputs are complete up to `t`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import relkind
from smile.errors import AgentError
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    import psycopg


@dataclass(frozen=True)
class United:
    from_ts: datetime
    to_ts: datetime
    rows: int


def union(
    conn: psycopg.Connection[Any],
    *,
    inputs: Sequence[tuple[tuple[str, str], str]],
    dst_table: tuple[str, str],
    dst_vertex: str,
    columns: Sequence[str],
    to_ts: datetime,
) -> United:
    with conn.transaction():
        have = vertex_ts.begin_local_advance(conn, dst_vertex)
        if have >= to_ts:
            return United(have, have, 0)
        for _, vertex in inputs:
            ready = vertex_ts.read(conn, vertex)
            if ready < to_ts:
                raise AgentError(f"cannot unite into {dst_vertex} up to {to_ts.isoformat()}: "
                                 f"{vertex} is complete only up to {ready.isoformat()}")
        if relkind(conn, dst_table) == "v":
            vertex_ts.advance(conn, dst_vertex, to_ts)
            return United(have, to_ts, 0)
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        parts = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {c}, __sign, __ts FROM {t} WHERE __ts > %(a)s AND __ts <= %(b)s")
            .format(c=cols, t=sql.Identifier(*table)) for table, _ in inputs)
        rows = conn.execute(sql.SQL("INSERT INTO {} ({}, __sign, __ts) {}").format(
            sql.Identifier(*dst_table), cols, parts), {"a": have, "b": to_ts}).rowcount
        vertex_ts.advance(conn, dst_vertex, to_ts)
        return United(have, to_ts, rows)
