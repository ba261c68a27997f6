"""Join: Δ(ΔL ⋈ X) or Δ(L ⋈ ΔX) over `(TS(dst), t]`, with the compensation of NOTES §4.

Each driving delta row δ (stamped τ) joins the other side *as of τ*, rebuilt from its copy X̂
and X's own delta: X(τ) = X̂ − Σ{δx : τ < ts ≤ TS(X̂)} + Σ{δx : TS(X̂) < ts ≤ τ}. When the
driving delta is the left input the other side is taken strictly before τ (`<` and `≥` swap),
so changes of both sides with equal timestamps are counted once. Output rows carry
`__ts = τ` and `__sign = sign(δ) · sign(x)`. X̂ is read under a share lock on its TS row, so a
concurrent DeltaToRel on X̂ waits and cannot tear X̂ from TS(X̂).

`join_delta` runs it all as one INSERT … SELECT; `smile.operators.join_spark` evaluates the same
`input_queries` on Spark — the two must stay interchangeable.

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
    from collections.abc import Mapping
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


@dataclass(frozen=True)
class JoinSpec:
    """One Join edge, physically: what `join_delta` and `join_delta_spark` both evaluate.

    `predicates` are (delta-side column, other-side column) equalities; `outputs` map a column of
    either side to a destination column; `filters` are (side, predicate) with the predicate over
    the physical alias of its side, `d` (driving delta) or `x` (other side)."""

    delta: Side
    other: Side
    other_delta: Side
    dst_table: tuple[str, str]
    dst_vertex: str
    predicates: tuple[tuple[Col, Col], ...]
    outputs: tuple[tuple[Col, str], ...]
    delta_side: Literal["left", "right"]
    filters: tuple[tuple[Literal["d", "x"], str], ...] = ()

    def out_column(self, col: Col) -> tuple[Literal["d", "x"], str]:
        if col in self.delta.columns:
            return "d", self.delta.columns[col]
        return "x", self.other.columns[col]

    @property
    def time_conditions(self) -> tuple[str, str]:
        """(back, fwd): which compensating rows of the other side's delta a driving row at
        `d.__ts` takes — at equal timestamps a left change sees the right side before it, a right
        change after it."""
        if self.delta_side == "left":
            return "__t >= d.__ts", "__t < d.__ts"
        return "__t > d.__ts", "__t <= d.__ts"


def begin(conn: psycopg.Connection[Any], spec: JoinSpec, to_ts: datetime) -> datetime:
    """In the caller's transaction: lock the destination, check the inputs are complete up to
    `to_ts` and hold X̂ still (a share lock on its TS row, which DeltaToRel must lock to change
    it). Returns TS(dst); at or past `to_ts` there is nothing to do."""
    have = vertex_ts.lock(conn, spec.dst_vertex)
    if have >= to_ts:
        return have
    for v in (spec.delta.vertex, spec.other_delta.vertex):
        ready = vertex_ts.read(conn, v)
        if ready < to_ts:
            raise AgentError(f"cannot join into {spec.dst_vertex} up to {to_ts.isoformat()}: "
                             f"{v} is complete only up to {ready.isoformat()}")
    vertex_ts.lock(conn, spec.other.vertex, shared=True)
    return have


def input_queries(conn: psycopg.Connection[Any], spec: JoinSpec, a: datetime,
                  b: datetime) -> tuple[sql.Composed, sql.Composed]:
    """(d, x): the driving delta's slice `(a, b]` with its filters, and the other side as of
    each driving row — X̂ (`__k = 0`), its delta's rows after `b` back out of it (`__k = 1`),
    and those after TS(X̂) up to `b` (`__k = 2`), each with `__s` and `__t`; the time
    conditions pick per driving row. Literal timestamps: the caller holds the locks that keep
    them true (`begin`)."""
    o = vertex_ts.read(conn, spec.other.vertex)
    other_cols = sorted(spec.other.columns.items())
    xcols = sql.SQL(", ").join(sql.Identifier(phys) for _, phys in other_cols)
    xdcols = sql.SQL(", ").join(sql.Identifier(spec.other_delta.columns[c]) for c, _ in other_cols)
    dcols = sql.SQL(", ").join(sql.Identifier("d", p)
                               for p in sorted(set(spec.delta.columns.values())))

    def where(side: str) -> sql.Composable:
        return sql.SQL("").join(sql.SQL(" AND ({})").format(sql.SQL(f))
                                for s, f in spec.filters if s == side)

    lit = {"a": sql.Literal(a), "b": sql.Literal(b), "o": sql.Literal(o)}
    d = sql.SQL("SELECT {dcols}, d.__sign, d.__ts FROM {delta} d "
                "WHERE d.__ts > {a} AND d.__ts <= {b}{f}").format(
        dcols=dcols, delta=sql.Identifier(*spec.delta.table), f=where("d"), **lit)
    x = sql.SQL(
        "SELECT * FROM ("
        " SELECT {xcols}, 1 AS __s, NULL::timestamptz AS __t, 0 AS __k FROM {other}"
        " UNION ALL SELECT {xdcols}, -__sign, __ts, 1 FROM {odelta}"
        "  WHERE __ts > {a} AND __ts <= {o}"
        " UNION ALL SELECT {xdcols}, __sign, __ts, 2 FROM {odelta}"
        "  WHERE __ts > {o} AND __ts <= {b}"
        ") x WHERE true{f}").format(
        xcols=xcols, xdcols=xdcols, other=sql.Identifier(*spec.other.table),
        odelta=sql.Identifier(*spec.other_delta.table), f=where("x"), **lit)
    return d, x


def join_delta(conn: psycopg.Connection[Any], spec: JoinSpec, to_ts: datetime) -> Joined:
    """Advance `spec.dst_vertex` to `to_ts` by one INSERT … SELECT on PostgreSQL."""
    with conn.transaction():
        have = begin(conn, spec, to_ts)
        if have >= to_ts:
            return Joined(have, have, 0)
        d, x = input_queries(conn, spec, have, to_ts)
        back, fwd = spec.time_conditions
        on = sql.SQL(" AND ").join(
            sql.SQL("{} = {}").format(sql.Identifier("d", spec.delta.columns[dc]),
                                      sql.Identifier("x", spec.other.columns[oc]))
            for dc, oc in spec.predicates)
        outs = sql.SQL(", ").join(sql.Identifier(*spec.out_column(c)) for c, _ in spec.outputs)
        names = sql.SQL(", ").join(sql.Identifier(n) for _, n in spec.outputs)
        rows = conn.execute(sql.SQL(
            "INSERT INTO {dst} ({names}, __sign, __ts) "
            "SELECT {outs}, d.__sign * x.__s, d.__ts FROM ({d}) d JOIN ({x}) x ON {on} "
            "WHERE x.__k = 0 OR (x.__k = 1 AND x.{back}) OR (x.__k = 2 AND x.{fwd})").format(
            dst=sql.Identifier(*spec.dst_table), names=names, outs=outs, d=d, x=x, on=on,
            back=sql.SQL(back), fwd=sql.SQL(fwd))).rowcount
        vertex_ts.advance(conn, spec.dst_vertex, to_ts)
        return Joined(have, to_ts, rows)
