"""Installing a plan on the machines: tables for its vertices, their first contents at one
exact timestamp t0 (by PostgreSQL, or by Spark when the plan joins on Spark), their timestamps,
the readers retention must respect, and the consumer's view of the MV.

t0 is the oldest watermark of the plan's source deltas. A relation vertex (a copy, an
intermediate join, the MV) starts as its expression over the base relations as of t0, each read
from its shadow copy rolled to t0 with its delta and streamed with COPY to the vertex's machine;
deltas start empty. Every vertex's TS is t0. Installing again is harmless (tables are refilled).

Must not: run operators (that is `advance.py`) or choose plans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.agent.physical import PhysicalPlan, PhysicalVertex, aliases_of
from smile.agent.spark_jobs import SparkJoins, fill_on_spark
from smile.delta_capture.registry import ensure_capture_schema
from smile.operators import vertex_ts
from smile.operators.as_of import as_of_query
from smile.operators.rewrite import rewrite_columns
from smile.optimizer.plan import CopyDelta, DeltaToRel, Join

if TYPE_CHECKING:
    from datetime import datetime

    import psycopg

MV_SCHEMA = "smile_mv"
RELATION_FILLFACTOR = 90


def mirror_key(label: str) -> str:
    """The source machine's stand-in for a remote reader's TS (advanced after each copy)."""
    return f"mirror:{label}"


def install_plan(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                 spark: SparkJoins | None = None) -> datetime:
    """Install `phys`; with `spark`, joined vertices of a plan that joins on Spark are first
    filled by Spark."""
    plan = phys.plan
    on_spark = spark is not None and (spark.every_join or any(
        isinstance(e, Join) and e.engine == "spark" for e in plan.edges))
    for conn in conns.values():
        ensure_capture_schema(conn)
    t0 = min(vertex_ts.read(conns[s.machine], phys.vertices[s].ts_key) for s in plan.sources)
    for pv in phys.vertices.values():
        if pv.base:
            probe = phys.probe_column(pv)
            if probe is not None and not pv.is_delta:  # joins and DeltaToRel probe R̂ by key
                conns[pv.vertex.machine].execute(
                    sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                        sql.Identifier(f"{pv.table[1][:40]}_{probe}"),
                        sql.Identifier(*pv.table), sql.Identifier(probe)))
                conns[pv.vertex.machine].execute(
                    sql.SQL("ANALYZE {}").format(sql.Identifier(*pv.table)))
            continue
        conn = conns[pv.vertex.machine]
        _create(conn, phys, pv)
        with conn.transaction():
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(*pv.table)))
            conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s) ON CONFLICT (vertex) "
                         "DO UPDATE SET ts = excluded.ts", (pv.ts_key, t0))
        if not pv.is_delta:
            aliases = aliases_of(pv.vertex.expr, phys.query)
            if on_spark and spark is not None and len(aliases) > 1:
                reads = {}
                for a in aliases:
                    home, query = _base_as_of(phys, a, t0)
                    reads[a] = (home, query.as_string(conns[home]))
                equalities = [(f"{j.left.alias}__{j.left.column}",
                               f"{j.right.alias}__{j.right.column}")
                              for j in phys.query.joins if {j.left.alias, j.right.alias}
                              <= set(aliases)]
                fill_on_spark(conn, spark, pv.vertex.machine, pv.table, reads, equalities,
                              list(pv.columns))
            else:
                _fill(conns, phys, pv, t0)
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(*pv.table)))
    _register_readers(conns, phys, t0)
    _create_view(conns[plan.mv.machine], phys)
    return t0


def uninstall_plan(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan) -> None:
    """Remove what `install_plan` made for this plan: the consumer's view, every non-base
    vertex's table and TS, the mirror TS on source machines and the plan's entries among the
    delta readers (so retention no longer waits for it). Base deltas and shadows stay: capture
    owns them. Removing again is harmless."""
    plan = phys.plan
    conns[plan.mv.machine].execute(sql.SQL("DROP VIEW IF EXISTS {}").format(
        sql.Identifier(MV_SCHEMA, plan.sharing)))
    keys = [pv.ts_key for pv in phys.vertices.values() if not pv.base] + [
        mirror_key(v.label) for v in phys.vertices]
    for machine in sorted({v.machine for v in phys.vertices}):
        conn = conns[machine]
        with conn.transaction():
            conn.execute("DELETE FROM _smile.delta_readers WHERE reader_vertex = ANY(%s)", (keys,))
            conn.execute("DELETE FROM _smile.vertex_ts WHERE vertex = ANY(%s)", (keys,))
            for pv in phys.vertices.values():
                if not pv.base and pv.vertex.machine == machine:
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(
                        sql.Identifier(*pv.table)))


def _create(conn: psycopg.Connection[Any], phys: PhysicalPlan, pv: PhysicalVertex) -> None:
    cols: list[sql.Composable] = [
        sql.SQL("{} {}").format(sql.Identifier(p), sql.SQL(phys.column_types[c]))
        for c, p in pv.columns]
    if pv.is_delta:
        cols += [sql.SQL("__sign smallint NOT NULL"), sql.SQL("__ts timestamptz NOT NULL")]
    # relations leave room in each page so DeltaToRel's in-place updates can stay on the page
    # (HOT: no index entries to write); deltas are append-only
    storage = sql.SQL("") if pv.is_delta else sql.SQL(" WITH (fillfactor = {})").format(
        sql.Literal(RELATION_FILLFACTOR))
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}){}").format(
        sql.Identifier(*pv.table), sql.SQL(", ").join(cols), storage))
    if pv.is_delta:
        conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (__ts)").format(
            sql.Identifier(f"{pv.table[1]}_ts"), sql.Identifier(*pv.table)))
    else:  # index the join keys a compensating join probes
        keys = {p for (alias, c), p in pv.columns
                for j in phys.query.joins for side in (j.left, j.right)
                if (side.alias, side.column) == (alias, c)}
        for k in sorted(keys):
            conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                sql.Identifier(f"{pv.table[1]}_{k}"), sql.Identifier(*pv.table),
                sql.Identifier(k)))


def _base_as_of(phys: PhysicalPlan, alias: str, t0: datetime) -> tuple[str, sql.Composed]:
    """(home machine, query) for σπ(R_alias(t0)), columns named alias__column."""
    q = phys.query
    rel = q.relation_of(alias)
    home = next(v for v in phys.vertices.values() if v.base and v.vertex.expr == rel
                and not v.is_delta)
    delta = next(v for v in phys.vertices.values() if v.base and v.vertex.expr == rel
                 and v.is_delta)
    inner = as_of_query(rel=home.table, rel_vertex=home.ts_key, delta=delta.table,
                        columns=phys.relation_columns[rel], t=t0)
    needed = sorted(q.needed_columns(alias)) or [phys.relation_columns[rel][0]]
    outs = sql.SQL(", ").join(sql.SQL("{} AS {}").format(sql.Identifier(alias, c),
                                                         sql.Identifier(f"{alias}__{c}"))
                              for c in needed)
    where = [s.sql for s in q.selections_of(alias)]  # over `alias`, as the subquery is named
    cond = sql.SQL(" WHERE {}").format(sql.SQL(" AND ".join(f"({w})" for w in where))) \
        if where else sql.SQL("")
    return home.vertex.machine, sql.SQL("SELECT {} FROM ({}) AS {}{}").format(
        outs, inner, sql.Identifier(alias), cond)


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
        for chunk in reader:
            writer.write(chunk)


def _fill(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, pv: PhysicalVertex,
          t0: datetime) -> None:
    conn = conns[pv.vertex.machine]
    aliases = aliases_of(pv.vertex.expr, phys.query)
    with conn.transaction():
        temps = {}
        for a in aliases:
            home, query = _base_as_of(phys, a, t0)
            tmp = f"__init_{a}"
            cols = [p for (al, _), p in pv.columns if al == a]
            conn.execute(sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {} FROM {} "
                                 "WITH NO DATA").format(
                sql.Identifier(tmp), sql.SQL(", ").join(sql.Identifier(c) for c in cols),
                sql.Identifier(*pv.table)))
            stream_rows(conns[home], query, conn, sql.Identifier(tmp), cols)
            temps[a] = tmp
        preds = [sql.SQL("{} = {}").format(
            sql.Identifier(temps[j.left.alias], f"{j.left.alias}__{j.left.column}"),
            sql.Identifier(temps[j.right.alias], f"{j.right.alias}__{j.right.column}"))
            for j in phys.query.joins if {j.left.alias, j.right.alias} <= set(aliases)]
        outs = sql.SQL(", ").join(sql.Identifier(temps[a], p) for (a, _), p in pv.columns)
        where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(preds) if preds else sql.SQL("")
        conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}{}").format(
            sql.Identifier(*pv.table), sql.SQL(", ").join(sql.Identifier(p) for p in pv.names),
            outs, sql.SQL(", ").join(sql.Identifier(t) for t in temps.values()), where))


def _register_readers(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                      t0: datetime) -> None:
    """Retention keeps a base delta's rows until every vertex reading it is past them."""
    for e in phys.plan.edges:
        reads = [e.src] if isinstance(e, (CopyDelta, DeltaToRel)) else (
            [e.delta, e.other_delta] if isinstance(e, Join) else [])
        for src in reads:
            pv = phys.vertices[src]
            if not (pv.base and pv.is_delta):
                continue
            conn = conns[src.machine]
            reader = phys.vertices[e.dst].ts_key
            if e.dst.machine != src.machine:
                reader = mirror_key(e.dst.label)
                conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s) ON CONFLICT (vertex) "
                             "DO UPDATE SET ts = excluded.ts", (reader, t0))
            conn.execute("INSERT INTO _smile.delta_readers VALUES (%s, %s) ON CONFLICT DO NOTHING",
                         (pv.ts_key, reader))


def _create_view(conn: psycopg.Connection[Any], phys: PhysicalPlan) -> None:
    mv = phys.vertices[phys.plan.mv]
    exprs = [sql.SQL("{} AS {}").format(
        sql.SQL(rewrite_columns(p.sql, lambda a, c: (f"{a}__{c}",)) if p.alias else p.sql),
        sql.Identifier(p.name)) for p in phys.query.projections]
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(MV_SCHEMA)))
    conn.execute(sql.SQL("CREATE OR REPLACE VIEW {} AS SELECT {} FROM {}").format(
        sql.Identifier(MV_SCHEMA, phys.plan.sharing), sql.SQL(", ").join(exprs),
        sql.Identifier(*mv.table)))
