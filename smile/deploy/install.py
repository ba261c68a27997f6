"""Installing vertices of a plan on the machines: their tables, their first contents at one exact
timestamp t0 (by PostgreSQL, or by Spark when the plan joins on Spark), their timestamps, the
indexes joins probe them by, the readers retention must respect, and the consumers' views of
the MVs.

A relation vertex (a copy, an intermediate join, an MV) starts as what it holds (its `Expr`)
over the base relations as of t0, each read from its shadow copy rolled to t0 with its delta
and streamed with COPY to the vertex's machine; deltas start empty. Every installed vertex's TS
is t0. Installing again is harmless (tables are refilled). What is installed may be a whole
plan (`install_plan`) or the new vertices of a new global plan on one machine (an agent's part
of an Install command): contents never depend on the route, so a vertex's first contents are
the same whoever asks. A relation a push can recompute and no consumer reads lives in an
UNLOGGED table (`unlogged.py`; an MV's stays logged): a crash empties it,
and it is then recomputed as a stale one (docs/design/agents.md, *Unlogged relations*); so
does a delta whose loss the one push reading it makes good (*Unlogged deltas*).

Must not: run operators (that is `advance.py`) or choose plans.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import pipe, relkind
from smile.delta_capture.registry import ensure_capture_schema
from smile.deploy.edge_specs import aggregate_spec, over_slots
from smile.deploy.physical import (
    PhysicalPlan,
    PhysicalVertex,
    column_name,
    column_ref,
    physical_vertex,
)
from smile.deploy.spark_jobs import SparkJoins, fill_on_spark
from smile.deploy.unlogged import Persistence, keep_logged, may_be_unlogged, persistence
from smile.errors import StaleRelation
from smile.operators import retention, vertex_ts
from smile.operators.aggregate import create_aggregate, fill_aggregate
from smile.operators.as_of import as_of_query
from smile.operators.probes import index_stats, most_distinct
from smile.operators.rewrite import rewrite_columns
from smile.optimizer.expr import NO_AGG, Expr
from smile.optimizer.plan import Aggregate, CopyDelta, DeltaToRel, Join, Pad, Union, Vertex

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator

    import psycopg

    from smile.optimizer.expr import Part
    from smile.optimizer.global_plan import SharingEntry
    from smile.optimizer.plan import Edge, VertexKind

MV_SCHEMA = "smile_mv"
RELATION_FILLFACTOR = 90
HOLD_ALL = datetime(1970, 1, 1, tzinfo=UTC)
"""A reader's TS that holds back retention of every delta row (older than any commit; not
-infinity, which clients cannot load as a timestamp)."""


def mirror_key(label: str) -> str:
    """The source machine's stand-in for a remote reader's TS (advanced after each copy)."""
    return f"mirror:{label}"


def oldest_watermark(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                     vertices: Iterable[Vertex]) -> datetime:
    """The oldest TS among the base deltas these vertices read: a t0 they can all start at."""
    sources = {s for v in vertices for s in phys.plan.ancestors(v) if s.base and s.is_delta}
    if not sources:
        sources = {s for s in phys.vertices if s.base and s.is_delta}
    return min(vertex_ts.read(conns[s.machine], phys.vertices[s].ts_key) for s in sources)


def install_plan(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                 spark: SparkJoins | None = None, unlogged: Persistence = "unlogged"
                 ) -> datetime:
    """Install every vertex of `phys` at the oldest watermark of its sources; with `spark`,
    joined vertices of a plan that joins on Spark are first filled by Spark. `unlogged`: which
    vertices that may be are UNLOGGED (`Persistence`; fewer: a benchmark's baseline)."""
    ours = [v for v in phys.vertices if not v.base]
    t0 = oldest_watermark(conns, phys, ours)
    install_vertices(conns, phys, ours, t0, spark, unlogged)
    register_readers(conns, phys, phys.edges, t0)
    for entry in phys.views:
        create_view(conns[entry.mv.machine], phys, entry)
    return t0


def install_vertices(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                     vertices: Collection[Vertex], t0: datetime,
                     spark: SparkJoins | None = None, unlogged: Persistence = "unlogged"
                     ) -> None:
    """Create and fill `vertices` (not base ones) at t0 and index what joins probe on the
    machines concerned; the relations and deltas that may be, in UNLOGGED tables
    (`may_be_unlogged`), as far as `unlogged` lets them."""
    on_spark = spark is not None and (spark.every_join or any(
        isinstance(e, Join) and e.engine == "spark" for e in phys.edges))
    machines = {v.machine for v in vertices}
    for m in machines:
        ensure_capture_schema(conns[m])
        vertex_ts.settle_reset(conns[m])  # the unlogged relations a crash emptied, marked
    # tables first: the view a Union makes reads its inputs' tables; an aggregate's table is
    # made after its input, whose columns its types come from
    for v in sorted(vertices, key=lambda v: (bool(v.expr.agg), _view_depth(phys, v), v)):
        pv = phys.vertices[v]
        assert not pv.base, f"{v.label} is capture's"
        conn = conns[v.machine]
        light = (unlogged == "unlogged" or (unlogged == "relations" and not v.is_delta)) \
            and may_be_unlogged(phys, v)
        _create(conn, phys, pv, light)
        with conn.transaction():
            if not pv.virtual:
                conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(*pv.table)))
            vertex_ts.put(conn, {pv.ts_key: t0})
            # a Union's view is flagged with the tables behind it (an outer join's may be
            # logged where its own view may not)
            vertex_ts.set_unlogged(conn, [pv.ts_key], light and any(
                persistence(conn, phys.vertices[s].table) == "u" for s in phys.stored(v))
                if pv.virtual else persistence(conn, pv.table) == "u")
        if not pv.is_delta:
            if on_spark and spark is not None and len(v.expr.parts) > 1 and not v.expr.beyond:
                _fill_on_spark(conns, phys, pv, t0, spark)
            else:
                _fill(conns, phys, pv, t0)
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(*pv.table)))
    index_join_keys(conns, phys, machines)


def index_join_keys(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                    machines: Collection[str]) -> None:
    """Index the columns joins probe on every relation vertex of these machines (capture's
    shadows R̂ included): the compensating join and DeltaToRel find rows by them. A relation
    no join probes (an MV) gets one index, on its most distinct column once filled and
    analyzed (`probes.most_distinct`; its join key while that is unknown), kept thereafter."""
    for pv in phys.vertices.values():
        if pv.is_delta or pv.vertex.machine not in machines:
            continue
        conn = conns[pv.vertex.machine]
        keys = phys.join_keys(pv)
        if keys and not pv.base and not phys.probed(pv):
            keys = [_mv_index_column(conn, pv, keys[0])]
        for key in keys:
            conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                sql.Identifier(f"{pv.table[1][:40]}_{key}"[:63]), sql.Identifier(*pv.table),
                sql.Identifier(key)))


def _mv_index_column(conn: psycopg.Connection[Any], pv: PhysicalVertex, fallback: str) -> str:
    """The column an MV's one index is on: the one it has, else its most distinct column."""
    have = index_stats(conn, pv.table).columns
    if have:
        return have[0][0]
    return most_distinct(conn, pv.table, list(pv.names)) or fallback


def uninstall_plan(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                   vertices: Collection[Vertex] | None = None) -> None:
    """Remove what installation made for `vertices` (default: every non-base one of `phys`):
    the consumers' views of MVs among them, their tables and TS, the mirror TS standing in for
    them on source machines and their entries among the delta readers (so retention no longer
    waits for them). Base deltas and shadows stay: capture owns them. Removing again is
    harmless."""
    gone = [v for v in (phys.vertices if vertices is None else vertices) if not v.base]
    for entry in phys.views:
        if entry.mv in gone and entry.mv.machine in conns:
            drop_view(conns[entry.mv.machine], entry.name)
    keys = [phys.vertices[v].ts_key for v in gone] + [mirror_key(v.label) for v in gone]
    for machine in sorted(conns):
        conn = conns[machine]
        with conn.transaction():
            if not vertex_ts.exists(conn):
                continue
            conn.execute("DELETE FROM _smile.delta_readers WHERE reader_vertex = ANY(%s) "
                         "OR delta_vertex = ANY(%s)", (keys, keys))
            vertex_ts.delete(conn, keys)
            retention.forget(conn, keys)
            # views first, those over other views before them: a Union's view depends on its
            # inputs
            for v in sorted(gone, key=lambda v: (-_view_depth(phys, v), v)):
                if v.machine == machine:
                    drop(conn, phys.vertices[v].table)


def _view_depth(phys: PhysicalPlan, v: Vertex) -> int:
    """0 for a table; for the view a Union makes, 1 more than the deepest view it reads (an
    outer join's delta is a view over its inner join's, itself a view)."""
    if not phys.vertices[v].virtual:
        return 0
    edge = phys.incoming(v)
    return 1 + max((_view_depth(phys, s) for s in (edge.sources if edge else ())), default=0)


def drop(conn: psycopg.Connection[Any], table: tuple[str, str]) -> None:
    """Drop a vertex's table or view, whichever it is (none: nothing)."""
    kind = relkind(conn, table)
    if kind is not None:
        conn.execute(sql.SQL("DROP {} {}").format(
            sql.SQL("VIEW" if kind == "v" else "TABLE"), sql.Identifier(*table)))


def materialize(conn: psycopg.Connection[Any], pv: PhysicalVertex) -> bool:
    """Make the view a Union made of `pv` a table holding the same rows, in one transaction
    under a lock on its TS (no Union moves it meanwhile): a re-routed delta is no longer a
    Union's, and its readers still need the rows its view showed (retention kept them in its
    old inputs, which go with the old route). Returns whether there was a view to turn; a
    view whose rows a crash emptied (stale) is refused, its loss not yet made good."""
    with conn.transaction():
        vertex_ts.lock(conn, pv.ts_key)
        if relkind(conn, pv.table) != "v":
            return False
        if vertex_ts.is_stale(conn, pv.ts_key):
            raise StaleRelation(pv.ts_key)
        vertex_ts.set_unlogged(conn, [pv.ts_key], False)  # a logged table from here on
        held = sql.Identifier(pv.table[0], pv.table[1] + "_m")
        conn.execute(sql.SQL("CREATE TABLE {} AS SELECT * FROM {}").format(
            held, sql.Identifier(*pv.table)))
        conn.execute(sql.SQL("DROP VIEW {}").format(sql.Identifier(*pv.table)))
        conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
            held, sql.Identifier(pv.table[1])))
        _index_ts(conn, pv)
    return True


def _create(conn: psycopg.Connection[Any], phys: PhysicalPlan, pv: PhysicalVertex,
            unlogged: bool = False) -> None:
    edge = phys.incoming(pv.vertex)
    if isinstance(edge, Aggregate):  # laid out by its operator, with PostgreSQL's own types
        create_aggregate(conn, aggregate_spec(phys, edge))
        return
    if pv.virtual:
        # a view over the Union's inputs; a table already there (a vertex made before Unions
        # were views) stays one, and the Union then fills it as it always did
        if relkind(conn, pv.table) != "r":
            names = sql.SQL(", ").join(sql.Identifier(c) for c in (*pv.names, "__sign", "__ts"))
            conn.execute(sql.SQL("CREATE OR REPLACE VIEW {} AS {}").format(
                sql.Identifier(*pv.table), sql.SQL(" UNION ALL ").join(
                    sql.SQL("SELECT {} FROM {}").format(names, sql.Identifier(*t))
                    for t in pv.view_of)))
        return
    cols: list[sql.Composable] = [
        sql.SQL("{} {}").format(sql.Identifier(p), sql.SQL(phys.column_type(pv.vertex, c)))
        for c, p in pv.columns]
    if pv.is_delta:
        cols += [sql.SQL("__sign smallint NOT NULL"), sql.SQL("__ts timestamptz NOT NULL")]
    # relations leave room in each page so DeltaToRel's in-place updates can stay on the page
    # (HOT: no index entries to write); deltas are append-only
    storage = sql.SQL("") if pv.is_delta else sql.SQL(" WITH (fillfactor = {})").format(
        sql.Literal(RELATION_FILLFACTOR))
    conn.execute(sql.SQL("CREATE {}TABLE IF NOT EXISTS {} ({}){}").format(
        sql.SQL("UNLOGGED " if unlogged else ""), sql.Identifier(*pv.table),
        sql.SQL(", ").join(cols), storage))
    if pv.is_delta:
        _index_ts(conn, pv)


def _index_ts(conn: psycopg.Connection[Any], pv: PhysicalVertex) -> None:
    """Operators read a delta's slices, and retention its oldest rows, by `__ts`."""
    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (__ts)").format(
        sql.Identifier(f"{pv.table[1]}_ts"), sql.Identifier(*pv.table)))


def base_vertex(phys: PhysicalPlan, relation: str, kind: VertexKind) -> PhysicalVertex:
    """Capture's ΔR or R̂ of a relation the plan reads (R̂ exists whether or not the plan
    reads it: capture keeps it)."""
    home = next(v.machine for v in phys.vertices if v.base and v.expr == Expr.base(relation))
    return physical_vertex(Vertex(kind, Expr.base(relation), home), phys.schemas)


def _base_as_of(phys: PhysicalPlan, part: Part, t0: datetime) -> tuple[str, sql.Composed]:
    """(home machine, query) for what `part` holds of its relation as of t0, columns named
    as the vertex names them."""
    home = base_vertex(phys, part.relation, "relation")
    delta = base_vertex(phys, part.relation, "delta")
    everything = [c for c, _ in phys.schemas[part.relation]]
    inner = as_of_query(rel=home.table, rel_vertex=home.ts_key, delta=delta.table,
                        columns=everything, t=t0)
    outs = sql.SQL(", ").join(sql.SQL("{} AS {}").format(
        sql.Identifier(part.alias, c), sql.Identifier(column_name(part.alias, c)))
        for c in part.columns)
    cond = sql.SQL(" WHERE {}").format(sql.SQL(" AND ".join(f"({w})" for w in part.selections))) \
        if part.selections else sql.SQL("")
    return home.vertex.machine, sql.SQL("SELECT {} FROM ({}) AS {}{}").format(
        outs, inner, sql.Identifier(part.alias), cond)


def stream_rows(src: psycopg.Connection[Any], query: sql.Composable, dst: psycopg.Connection[Any],
                table: sql.Composable, columns: list[str]) -> None:
    """Rows of `query` on `src` into `table` on `dst` by COPY (one connection: INSERT)."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    if src is dst:
        dst.execute(sql.SQL("INSERT INTO {} ({}) {}").format(table, cols, query))
        return
    with src.cursor() as rc, dst.cursor() as wc, \
            rc.copy(sql.SQL("COPY ({}) TO STDOUT").format(query)) as reader, \
            wc.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, cols)) as writer:
        pipe(reader, writer)


def _join_columns(expr: Expr) -> list[tuple[str, str]]:
    """The joins among a vertex's parts as pairs of physical column names."""
    return [(column_name(*column_ref(lhs)), column_name(*column_ref(rhs)))
            for lhs, rhs in expr.joins]


def _part_temps(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, v: Vertex,
                t0: datetime) -> dict[str, str]:
    """Each part of `v` as of t0 in a temporary table on v's machine (dropped at commit),
    columns named as vertices name them; by alias."""
    conn = conns[v.machine]
    temps: dict[str, str] = {}
    for part in v.expr.parts:
        home, query = _base_as_of(phys, part, t0)
        tmp = f"__init_{len(temps)}"
        cols = [column_name(part.alias, c) for c in part.columns]
        conn.execute(sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP").format(
            sql.Identifier(tmp), sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(column_name(part.alias, c)),
                                        sql.SQL(phys.column_type(v, (part.alias, c))))
                for c in part.columns)))
        stream_rows(conns[home], query, conn, sql.Identifier(tmp), cols)
        temps[part.alias] = tmp
    return temps


def _inner(expr: Expr, aliases: list[str], temps: dict[str, str]) -> sql.Composed:
    """The inner join of some of the parts (those of `aliases`) over their temporary tables,
    every column named as vertices name it."""
    keep = set(aliases)
    preds = [sql.SQL("{} = {}").format(sql.Identifier(lhs), sql.Identifier(rhs))
             for (lhs, rhs), pair in zip(_join_columns(expr), expr.joins, strict=True)
             if {column_ref(ref)[0] for ref in pair} <= keep]
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(preds) if preds else sql.SQL("")
    return sql.SQL("SELECT * FROM {}{}").format(
        sql.SQL(", ").join(sql.Identifier(temps[a]) for a in aliases), where)


def _contents(expr: Expr, temps: dict[str, str]) -> sql.Composed:
    """What `expr` (without an aggregation) holds, over its parts' temporary tables: their
    inner join, or with an outer join, its two sides' inner joins outer-joined."""
    if not expr.outer:
        return _inner(expr, list(expr.aliases), temps)
    left = [a for a in expr.aliases if a in expr.outer.left]
    right = [a for a in expr.aliases if a not in expr.outer.left]
    on = sql.SQL(" AND ").join(
        sql.SQL("l.{} = r.{}").format(sql.Identifier(column_name(*column_ref(lhs))),
                                      sql.Identifier(column_name(*column_ref(rhs))))
        for lhs, rhs in expr.outer.predicates)
    return sql.SQL("SELECT * FROM ({}) l {} JOIN ({}) r ON {}").format(
        _inner(expr, left, temps), sql.SQL(expr.outer.kind.upper()), _inner(expr, right, temps),
        on)


def _fill(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, pv: PhysicalVertex,
          t0: datetime) -> None:
    conn = conns[pv.vertex.machine]
    expr = pv.vertex.expr
    with conn.transaction():
        temps = _part_temps(conns, phys, pv.vertex, t0)
        contents = _contents(replace(expr, agg=NO_AGG), temps)
        edge = phys.incoming(pv.vertex)
        if isinstance(edge, Aggregate):
            fill_aggregate(conn, aggregate_spec(phys, edge), sql.SQL("({})").format(contents))
            return
        names = sql.SQL(", ").join(sql.Identifier(p) for p in pv.names)
        conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM ({}) c").format(
            sql.Identifier(*pv.table), names, names, contents))


def fill_at(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, pv: PhysicalVertex,
            t: datetime) -> None:
    """Write `pv`'s contents as of `t` into its (empty) table, from its parts' bases as a
    first fill does, in the caller's transaction (a savepoint in it): a recomputation from
    the bases (`deploy.recompute`)."""
    _fill(conns, phys, pv, t)


def _fill_on_spark(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                   pv: PhysicalVertex, t0: datetime, spark: SparkJoins) -> None:
    reads = {}
    for part in pv.vertex.expr.parts:
        home, query = _base_as_of(phys, part, t0)
        reads[part.alias] = (home, query.as_string(conns[home]))
    fill_on_spark(conns[pv.vertex.machine], spark, pv.vertex.machine, pv.table, reads,
                  _join_columns(pv.vertex.expr), list(pv.columns))


def _reads(e: Edge) -> list[tuple[Vertex, Vertex]]:
    """(delta, reader) for each delta the edge reads rows of after the reader's TS: its
    destination, and for a join also the other side's relation, which the compensation rolls
    forward and back with that delta from TS(X̂) (docs/design/semantics.md §4)."""
    if isinstance(e, (CopyDelta, DeltaToRel)):
        return [(e.src, e.dst)]
    if isinstance(e, Union):
        return [(e.left, e.dst), (e.right, e.dst)]
    if isinstance(e, Pad):  # each side's copy rolls with its delta, after TS(dst) too
        return [(e.left_delta, e.dst), (e.right_delta, e.dst)]
    if isinstance(e, Aggregate):
        return [(e.delta, e.dst)]
    pairs = [(e.delta, e.dst), (e.other_delta, e.dst)]
    if e.other.machine == e.other_delta.machine:
        pairs.append((e.other_delta, e.other))
    return pairs


def _registrations(phys: PhysicalPlan, edges: Iterable[Edge], machine: str | None
                   ) -> Iterator[tuple[PhysicalVertex, str, bool]]:
    """(delta, its reader's key on the delta's machine, whether that is a mirror) for each
    delta the edges read, on `machine` (None: anywhere)."""
    for e in edges:
        if phys.vertices[e.dst].virtual:  # a view holds nothing back: its readers do
            continue
        for read, dst in _reads(e):
            for src in phys.stored(read):  # a view's rows are its inputs': held there
                pv = phys.vertices[src]
                if not pv.is_delta or machine not in (None, src.machine):
                    continue
                remote = dst.machine != src.machine
                yield pv, mirror_key(dst.label) if remote else phys.vertices[dst].ts_key, remote


def reader_pairs(phys: PhysicalPlan, machine: str) -> set[tuple[str, str]]:
    """(delta, reader) keys of every read of a delta on `machine` in the plan that the plan
    answers for: what a version that no longer has them unregisters. A base's shadow R̂ is
    capture's: it reads its ΔR for as long as the relation is captured (registered when it
    is published), whether or not a plan pushes it or joins it in place — forgotten, retention
    would prune ΔR past R̂, which would lose those changes for good."""
    capture = {pv.ts_key for pv in phys.vertices.values() if pv.base and not pv.is_delta}
    return {(pv.ts_key, reader) for pv, reader, _ in _registrations(phys, phys.edges, machine)
            if reader not in capture}


def register_readers(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                     edges: Iterable[Edge], t0: datetime | None,
                     machine: str | None = None, keep_mirrors: bool = False) -> None:
    """Retention keeps a delta's rows (capture's ΔR or an intermediate one) until every vertex
    reading it is past them. A reader on another machine is stood for by a mirror TS on the
    delta's machine, set to t0 for a vertex installed at t0 and to the epoch (holding
    everything) for a vertex that already ran (`t0` None): the first copy after it moves the
    mirror to the vertex's TS. With `machine`, only the deltas on that machine (an agent
    registers what it owns); with `keep_mirrors`, a mirror that exists is left as it is (an
    agent re-registering the running plan's readers when it starts)."""
    for pv, reader, remote in _registrations(phys, edges, machine):
        conn = conns[pv.vertex.machine]
        if remote:
            vertex_ts.put(conn, {reader: HOLD_ALL if t0 is None else t0},
                          on_conflict="keep" if keep_mirrors else "lower")
        conn.execute("INSERT INTO _smile.delta_readers VALUES (%s, %s) ON CONFLICT DO NOTHING",
                     (pv.ts_key, reader))


def unregister_readers(conn: psycopg.Connection[Any], pairs: Collection[tuple[str, str]]
                       ) -> None:
    """Forget these (delta, reader) pairs (a re-routed vertex no longer reads its old source)
    and the mirrors no reader entry names any more."""
    if not pairs:
        return
    deltas, readers = [d for d, _ in pairs], [r for _, r in pairs]
    with conn.transaction():
        conn.execute("DELETE FROM _smile.delta_readers r USING unnest(%s::text[], %s::text[]) "
                     "AS p(d, v) WHERE r.delta_vertex = p.d AND r.reader_vertex = p.v",
                     (deltas, readers))
        conn.execute(f"DELETE FROM {vertex_ts.TABLE} t WHERE t.vertex = ANY(%s) AND t.vertex "
                     "LIKE 'mirror:%%' AND NOT EXISTS (SELECT 1 FROM _smile.delta_readers r "
                     "WHERE r.reader_vertex = t.vertex)", (readers,))


def create_view(conn: psycopg.Connection[Any], phys: PhysicalPlan, entry: SharingEntry) -> None:
    """The consumer's view of its MV: its outputs (an aggregate's over the aggregate's
    columns), and `entry.where` (HAVING, or a predicate above an outer join) as its WHERE."""
    mv = phys.vertices[entry.mv]
    agg = entry.mv.expr.agg
    keep_logged(conn, mv)

    def over_mv(text: str) -> str:
        if agg:
            return over_slots(text, agg)
        return rewrite_columns(text, lambda a, c: (column_name(a, c),))

    exprs = [sql.SQL("{} AS {}").format(sql.SQL(over_mv(text)), sql.Identifier(name))
             for name, text in entry.outputs]
    where = sql.SQL(" WHERE {}").format(sql.SQL(over_mv(entry.where))) if entry.where else \
        sql.SQL("")
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(MV_SCHEMA)))
    conn.execute(sql.SQL("CREATE OR REPLACE VIEW {} AS SELECT {} FROM {}{}").format(
        sql.Identifier(MV_SCHEMA, entry.name), sql.SQL(", ").join(exprs),
        sql.Identifier(*mv.table), where))


def drop_view(conn: psycopg.Connection[Any], sharing: str) -> None:
    conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.Identifier(MV_SCHEMA, sharing)))
