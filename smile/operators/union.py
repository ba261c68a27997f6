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

from smile.db import relkind_of
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
        # the lock, the inputs' TS and whether Δ is a view, in one round trip
        keys = [vertex for _, vertex in inputs]
        have, (*stamps, kind) = vertex_ts.begin_local_advance_with(conn, dst_vertex, (
            *(vertex_ts.input_ts_of(sql.Literal(k)) for k in keys), relkind_of(dst_table)))
        if have >= to_ts:
            return United(have, have, 0)
        vertex_ts.ready(f"cannot unite into {dst_vertex} up to {to_ts.isoformat()}", keys,
                        stamps, (0, 0), to_ts)
        if kind == "v":
            vertex_ts.advance(conn, dst_vertex, to_ts)
            return United(have, to_ts, 0)
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        parts = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {c}, __sign, __ts FROM {t} WHERE __ts > {a} AND __ts <= {b}")
            .format(c=cols, t=sql.Identifier(*table), a=sql.Literal(have), b=sql.Literal(to_ts))
            for table, _ in inputs)
        rows = vertex_ts.write_and_advance(conn, dst_vertex, to_ts, sql.SQL(
            "INSERT INTO {} ({}, __sign, __ts) {}").format(sql.Identifier(*dst_table), cols,
                                                          parts))
        return United(have, to_ts, rows)
