"""Pad: the delta of an outer join's NULL-padded rows over `(TS(dst), t]`
(docs/design/beyond_spj.md, "Outer joins").

`L ⟕ R` holds, besides the inner join, every row of L whose key meets no row of R, padded with
NULLs (`FULL`: also every such row of R). Ordering the changes of both sides by
`(timestamp, side)` — L's first at equal timestamps — each change moves the padded rows as
follows, and every padded row it emits carries its timestamp τ:

- a change of a preserved side's row `δp` at τ: `± (p, NULLs)` when its key has a NULL or
  meets no row of the other side as of that moment;
- the changes of the other side at τ on one key, together: when they take its count from 0
  to more, every preserved row with that key as of that moment loses its padded row (`−`),
  from more to 0 it gains one (`+`).

"As of that moment" follows the order: for L's changes the other side R is as of `τ−`
(strictly before: R's changes at τ come after); for R's changes L is as of τ inclusive. The
copies are rolled to those points with their own deltas (docs/design/semantics.md §3–4), as
the join's compensation rolls them. After every timestamp the padded rows are exact, so the
delta is exact at every boundary.

Must not: read a live base table, or commit anything but its own transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from psycopg import sql

from smile.errors import AgentError
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    import psycopg

Kind = Literal["left", "right", "full"]


@dataclass(frozen=True)
class PadSide:
    """One side of the join as it lies on the machine: its relation (a copy) and its delta."""

    rel: tuple[str, str]
    rel_vertex: str
    delta: tuple[str, str]
    delta_vertex: str
    columns: tuple[str, ...]
    """Its physical columns, the same in the relation and the delta."""
    keys: tuple[str, ...]
    """Its join columns, in the order of the other side's."""


@dataclass(frozen=True)
class PadSpec:
    left: PadSide
    right: PadSide
    kind: Kind
    dst: tuple[str, str]
    dst_vertex: str

    @property
    def columns(self) -> tuple[str, ...]:
        """The destination's columns: the left side's, then the right side's."""
        return self.left.columns + self.right.columns


@dataclass(frozen=True)
class Padded:
    from_ts: datetime
    to_ts: datetime
    rows: int
    read: int


def pad_delta(conn: psycopg.Connection[Any], spec: PadSpec, to_ts: datetime) -> Padded:
    """Advance the padded rows' delta `spec.dst` to `to_ts`, in one transaction."""
    with conn.transaction():
        have = vertex_ts.begin_local_advance(conn, spec.dst_vertex)
        if have >= to_ts:
            return Padded(have, have, 0, 0)
        for side in (spec.left, spec.right):
            ready = vertex_ts.read_input(conn, side.delta_vertex)
            if ready < to_ts:
                raise AgentError(f"cannot pad {spec.dst_vertex} up to {to_ts.isoformat()}: "
                                 f"{side.delta_vertex} is complete only up to "
                                 f"{ready.isoformat()}")
        tss = {s.rel_vertex: vertex_ts.lock_rolled(conn, s.rel_vertex, (s.delta_vertex,))
               for s in (spec.left, spec.right)}
        read = _slice_rows(conn, spec, have, to_ts)
        rows = 0
        if read:
            for query in pad_queries(spec, have, to_ts, tss):
                rows += conn.execute(query).rowcount
        vertex_ts.advance(conn, spec.dst_vertex, to_ts)
        return Padded(have, to_ts, rows, read)


def _slice_rows(conn: psycopg.Connection[Any], spec: PadSpec, a: datetime, b: datetime) -> int:
    return sum(vertex_ts.slice_rows(conn, s.delta, a, b) for s in (spec.left, spec.right))


def pad_queries(spec: PadSpec, a: datetime, b: datetime,
                tss: dict[str, datetime]) -> list[sql.Composed]:
    """The INSERTs of one advance over `(a, b]`; `tss` holds each side's copy's TS."""
    out = []
    sides = {"left": (spec.left, spec.right), "right": (spec.right, spec.left)}
    for preserved in (("left", "right") if spec.kind == "full" else (spec.kind,)):
        mine, other = sides[preserved]
        first = preserved == "left"  # L's changes come first at equal timestamps
        out.append(_own_changes(spec, mine, other, a, b, tss, other_inclusive=not first))
        out.append(_flips(spec, mine, other, a, b, tss, mine_inclusive=first))
    return out


def _lit(value: Any) -> sql.Literal:
    return sql.Literal(value)


def _match(alias: str, side: PadSide, values: Sequence[sql.Composable]) -> sql.Composed:
    return sql.SQL(" AND ").join(sql.SQL("{} = {}").format(sql.Identifier(alias, k), v)
                                 for k, v in zip(side.keys, values, strict=True))


def _ranges(tau: sql.Composable, o: sql.Literal, inclusive: bool
            ) -> tuple[sql.Composed, sql.Composed]:
    """The delta rows to back out of the copy and to add to it, to roll it from its TS `o` to
    `tau` (inclusive) or to just before `tau`."""
    if inclusive:
        return (sql.SQL("__ts > {t} AND __ts <= {o}").format(t=tau, o=o),
                sql.SQL("__ts > {o} AND __ts <= {t}").format(t=tau, o=o))
    return (sql.SQL("__ts >= {t} AND __ts <= {o}").format(t=tau, o=o),
            sql.SQL("__ts > {o} AND __ts < {t}").format(t=tau, o=o))


def _count(side: PadSide, values: Sequence[sql.Composable], tau: sql.Composable, o: sql.Literal,
           inclusive: bool) -> sql.Composed:
    """How many rows of `side` have the key `values` as of `tau`."""
    out, add = _ranges(tau, o, inclusive)
    rel, delta = sql.Identifier(*side.rel), sql.Identifier(*side.delta)
    return sql.SQL(
        "((SELECT count(*) FROM {rel} x WHERE {m}) "
        "- coalesce((SELECT sum(x.__sign) FROM {delta} x WHERE {m} AND {out}), 0) "
        "+ coalesce((SELECT sum(x.__sign) FROM {delta} x WHERE {m} AND {add}), 0))").format(
        rel=rel, delta=delta, m=_match("x", side, values), out=out, add=add)


def _nulls(side: PadSide) -> list[sql.Composable]:
    return [sql.SQL("NULL") for _ in side.columns]


def _row(spec: PadSpec, mine: PadSide, alias: str) -> sql.Composed:
    """A padded row: `mine`'s columns from `alias`, NULL for the other side's, in the
    destination's order."""
    own = [sql.Identifier(alias, c) for c in mine.columns]
    if mine is spec.left:
        return sql.SQL(", ").join([*own, *_nulls(spec.right)])
    return sql.SQL(", ").join([*_nulls(spec.left), *own])


def _own_changes(spec: PadSpec, mine: PadSide, other: PadSide, a: datetime, b: datetime,
                 tss: dict[str, datetime], other_inclusive: bool) -> sql.Composed:
    """A preserved side's own changes: padded when their key has a NULL or meets nothing."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in mine.columns)
    keys = [sql.Identifier("d", k) for k in mine.keys]
    met = _count(other, keys, sql.Identifier("d", "__ts"), _lit(tss[other.rel_vertex]),
                 other_inclusive)
    any_null = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(k) for k in keys)
    return sql.SQL(
        "INSERT INTO {dst} ({all}, __sign, __ts) SELECT {row}, d.__sign, d.__ts FROM ("
        "SELECT {cols}, sum(__sign)::bigint AS __sign, __ts FROM {delta} "
        "WHERE __ts > {a} AND __ts <= {b} GROUP BY {cols}, __ts HAVING sum(__sign) <> 0) d "
        "WHERE {any_null} OR {met} = 0").format(
        dst=sql.Identifier(*spec.dst), all=_all(spec), row=_row(spec, mine, "d"), cols=cols,
        delta=sql.Identifier(*mine.delta), a=_lit(a), b=_lit(b), any_null=any_null, met=met)


def _flips(spec: PadSpec, mine: PadSide, other: PadSide, a: datetime, b: datetime,
           tss: dict[str, datetime], mine_inclusive: bool) -> sql.Composed:
    """The other side's changes on one key at one timestamp, together: when they take the
    key's count from 0 to more (or back), the preserved rows with that key lose (or gain)
    their padded rows."""
    okeys = sql.SQL(", ").join(sql.Identifier(k) for k in other.keys)
    ev_keys = [sql.Identifier("e", k) for k in other.keys]
    before = _count(other, ev_keys, sql.Identifier("e", "__ts"),
                    _lit(tss[other.rel_vertex]), inclusive=False)
    out, add = _ranges(sql.Identifier("f", "__ts"), _lit(tss[mine.rel_vertex]), mine_inclusive)
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in mine.columns)
    fkeys = [sql.Identifier("f", k) for k in other.keys]
    m = _match("x", mine, fkeys)
    not_null = sql.SQL(" AND ").join(sql.SQL("{} IS NOT NULL").format(sql.Identifier(k))
                                     for k in other.keys)
    return sql.SQL(
        "INSERT INTO {dst} ({all}, __sign, __ts) "
        "SELECT {row}, f.__flip * r.__m, f.__ts FROM ("
        " SELECT *, CASE WHEN c.__before = 0 THEN -1 ELSE 1 END AS __flip FROM ("
        "  SELECT e.*, {before} AS __before FROM ("
        "   SELECT {okeys}, __ts, sum(__sign)::bigint AS __s FROM {odelta}"
        "   WHERE __ts > {a} AND __ts <= {b} AND {not_null} GROUP BY {okeys}, __ts"
        "   HAVING sum(__sign) <> 0) e) c"
        " WHERE (c.__before = 0 AND c.__s > 0) OR (c.__before > 0 AND c.__before + c.__s = 0)"
        ") f, LATERAL ("
        " SELECT {cols}, sum(__m)::bigint AS __m FROM ("
        "  SELECT {cols}, 1 AS __m FROM {rel} x WHERE {m}"
        "  UNION ALL SELECT {cols}, -__sign FROM {delta} x WHERE {m} AND {out}"
        "  UNION ALL SELECT {cols}, __sign FROM {delta} x WHERE {m} AND {add}"
        " ) u GROUP BY {cols} HAVING sum(__m) > 0) r").format(
        dst=sql.Identifier(*spec.dst), all=_all(spec), row=_row(spec, mine, "r"),
        before=before, okeys=okeys, odelta=sql.Identifier(*other.delta), a=_lit(a), b=_lit(b),
        not_null=not_null, cols=cols, rel=sql.Identifier(*mine.rel),
        delta=sql.Identifier(*mine.delta), m=m, out=out, add=add)


def _all(spec: PadSpec) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(c) for c in spec.columns)
