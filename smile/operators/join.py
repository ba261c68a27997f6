"""Join: Δ(ΔL ⋈ X) or Δ(L ⋈ ΔX) over `(TS(dst), t]`, with the compensation of NOTES §4.

Each driving delta row δ (stamped τ) joins the other side *as of τ*, rebuilt from its copy X̂
and X's own delta: X(τ) = X̂ − Σ{δx : τ < ts ≤ TS(X̂)} + Σ{δx : TS(X̂) < ts ≤ τ}. When the
driving delta is the left input the other side is taken strictly before τ (`<` and `≥` swap),
so changes of both sides with equal timestamps are counted once. Output rows carry
`__ts = τ` and `__sign = sign(δ) · sign(x)`; X̂ and TS(X̂) are read in one statement, so a
concurrent DeltaToRel on X̂ cannot tear them.

Columns are addressed as (alias, column) pairs mapped to each table's physical names, so a side
may be a base relation (`uid`) or an intermediate result (`u__uid`).

Must not: read a live base table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from psycopg import sql

from smile.errors import AgentError
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    import psycopg

Col = tuple[str, str]  # (alias, column)


@dataclass(frozen=True)
class Side:
    table: tuple[str, str]
    vertex: str
    columns: Mapping[Col, str]
    """(alias, column) → physical column name in `table`."""


@dataclass(frozen=True)
class Joined:
    from_ts: datetime
    to_ts: datetime
    rows: int


def join_delta(
    conn: psycopg.Connection[Any],
    *,
    delta: Side,
    other: Side,
    other_delta: Side,
    dst_table: tuple[str, str],
    dst_vertex: str,
    predicates: Sequence[tuple[Col, Col]],
    outputs: Sequence[tuple[Col, str]],
    delta_side: Literal["left", "right"],
    to_ts: datetime,
    filters: Sequence[str] = (),
) -> Joined:
    """`predicates` are (delta-side column, other-side column) equalities; `outputs` map a
    column of either side to a destination column; `filters` are predicates over the physical
    aliases `d` (driving delta) and `x` (other side)."""
    with conn.transaction():
        have = vertex_ts.lock(conn, dst_vertex)
        if have >= to_ts:
            return Joined(have, have, 0)
        for v in (delta.vertex, other_delta.vertex):
            ready = vertex_ts.read(conn, v)
            if ready < to_ts:
                raise AgentError(f"cannot join into {dst_vertex} up to {to_ts.isoformat()}: "
                                 f"{v} is complete only up to {ready.isoformat()}")
        other_cols = sorted(other.columns.items())

        def ref(col: Col) -> sql.Composable:
            if col in delta.columns:
                return sql.Identifier("d", delta.columns[col])
            return sql.Identifier("x", other.columns[col])

        xcols = sql.SQL(", ").join(sql.Identifier(phys) for _, phys in other_cols)
        xdcols = sql.SQL(", ").join(sql.Identifier(other_delta.columns[c]) for c, _ in other_cols)
        # at equal timestamps a left change sees the right side before it, a right change after
        back, fwd = ("__t >= d.__ts", "__t < d.__ts") if delta_side == "left" else (
            "__t > d.__ts", "__t <= d.__ts")
        on = sql.SQL(" AND ").join(
            sql.SQL("{} = {}").format(sql.Identifier("d", delta.columns[dc]),
                                      sql.Identifier("x", other.columns[oc]))
            for dc, oc in predicates)
        outs = sql.SQL(", ").join(ref(c) for c, _ in outputs)
        names = sql.SQL(", ").join(sql.Identifier(n) for _, n in outputs)
        extra = sql.SQL("").join(sql.SQL(" AND ({})").format(sql.SQL(f)) for f in filters)
        query = sql.SQL(
            "WITH o AS (SELECT ts FROM _smile.vertex_ts WHERE vertex = %(ov)s), "
            "x AS ("
            " SELECT {xcols}, 1 AS __s, NULL::timestamptz AS __t, 0 AS __k FROM {other}"
            " UNION ALL SELECT {xdcols}, -__sign, __ts, 1 FROM {odelta}"
            "  WHERE __ts > %(a)s AND __ts <= (SELECT ts FROM o)"
            " UNION ALL SELECT {xdcols}, __sign, __ts, 2 FROM {odelta}"
            "  WHERE __ts > (SELECT ts FROM o) AND __ts <= %(b)s) "
            "INSERT INTO {dst} ({names}, __sign, __ts) "
            "SELECT {outs}, d.__sign * x.__s, d.__ts FROM {delta} d JOIN x ON {on} "
            "WHERE d.__ts > %(a)s AND d.__ts <= %(b)s "
            "AND (x.__k = 0 OR (x.__k = 1 AND x.{back}) OR (x.__k = 2 AND x.{fwd})){extra}"
        ).format(xcols=xcols, xdcols=xdcols, other=sql.Identifier(*other.table),
                 odelta=sql.Identifier(*other_delta.table), dst=sql.Identifier(*dst_table),
                 names=names, outs=outs, delta=sql.Identifier(*delta.table), on=on,
                 back=sql.SQL(back), fwd=sql.SQL(fwd), extra=extra)
        rows = conn.execute(query, {"ov": other.vertex, "a": have, "b": to_ts}).rowcount
        vertex_ts.advance(conn, dst_vertex, to_ts)
        return Joined(have, to_ts, rows)
