"""Aggregate(Δin [, in] → A): a GROUP BY (or DISTINCT, or a global aggregate) kept from the
delta of its input over `(TS(A), t]` (docs/design/beyond_spj.md, "Aggregates").

Per group (its keys `g0…`, unique `NULLS NOT DISTINCT`), A holds the input rows `__n` and per
aggregate call `i`: the non-NULL values `nn{i}`, their sum `s{i}` (sum and avg), the extreme
`m{i}` (min and max) and the distinct non-NULL values `d{i}` (`count(DISTINCT …)`, from a side
table `(keys, v, n)`). One advance, in one transaction with TS(A):

1. the slice consolidated per (keys, argument values);
2. an upsert adding the slice's counts and sums; the extreme moves to the least (greatest)
   inserted value; the least (greatest) deleted one is kept in `__x{i}`;
3. a group whose `__n` reaches 0 goes (a global aggregate keeps its one row);
4. the side tables of `count(DISTINCT …)` take the slice, and `d{i}` is counted again for the
   groups it touched; a group that lost a value at or beyond its extreme has it recomputed
   from the input's relation rolled to t with its own delta — no other group is read.

The column types are PostgreSQL's own: A is created from the aggregates of the input's
columns (`create_aggregate`), so `sum` of an int4 is a bigint, `avg` of an integer a numeric.

Must not: read a live base table, or commit anything but its own transaction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg import sql

from smile.errors import AgentError
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from datetime import datetime

Func = Literal["count", "sum", "avg", "min", "max"]


@dataclass(frozen=True)
class Call:
    """One aggregate call, its argument over the input's physical columns (None: `*`)."""

    func: Func
    arg: str | None
    distinct: bool = False

    @property
    def counts(self) -> bool:
        return self.arg is not None

    @property
    def sums(self) -> bool:
        return self.func in ("sum", "avg")

    @property
    def extreme(self) -> bool:
        return self.func in ("min", "max")


@dataclass(frozen=True)
class AggregateSpec:
    delta: tuple[str, str]
    delta_vertex: str
    dst: tuple[str, str]
    dst_vertex: str
    keys: tuple[str, ...]
    """The group key: SQL over the input's physical columns, one per group column."""
    calls: tuple[Call, ...]
    rel: tuple[str, str] | None = None
    """The input as a relation (min and max are recomputed from it)."""
    rel_vertex: str | None = None
    where: tuple[str, ...] = ()
    """Predicates over the input's physical columns its rows must pass."""
    global_: bool = False

    @property
    def group(self) -> tuple[str, ...]:
        """The group columns of A."""
        return ("__g",) if self.global_ else tuple(f"g{i}" for i in range(len(self.keys)))

    def side(self, i: int) -> tuple[str, str]:
        """The side table of call `i` (`count(DISTINCT …)`)."""
        return (self.dst[0], f"{self.dst[1]}_d{i}"[:63])


@dataclass(frozen=True)
class Aggregated:
    from_ts: datetime
    to_ts: datetime
    rows: int
    """Groups written."""
    read: int


def _id(*parts: str) -> sql.Identifier:
    return sql.Identifier(*parts)


def _key_exprs(spec: AggregateSpec) -> list[sql.Composable]:
    if spec.global_:
        return [sql.SQL("true")]
    return [sql.SQL(k) for k in spec.keys]


def _state_exprs(spec: AggregateSpec, typed: bool = False) -> list[sql.Composable]:
    """`expr AS column` of A's columns past its keys, over input rows: their values (a fill),
    or with `typed` the empty result A is created from."""
    out: list[sql.Composable] = [sql.SQL("count(*)::bigint AS __n")]
    for i, c in enumerate(spec.calls):
        arg = sql.SQL(c.arg) if c.arg is not None else sql.SQL("NULL")
        if c.counts:
            out.append(sql.SQL("count({})::bigint AS {}").format(arg, _id(f"nn{i}")))
        if c.sums:
            # avg's state is a sum of avg's type: numeric for integers (exact), double
            # precision for reals
            typing = c.func == "avg" and typed
            out.append(sql.SQL("(avg({a}) * 0 + sum({a})) AS {s}" if typing else
                               "sum({a}) AS {s}").format(a=arg, s=_id(f"s{i}")))
        if c.extreme:
            out.append(sql.SQL("{}({}) AS {}").format(sql.SQL(c.func), arg, _id(f"m{i}")))
            out.append(sql.SQL("{}({}) AS {}").format(sql.SQL(c.func), arg, _id(f"__x{i}")))
        if c.distinct:
            out.append(sql.SQL("count(DISTINCT {})::bigint AS {}").format(arg, _id(f"d{i}")))
    return out


def _select_groups(spec: AggregateSpec, source: sql.Composable,
                   typed: bool = False) -> sql.Composed:
    """A's rows over the input rows of `source` (a table or a parenthesised query)."""
    keys = _key_exprs(spec)
    outs = [sql.SQL("{} AS {}").format(k, _id(g)) for k, g in zip(keys, spec.group,
                                                                   strict=True)]
    group = sql.SQL("") if spec.global_ else sql.SQL(" GROUP BY {}").format(
        sql.SQL(", ").join(keys))
    return sql.SQL("SELECT {} FROM {} AS i{}{}").format(
        sql.SQL(", ").join([*outs, *_state_exprs(spec, typed)]), source, _where(spec), group)


def _where(spec: AggregateSpec, extra: sql.Composable | None = None) -> sql.Composable:
    conds = [sql.SQL("({})").format(sql.SQL(w)) for w in spec.where]
    if extra is not None:
        conds.append(sql.SQL("({})").format(extra))
    if not conds:
        return sql.SQL("")
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds)


def create_aggregate(conn: psycopg.Connection[Any], spec: AggregateSpec) -> None:
    """Create A (and its side tables) empty, its column types PostgreSQL's own for these
    aggregates of the input's columns; a global aggregate gets its one row."""
    dst, delta = _id(*spec.dst), _id(*spec.delta)
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} AS {} WITH NO DATA").format(
        dst, _select_groups(spec, delta, typed=True)))
    conn.execute(sql.SQL("CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({}) NULLS NOT DISTINCT")
                 .format(_id(f"{spec.dst[1]}_g"[:63]), dst,
                         sql.SQL(", ").join(_id(g) for g in spec.group)))
    for i, c in enumerate(spec.calls):
        if not c.distinct:
            continue
        keys = _key_exprs(spec)
        side = _id(*spec.side(i))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {side} AS SELECT {named}, ({a}) AS v, "
            "count(*)::bigint AS n FROM {delta} AS i GROUP BY {by} WITH NO DATA"
        ).format(side=side, named=sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(k, _id(g)) for k, g in zip(keys, spec.group,
                                                                  strict=True)),
            by=_ordinals(len(keys) + 1), a=sql.SQL(c.arg or "NULL"), delta=delta))
        conn.execute(sql.SQL("CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({}, v) "
                             "NULLS NOT DISTINCT").format(
            _id(f"{spec.side(i)[1]}_k"[:63]), side,
            sql.SQL(", ").join(_id(g) for g in spec.group)))
    if spec.global_:
        conn.execute(sql.SQL("INSERT INTO {} {} ON CONFLICT DO NOTHING").format(
            dst, _select_groups(spec, sql.SQL("(SELECT * FROM {} WHERE false)").format(delta))))
    _index_input(conn, spec)


def _index_input(conn: psycopg.Connection[Any], spec: AggregateSpec) -> None:
    """An index on the group key of the input's relation, which min and max are recomputed
    from a group at a time. A key over a function PostgreSQL does not call immutable cannot
    be indexed: the recomputation then scans the relation (it stays correct)."""
    if spec.global_ or spec.rel is None or not any(c.extreme for c in spec.calls):
        return
    name = "{}_g{}".format(spec.rel[1][:40], hashlib.sha1("\n".join(spec.keys).encode())
                           .hexdigest()[:8])
    try:
        with conn.transaction():
            conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                _id(name), _id(*spec.rel),
                sql.SQL(", ").join(sql.SQL("({})").format(sql.SQL(k)) for k in spec.keys)))
    except psycopg.errors.InvalidObjectDefinition:
        pass


def fill_aggregate(conn: psycopg.Connection[Any], spec: AggregateSpec,
                   source: sql.Composable) -> int:
    """A's first contents from the input's rows at its first TS (`source`: a table or a
    parenthesised query with the input's physical columns); in the caller's transaction."""
    dst = _id(*spec.dst)
    conn.execute(sql.SQL("DELETE FROM {}").format(dst))
    n = conn.execute(sql.SQL("INSERT INTO {} {}").format(dst, _select_groups(spec, source)))
    for i, c in enumerate(spec.calls):
        if c.distinct:
            side = _id(*spec.side(i))
            conn.execute(sql.SQL("DELETE FROM {}").format(side))
            conn.execute(sql.SQL(
                "INSERT INTO {side} SELECT {keys}, ({a}) AS v, count(*) FROM {src} AS i{w} "
                "GROUP BY {by}").format(
                side=side, keys=sql.SQL(", ").join(_key_exprs(spec)), a=sql.SQL(c.arg or "NULL"),
                by=_ordinals(len(spec.group) + 1),
                src=source, w=_where(spec, sql.SQL("({}) IS NOT NULL").format(
                    sql.SQL(c.arg or "NULL")))))
    return n.rowcount


def aggregate_delta(conn: psycopg.Connection[Any], spec: AggregateSpec,
                    to_ts: datetime) -> Aggregated:
    """Advance A to `to_ts` from the input's delta (the module's steps 1–4)."""
    with conn.transaction():
        have = vertex_ts.begin_local_advance(conn, spec.dst_vertex)
        if have >= to_ts:
            return Aggregated(have, have, 0, 0)
        read = vertex_ts.ready_slice(
            conn, f"cannot aggregate into {spec.dst_vertex} up to {to_ts.isoformat()}",
            (spec.delta_vertex,), spec.delta, have, to_ts).rows
        written = 0
        if read:
            rel_ts = vertex_ts.lock_rolled(conn, spec.rel_vertex, (spec.delta_vertex,)) \
                if spec.rel_vertex is not None else None
            for statement in advance_statements(spec, have, to_ts, rel_ts):
                cur = conn.execute(statement)
                if statement is not None and cur.rowcount > 0 and not written:
                    written = cur.rowcount
        vertex_ts.advance(conn, spec.dst_vertex, to_ts)
        return Aggregated(have, to_ts, written, read)


def _values(spec: AggregateSpec) -> list[tuple[int, Call]]:
    return [(i, c) for i, c in enumerate(spec.calls) if c.counts]


def advance_statements(spec: AggregateSpec, a: datetime, b: datetime,
                       rel_ts: datetime | None) -> list[sql.Composed]:
    """The statements of one advance over `(a, b]` (steps 1–4); `rel_ts` the TS of the
    input's relation, when min or max needs it."""
    keys = _key_exprs(spec)
    vals = _values(spec)
    slice_cols = [sql.SQL("{} AS {}").format(k, _id(f"k{j}")) for j, k in enumerate(keys)]
    slice_cols += [sql.SQL("({}) AS {}").format(sql.SQL(c.arg or "NULL"), _id(f"v{i}"))
                   for i, c in vals]
    grouping = _ordinals(len(slice_cols))
    out = [sql.SQL(
        "CREATE TEMP TABLE __agg_d ON COMMIT DROP AS SELECT {cols}, sum(i.__sign)::bigint AS s "
        "FROM {delta} AS i WHERE i.__ts > {a} AND i.__ts <= {b}{w} GROUP BY {g} "
        "HAVING sum(i.__sign) <> 0").format(
        cols=sql.SQL(", ").join(slice_cols), delta=_id(*spec.delta), a=sql.Literal(a),
        b=sql.Literal(b), w=_and(spec.where), g=grouping)]
    out.append(_upsert(spec))
    if not spec.global_:
        out.append(sql.SQL("DELETE FROM {} WHERE ctid IN (SELECT t FROM __agg_u WHERE n = 0)")
                   .format(_id(*spec.dst)))
    for i, c in vals:
        if c.distinct:
            out.extend(_distinct_statements(spec, i))
    recount = _recount(spec, b, rel_ts)
    if recount is not None:
        out.append(recount)
    return out


def _ordinals(n: int) -> sql.Composed:
    """GROUP BY 1, …, n: the select list's first n items (a constant key is no GROUP BY
    item PostgreSQL takes by value)."""
    return sql.SQL(", ").join(sql.SQL(str(k)) for k in range(1, n + 1))


def _and(where: tuple[str, ...]) -> sql.Composed:
    return sql.SQL("").join(sql.SQL(" AND ({})").format(sql.SQL(w)) for w in where)


def _upsert(spec: AggregateSpec) -> sql.Composed:
    """Step 2: the slice's counts, sums and extremes into A; (ctid, __n) of each group
    written kept in `__agg_u`."""
    group = list(spec.group)
    ks = [sql.SQL("true")] if spec.global_ else [_id(f"k{j}") for j in range(len(spec.keys))]
    cols: list[sql.Composable] = [*(_id(g) for g in group), _id("__n")]
    sel: list[sql.Composable] = [*ks, sql.SQL("coalesce(sum(s), 0)")]
    sets: list[sql.Composable] = [sql.SQL("__n = a.__n + excluded.__n")]
    for i, c in _values(spec):
        v, nn = _id(f"v{i}"), _id(f"nn{i}")
        cols.append(nn)
        sel.append(sql.SQL("coalesce(sum(s) FILTER (WHERE {} IS NOT NULL), 0)").format(v))
        sets.append(sql.SQL("{nn} = a.{nn} + excluded.{nn}").format(nn=nn))
        if c.sums:
            s = _id(f"s{i}")
            cols.append(s)
            sel.append(sql.SQL("sum({} * s)").format(v))
            sets.append(sql.SQL(
                "{s} = CASE WHEN a.{nn} + excluded.{nn} = 0 THEN NULL "
                "ELSE coalesce(a.{s} + excluded.{s}, a.{s}, excluded.{s}) END").format(
                s=s, nn=nn))
        if c.extreme:
            m, x = _id(f"m{i}"), _id(f"__x{i}")
            fn = sql.SQL(c.func)
            pick = sql.SQL("least" if c.func == "min" else "greatest")
            cols += [m, x]
            sel.append(sql.SQL("{}({}) FILTER (WHERE s > 0)").format(fn, v))
            sel.append(sql.SQL("{}({}) FILTER (WHERE s < 0)").format(fn, v))
            sets.append(sql.SQL("{m} = {pick}(a.{m}, excluded.{m})").format(m=m, pick=pick))
            sets.append(sql.SQL("{x} = excluded.{x}").format(x=x))
    group_by = sql.SQL("") if spec.global_ else sql.SQL(" GROUP BY {}").format(
        sql.SQL(", ").join(ks))
    return sql.SQL(
        "CREATE TEMP TABLE __agg_u ON COMMIT DROP AS WITH up AS ("
        "INSERT INTO {dst} AS a ({cols}) SELECT {sel} FROM __agg_d{group_by} "
        "ON CONFLICT ({group}) DO UPDATE SET {sets} RETURNING a.ctid AS t, a.__n AS n) "
        "SELECT * FROM up").format(
        dst=_id(*spec.dst), cols=sql.SQL(", ").join(cols), sel=sql.SQL(", ").join(sel),
        group_by=group_by, group=sql.SQL(", ").join(_id(g) for g in group),
        sets=sql.SQL(", ").join(sets))


def _distinct_statements(spec: AggregateSpec, i: int) -> list[sql.Composed]:
    """Step 4 for `count(DISTINCT …)`: the side table takes the slice; values whose count
    reaches 0 go."""
    side = _id(*spec.side(i))
    group = [_id(g) for g in spec.group]
    ks = [sql.SQL("true")] if spec.global_ else [_id(f"k{j}") for j in range(len(spec.keys))]
    v = _id(f"v{i}")
    return [
        sql.SQL("CREATE TEMP TABLE {tmp} ON COMMIT DROP AS WITH up AS ("
                "INSERT INTO {side} AS x ({group}, v, n) SELECT {ks}, {v}, sum(s) "
                "FROM __agg_d WHERE {v} IS NOT NULL GROUP BY {by} "
                "ON CONFLICT ({group}, v) DO UPDATE SET n = x.n + excluded.n "
                "RETURNING x.ctid AS t, x.n AS n) SELECT * FROM up").format(
            tmp=_id(f"__agg_side{i}"), side=side, group=sql.SQL(", ").join(group),
            ks=sql.SQL(", ").join(ks), v=v, by=_ordinals(len(ks) + 1)),
        sql.SQL("DELETE FROM {} WHERE ctid IN (SELECT t FROM {} WHERE n = 0)").format(
            side, _id(f"__agg_side{i}")),
    ]


def _same(left: sql.Composable, right: sql.Composable) -> sql.Composed:
    """NULL-safe equality written so that an index on `left` serves it (`IS NOT DISTINCT
    FROM` is no index condition; this is two, a bitmap OR)."""
    return sql.SQL("(({l}) = {r} OR (({l}) IS NULL AND {r} IS NULL))").format(l=left, r=right)


def _same_group(left: str, right: str, group: list[str]) -> sql.Composed:
    """NULL-safe equality of two rows' group columns."""
    return sql.SQL(" AND ").join(_same(_id(left, g), _id(right, g)) for g in group)


def _recount(spec: AggregateSpec, b: datetime, rel_ts: datetime | None
             ) -> sql.Composed | None:
    """Step 4: the distinct counts of the groups the slice touched, and the extremes that a
    deleted value may have taken away, computed again."""
    sets: list[sql.Composable] = []
    group = list(spec.group)
    for i, c in enumerate(spec.calls):
        if c.distinct:
            sets.append(sql.SQL("{d} = (SELECT count(*) FROM {side} x WHERE {same})").format(
                d=_id(f"d{i}"), side=_id(*spec.side(i)), same=_same_group("x", "a", group)))
        if c.extreme:
            if spec.rel is None or rel_ts is None:
                raise AgentError(f"{spec.dst_vertex} keeps {c.func}() but has no input "
                                 "relation to recompute it from")
            m, x = _id(f"m{i}"), _id(f"__x{i}")
            cmp = sql.SQL("<=" if c.func == "min" else ">=")
            sets.append(sql.SQL(
                "{m} = CASE WHEN a.{x} IS NOT NULL AND (a.{m} IS NULL OR a.{x} {cmp} a.{m}) "
                "THEN ({again}) ELSE a.{m} END").format(
                m=m, x=x, cmp=cmp, again=_extreme_at(spec, c, b, rel_ts)))
    if not sets:
        return None
    alive = sql.SQL("") if spec.global_ else sql.SQL(" AND u.n <> 0")  # the others are gone
    return sql.SQL("UPDATE {} AS a SET {} FROM __agg_u u WHERE a.ctid = u.t{}").format(
        _id(*spec.dst), sql.SQL(", ").join(sets), alive)


def _extreme_at(spec: AggregateSpec, c: Call, b: datetime, rel_ts: datetime) -> sql.Composed:
    """min (max) of the call's argument over A's group `a` in the input as of `b`: its
    relation rolled to `b` with its delta, the group's rows only."""
    assert spec.rel is not None and c.arg is not None
    keys = _key_exprs(spec)
    same = sql.SQL("true") if spec.global_ else sql.SQL(" AND ").join(
        _same(k, sql.SQL("a.{}").format(_id(g))) for k, g in zip(keys, spec.group, strict=True))
    rel, delta = _id(*spec.rel), _id(*spec.delta)
    arg, o, t = sql.SQL(c.arg), sql.Literal(rel_ts), sql.Literal(b)
    return sql.SQL(
        "SELECT {fn}(v) FROM (SELECT v FROM ("
        " SELECT ({arg}) AS v, 1 AS m FROM {rel} AS i WHERE {same}{w}"
        " UNION ALL SELECT ({arg}), -i.__sign FROM {delta} AS i"
        "  WHERE i.__ts > {t} AND i.__ts <= {o} AND {same}{w}"
        " UNION ALL SELECT ({arg}), i.__sign FROM {delta} AS i"
        "  WHERE i.__ts <= {t} AND i.__ts > {o} AND {same}{w}"
        ") u GROUP BY v HAVING sum(m) > 0) p").format(
        fn=sql.SQL(c.func), arg=arg, rel=rel, delta=delta, same=same, w=_and(spec.where),
        t=t, o=o)
