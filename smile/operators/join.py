"""Join: Δ(ΔL ⋈ X) or Δ(L ⋈ ΔX) over `(TS(dst), t]`, with the compensation of
docs/design/semantics.md §4.

Each driving delta row δ (stamped τ) joins the other side *as of τ*, rebuilt from its copy X̂
and X's own delta: X(τ) = X̂ − Σ{δx : τ < ts ≤ TS(X̂)} + Σ{δx : TS(X̂) < ts ≤ τ}. When the
driving delta is the left input the other side is taken strictly before τ (`<` and `≥` swap),
so changes of both sides with equal timestamps are counted once. Output rows carry
`__ts = τ` and `__sign = sign(δ) · sign(x)`, consolidated: per (output row, τ) the signs are
summed and only the net survives, as |n| rows of sign(n) (a δ that meets X̂'s row *and* the
rows rolling it back would otherwise write pairs that cancel — several times the rows, and
each later operator would carry them). Rows with the same τ always fall in the same slice,
so this changes no slice's net. X̂ is read under a share lock on its TS row, so a
concurrent DeltaToRel on X̂ waits and cannot tear X̂ from TS(X̂).

`join_delta` runs it all as one INSERT … SELECT; `smile.operators.join_spark` evaluates the same
`input_queries` on Spark — the two must stay interchangeable.

Of X's delta (consolidated, the default) only the rows some driving row can take are read: a
row backed out is stamped at or after the slice's first τ, a row added at or before its last
(`slice_edge`, on the slice's `__ts` index). Where X̂ is probed, what *every* driving row
takes — rows added stamped before the slice's first τ, rows backed out after its last (or at
it, as the time conditions allow) — is summed with X̂'s rows of the slice's keys before the
join (`_folded`), and only the rest meets each driving row under its time condition. With X̂
a push behind by changes older than the slice, each driving row used to meet its key's X̂ row
and that row's − and + (three rows, two cancelling in the final sum); it meets one.

The INSERT is planned without nested loops, except X̂'s lateral probes where they pay. The
planner's row estimates for a slice of a delta table come from statistics autoanalyze took at
some moment of its churn — rows arrive with the traffic and retention takes them after each
push — so a slice of thousands of rows was often estimated at 1–15, and the planner joined a
compensating part (a range of X's delta, no index on the join key) by a nested loop comparing
every driving row with every compensating one: at 1000 tweets/s such pushes took 0.3–1.2 s
where a hash join takes 0.01–0.03 s, in spells of a minute until the next autoanalyze, and the
time model learnt them and admission charged them. A hash join is linear whatever the
estimates (`smile bench join-plan`: the two rules on the same stale statistics).

Columns are addressed as (alias, column) pairs mapped to each table's physical names, so a side
may be a base relation (`uid`) or an intermediate result (`u__uid`).

Must not: read a live base table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from psycopg import sql
from psycopg.pq import TransactionStatus

from smile.operators import vertex_ts
from smile.operators.probes import probes_pay_at, reltuples

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import datetime

    import psycopg

Col = tuple[str, str]  # (alias, column)


FREE_PLAN_SLICE = 5000
"""`free_plan`'s rule, the baseline of `smile bench join-plan`: rows — of the driving slice or
of the compensating delta — above which a join is hashed; below, the planner chooses."""


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
    read: int = 0
    """Rows of the driving delta taken in."""


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


@dataclass(frozen=True)
class Began:
    """What `begin` found under its locks."""

    have: datetime
    """TS(dst): at or past the target, there is nothing to do (and nothing below was read)."""
    other: datetime | None = None
    """TS(X̂), held still by the share lock."""
    read: int = 0
    """Rows of the driving delta in `(have, target]`."""
    other_rows: float | None = None
    """X̂'s row count as the planner knows it (`pg_class.reltuples`; None or ≤ 0 unknown)."""


def begin(conn: psycopg.Connection[Any], spec: JoinSpec, to_ts: datetime,
          hashed: bool = False) -> Began:
    """In the caller's transaction, in two round trips: lock the destination and, if it is
    behind `to_ts`, hold X̂ still (a share lock on its TS row, which DeltaToRel must lock
    to change it) and read X̂'s size; then check the inputs are complete up to `to_ts` —
    X's delta at least up to TS(X̂), read after the lock, since the join rolls X̂ back with
    it — and count the driving slice. That check is a statement of its own: the share lock
    may wait for X̂'s DeltaToRel, and X's delta must be read as that left it. `hashed`:
    nested loops off for the rest of the transaction (`join_delta`), set in the first
    statement."""
    nestloop = sql.SQL("set_config('enable_nestloop', 'off', true)" if hashed else "NULL")
    have, (other_ts, size, _) = vertex_ts.begin_local_advance_with(
        conn, spec.dst_vertex, (
            vertex_ts.if_behind(vertex_ts.shared_ts(spec.other.vertex), to_ts),
            vertex_ts.if_behind(reltuples(spec.other.table), to_ts), nestloop))
    if have >= to_ts:
        return Began(have)
    other = vertex_ts.shared_value(conn, spec.other.vertex, other_ts)
    ready = vertex_ts.ready_slice(
        conn, f"cannot join into {spec.dst_vertex} up to {to_ts.isoformat()}",
        (spec.delta.vertex, spec.other_delta.vertex), spec.delta.table, have, to_ts)
    vertex_ts.require_deltas_at(conn, spec.other.vertex, other, (spec.other_delta.vertex,),
                                ready.ts)
    return Began(have, other, ready.rows, None if size is None else float(size))


def _columns_read(spec: JoinSpec, side: Literal["d", "x"]) -> set[str]:
    """The physical columns of one side (`d` the driving delta, `x` the other) this join
    needs: those it outputs, joins on or filters by (a filter's text names them; a column
    named by chance is merely kept)."""
    columns = spec.delta.columns if side == "d" else spec.other.columns
    used = {p for c, _ in spec.outputs for s, p in (spec.out_column(c),) if s == side}
    used |= {columns[pair[0 if side == "d" else 1]] for pair in spec.predicates}
    texts = [f for s, f in spec.filters if s == side]
    used |= {p for p in columns.values() if any(p in f for f in texts)}
    return used


def driving_columns(spec: JoinSpec) -> list[str]:
    """The driving delta's physical columns this join needs (`_columns_read`)."""
    return sorted(_columns_read(spec, "d"))


def other_columns(spec: JoinSpec) -> list[tuple[Col, str]]:
    """The other side's columns this join needs (`_columns_read`), as (column, physical name
    in X̂)."""
    used = _columns_read(spec, "x")
    return [(c, p) for c, p in sorted(spec.other.columns.items()) if p in used]


def _leading(items: Iterable[sql.Composable]) -> sql.Composable:
    """`a, b, ` — each item followed by a comma (nothing for none), ahead of more columns."""
    return sql.SQL("").join(sql.SQL("{}, ").format(i) for i in items)


def _where(spec: JoinSpec, side: Literal["d", "x"]) -> sql.Composable:
    """` AND (filter)` for each of the side's filters."""
    return sql.SQL("").join(sql.SQL(" AND ({})").format(sql.SQL(f))
                            for s, f in spec.filters if s == side)


def slice_edge(spec: JoinSpec, a: datetime, b: datetime, edge: Literal["min", "max"]
               ) -> sql.Composed:
    """An expression: the first (`min`) or last (`max`) τ of the driving slice `(a, b]` with
    its filters, read on the delta's `__ts` index; NULL for an empty slice. Every driving row
    the join takes is stamped within the two."""
    return sql.SQL("(SELECT {}(d.__ts) FROM {} d WHERE d.__ts > {} AND d.__ts <= {}{})").format(
        sql.SQL(edge), sql.Identifier(*spec.delta.table), sql.Literal(a), sql.Literal(b),
        _where(spec, "d"))


def input_queries(conn: psycopg.Connection[Any], spec: JoinSpec, a: datetime,
                  b: datetime, other_ts: datetime, consolidate_other: bool = True
                  ) -> tuple[sql.Composed, tuple[sql.Composed, ...]]:
    """(d, xs): the driving delta's slice `(a, b]` with its filters, consolidated on the
    columns the join needs (an UPDATE of a column it does not read is a − and a + row that
    cancel here instead of each meeting every matching row of X: a user's follower count
    changing met 2,700 rows of X̂ twice, 3.6M rows to sort that summed to nothing), `__sign`
    then being a multiplicity; and the three parts of
    the other side as of each driving row — X̂ (`__k = 0`), its delta's rows in `(a, TS(X̂)]`
    to back out of it (`__k = 1`) and those in `(TS(X̂), b]` to add (`__k = 2`), each bounded
    by the slice's span when consolidated (`reach`), each with the other
    side's columns the join needs (`other_columns`), `__s`, `__t` and `__k`; the time
    conditions pick per driving row. The two delta parts are consolidated the same way, per
    (columns, timestamp), `__s` a multiplicity: the time conditions read only the timestamp,
    so no driving row can tell the rows summed apart, and the − and + of an UPDATE of a column
    the join does not read cancel before the join instead of each meeting every driving row
    of its key — a busy user's 13k driving rows × its follower-count updates were 651k rows
    to sort (on disk) that summed to nothing, 3.6 s of a 0.2-s push (`consolidate_other`
    False: row by row, for `smile bench busy-key-join`'s baseline). Literal
    timestamps: the caller holds the locks that keep them true (`begin`: `other_ts` is
    TS(X̂) under its share lock)."""
    o = other_ts
    other_cols = other_columns(spec)
    xcols = _leading(sql.Identifier(phys) for _, phys in other_cols)
    xdcols = _leading(
        sql.SQL("{} AS {}").format(sql.Identifier(spec.other_delta.columns[c]),
                                   sql.Identifier(phys)) for c, phys in other_cols)
    xdgroup = _leading(sql.Identifier(spec.other_delta.columns[c]) for c, _ in other_cols)
    dcols = sql.SQL(", ").join(sql.Identifier("d", p) for p in driving_columns(spec))

    lit = {"a": sql.Literal(a), "b": sql.Literal(b), "o": sql.Literal(o)}
    d = sql.SQL("SELECT {dcols}, sum(d.__sign)::bigint AS __sign, d.__ts FROM {delta} d "
                "WHERE d.__ts > {a} AND d.__ts <= {b}{f} GROUP BY {dcols}, d.__ts "
                "HAVING sum(d.__sign) <> 0").format(
        dcols=dcols, delta=sql.Identifier(*spec.delta.table), f=_where(spec, "d"), **lit)
    other, odelta = sql.Identifier(*spec.other.table), sql.Identifier(*spec.other_delta.table)
    # only the rows of keys the slice holds are grouped: a few driving rows over a full slice
    # of X's delta (Δcurloc ⋈ tweets) would otherwise group it all to join a few
    keys = sql.SQL("({}) IN (SELECT {} FROM {} d WHERE d.__ts > {a} AND d.__ts <= {b}{f})").format(
        sql.SQL(", ").join(sql.Identifier(spec.other_delta.columns[oc])
                           for _, oc in spec.predicates),
        sql.SQL(", ").join(sql.Identifier("d", spec.delta.columns[dc])
                           for dc, _ in spec.predicates),
        sql.Identifier(*spec.delta.table), f=_where(spec, "d"), **lit) if spec.predicates \
        else sql.SQL("true")

    def reach(k: int) -> sql.Composed:
        """The part's rows some driving row can take: a row backed out (`k = 1`) is stamped at
        or after a driving row's τ, a row added (`k = 2`) at or before it — so not before the
        slice's first τ, nor after its last. This keeps a part whose rows no driving row
        takes (X̂ ahead by changes older than the whole slice, backed out; or behind by
        changes newer than it, added) from being grouped and joined to nothing."""
        return sql.SQL("__ts {} {}").format(sql.SQL(">=" if k == 1 else "<="),
                                            slice_edge(spec, a, b, "min" if k == 1 else "max"))

    def delta_part(k: int, lo: sql.Literal, hi: sql.Literal) -> sql.Composed:
        """X's delta over `(lo, hi]`, backed out (`k = 1`, signs negated) or added (`k = 2`)."""
        sign = sql.SQL("-" if k == 1 else "")
        if not consolidate_other:
            return sql.SQL("SELECT {}{}__sign::bigint AS __s, __ts AS __t, {} AS __k FROM {} "
                           "WHERE __ts > {} AND __ts <= {}").format(
                xdcols, sign, sql.Literal(k), odelta, lo, hi)
        return sql.SQL("SELECT {}{}sum(__sign)::bigint AS __s, __ts AS __t, {} AS __k FROM {} "
                       "WHERE __ts > {} AND __ts <= {} AND {} AND {} GROUP BY {}__ts "
                       "HAVING sum(__sign) <> 0").format(
            xdcols, sign, sql.Literal(k), odelta, lo, hi, reach(k), keys, xdgroup)

    parts = (
        sql.SQL("SELECT {}1::bigint AS __s, NULL::timestamptz AS __t, 0 AS __k FROM {}").format(
            xcols, other), delta_part(1, lit["a"], lit["o"]), delta_part(2, lit["o"], lit["b"]))
    xs = tuple(sql.SQL("SELECT * FROM ({}) x WHERE true{}").format(part, _where(spec, "x"))
               for part in parts)
    return d, xs


def join_delta(conn: psycopg.Connection[Any], spec: JoinSpec, to_ts: datetime,
               free_plan: bool = False, consolidate_other: bool = True) -> Joined:
    """Advance `spec.dst_vertex` to `to_ts` by one INSERT … SELECT on PostgreSQL: X̂ probed
    through its join-key index where that pays (`probes_pay_at`; once per distinct key of the
    slice, with the compensation every driving row takes folded in, `_folded`), every other
    part hash-joined (the module's docstring says why). `free_plan`: the rule before,
    for the benchmark's baseline — the planner chooses unless a slice is over
    `FREE_PLAN_SLICE` rows. `consolidate_other` False: the other side's delta joined row by
    row (`input_queries`), for a benchmark's baseline."""
    own = conn.info.transaction_status == TransactionStatus.IDLE
    with conn.transaction():
        # hash joins, whatever the statistics of the moment say (see the module's docstring);
        # X̂'s lateral probes stay a nested loop, the only plan a lateral subquery has
        began = begin(conn, spec, to_ts, hashed=not free_plan)
        have, read = began.have, began.read
        if have >= to_ts or read == 0:
            if not (own or free_plan):  # the operators after this one in the caller's
                conn.execute("SET LOCAL enable_nestloop = on")  # transaction plan freely
            if have >= to_ts:
                return Joined(have, have, 0)
            # no driving row, no joined row: only the timestamp moves (planning the join of
            # the three parts of X̂ cost a few milliseconds for nothing)
            vertex_ts.advance(conn, spec.dst_vertex, to_ts)
            return Joined(have, to_ts, 0, 0)
        assert began.other is not None
        d_query, parts = input_queries(conn, spec, have, to_ts, began.other, consolidate_other)
        d: sql.Composable = sql.SQL("({})").format(d_query)
        xs: tuple[sql.Composable, ...] = parts
        probe = probes_pay_at(began.other_rows, read) is True
        hashed = not free_plan
        if free_plan and (probe or max(
                read, vertex_ts.slice_rows(conn, spec.other_delta.table, have, to_ts)
        ) > FREE_PLAN_SLICE):
            hashed = True
            conn.execute("SET LOCAL enable_nestloop = off")
        back, fwd = spec.time_conditions
        on = sql.SQL(" AND ").join(
            sql.SQL("{} = {}").format(sql.Identifier("d", spec.delta.columns[dc]),
                                      sql.Identifier("x", spec.other.columns[oc]))
            for dc, oc in spec.predicates)
        outs = sql.SQL(", ").join(sql.SQL("{} AS {}").format(
            sql.Identifier(*spec.out_column(c)), sql.Identifier(n)) for c, n in spec.outputs)
        names = sql.SQL(", ").join(sql.Identifier(n) for _, n in spec.outputs)
        ctes: sql.Composable = sql.SQL("")
        ons: tuple[sql.Composable, ...]
        conds: tuple[sql.Composable, ...] = (
            sql.SQL("true"), sql.SQL(f"x.{back}"), sql.SQL(f"x.{fwd}"))
        if probe and not free_plan and consolidate_other and spec.predicates:
            ctes, d, xs, ons, conds = _folded(spec, d, xs, on, have, to_ts)
        elif probe:
            # X̂ probed through its join-key index once per driving row: `OFFSET 0` keeps the
            # planner from flattening the lateral subquery into a hash join over all of X̂
            xs = (sql.SQL("LATERAL (SELECT * FROM ({}) x WHERE {} OFFSET 0)").format(
                xs[0], on), *(sql.SQL("({})").format(x) for x in xs[1:]))
            ons = (sql.SQL("true"), on, on)
        else:
            xs = tuple(sql.SQL("({})").format(x) for x in xs)
            ons = (on, on, on)
        # one join per part of the other side, so each can probe its own index (a join with
        # their union scans all of X̂), then the net per (row, τ)
        joins = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {outs}, d.__ts, d.__sign * x.__s AS __s FROM {d} d "
                    "JOIN {x} x ON {on} WHERE {cond}").format(
                outs=outs, d=d, x=x, on=xon, cond=cond)
            for x, xon, cond in zip(xs, ons, conds, strict=True))
        group = sql.SQL(", ").join(sql.SQL(str(i)) for i in range(1, len(spec.outputs) + 2))
        # the rows and TS(dst) = to_ts in one statement
        rows = vertex_ts.write_and_advance(conn, spec.dst_vertex, to_ts, sql.SQL(
            "INSERT INTO {dst} ({names}, __sign, __ts) {ctes}"
            "SELECT {names}, sign(g.__n)::smallint, g.__ts FROM ("
            " SELECT {names}, __ts, sum(__s) AS __n FROM ({joins}) j"
            " GROUP BY {group} HAVING sum(__s) <> 0) g, generate_series(1, abs(g.__n))").format(
            dst=sql.Identifier(*spec.dst_table), names=names, ctes=ctes, joins=joins,
            group=group))
        if hashed and not own:  # the operators after this one in the caller's transaction
            conn.execute("SET LOCAL enable_nestloop = on")  # plan freely
        return Joined(have, to_ts, rows, read)


def _folded(spec: JoinSpec, d: sql.Composable, xs: tuple[sql.Composable, ...], on: sql.Composable,
            a: datetime, b: datetime
            ) -> tuple[sql.Composed, sql.Composable, tuple[sql.Composable, ...],
                       tuple[sql.Composable, ...], tuple[sql.Composable, ...]]:
    """The probing join's parts with the compensation every driving row takes folded into X̂
    before the join: (the statement's CTEs, d, xs, ons, conds) for `join_delta`.

    A row of X's delta backed out (`k = 1`) stamped after the slice's last τ, or added
    (`k = 2`) before its first — or at that τ, where the side's time condition takes it there
    (`JoinSpec.time_conditions`) — meets every driving row of its key. Those rows are summed per
    X-row with X̂'s rows of the slice's keys — probed once per distinct key, not once per
    driving row — into `__x`, X as every driving row of the slice sees it, net; the driving
    rows meet it in one hash join. Only the rows stamped within the slice's span (the *band*)
    still meet each driving row under its time condition. Where X̂ lags behind by changes
    older than the slice, a driving row met its key's X̂ row and that row's − and + from X's
    delta (three rows, two cancelling in the final sum); it now meets one. The driving slice
    and the two delta parts are each computed once (`__d`, `__x1`, `__x2`), however many
    branches read them."""
    back, fwd = spec.time_conditions
    first, last = slice_edge(spec, a, b, "min"), slice_edge(spec, a, b, "max")
    # a condition that holds for every driving row: d.__ts at the extreme that is hardest
    every = (sql.SQL(back.replace("d.__ts", "{}")).format(last),
             sql.SQL(fwd.replace("d.__ts", "{}")).format(first))
    xnames = sql.SQL(", ").join(sql.Identifier("x", p) for _, p in other_columns(spec))
    # each driving column once (two predicates may compare one column with two of X)
    keys = sql.SQL(", ").join(sql.Identifier(c) for c in dict.fromkeys(
        spec.delta.columns[dc] for dc, _ in spec.predicates))
    ctes = sql.SQL(
        "WITH __d AS MATERIALIZED ({d}), __x1 AS MATERIALIZED ({x1}), "
        "__x2 AS MATERIALIZED ({x2}), __x AS MATERIALIZED ("
        "SELECT {xn}, sum(x.__s)::bigint AS __s FROM ("
        "SELECT x.* FROM (SELECT DISTINCT {keys} FROM __d) d, "
        "LATERAL (SELECT * FROM ({x0}) x WHERE {on} OFFSET 0) x"
        " UNION ALL SELECT * FROM __x1 x WHERE x.{e1}"
        " UNION ALL SELECT * FROM __x2 x WHERE x.{e2}) x "
        "GROUP BY {xn} HAVING sum(x.__s) <> 0) ").format(
        d=d, xn=xnames, keys=keys, x0=xs[0], on=on, x1=xs[1], x2=xs[2], e1=every[0],
        e2=every[1])
    band = tuple(sql.SQL("x.{} AND NOT (x.{})").format(sql.SQL(c), e)
                 for c, e in zip((back, fwd), every, strict=True))
    return (ctes, sql.SQL("__d"), (sql.SQL("__x"), sql.SQL("__x1"), sql.SQL("__x2")),
            (on, on, on), (sql.SQL("true"), *band))
