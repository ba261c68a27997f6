"""Advance one vertex of an installed plan to a timestamp by running its incoming edge — the
body of an agent's PUSH(vertex, t). Each operator is idempotent (docs/design/semantics.md §4):
a vertex already at or past t is left alone, so repeated and reordered pushes are harmless.

Must not: decide what to push or when (the executor does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from psycopg.pq import TransactionStatus

from smile.deploy.edge_specs import aggregate_spec, pad_spec
from smile.deploy.install import mirror_key
from smile.deploy.physical import PhysicalPlan, column_ref
from smile.deploy.recompute import run_recompute, run_skip, run_stale
from smile.errors import AgentError
from smile.operators import vertex_ts
from smile.operators.aggregate import aggregate_delta
from smile.operators.copy_delta import copy_delta
from smile.operators.delta_to_rel import delta_to_rel
from smile.operators.join import JoinSpec, Side, join_delta
from smile.operators.join_spark import join_delta_spark
from smile.operators.pad import pad_delta
from smile.operators.rewrite import rewrite_columns
from smile.operators.union import union
from smile.optimizer.plan import Aggregate, CopyDelta, DeltaToRel, Join, Pad, Union

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    import psycopg

    from smile.deploy.spark_jobs import SparkJoins
    from smile.optimizer.plan import Vertex
    from smile.optimizer.recompute import Mode

@dataclass(frozen=True)
class Moved:
    """What one advance did: rows its edge read, rows it wrote, bytes it moved between
    machines (a CopyDelta's COPY stream)."""

    rows_in: int
    rows_out: int
    bytes: int = 0
    spark: bool = False
    """The join ran on Spark: its CPU is the JVM's, not its machine's database's."""
    span: tuple[datetime, datetime] | None = None
    """The TS this advance took the vertex from and to, under its lock: the data its rows are
    (the same twice where it found the vertex there already)."""


def advance_vertex(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, v: Vertex,
                   t: datetime, spark: SparkJoins | None = None,
                   mode: Mode = "incremental") -> Moved:
    """Run v's incoming edge up to t (`mode` "incremental"), or recompute v at t, or skip
    delta v to t, or leave relation v stale at t (`optimizer.recompute`). A join the plan
    puts on Spark runs there when `spark` is given, else on PostgreSQL (the results are the
    same)."""
    e = phys.incoming(v)
    if e is None:
        raise AgentError(f"{v.label} is a source: capture advances it")
    if mode == "recompute":
        fresh = run_recompute(conns, phys, v, t)
        return Moved(fresh.read, fresh.rows, span=(fresh.from_ts, fresh.to_ts))
    if mode == "skip":
        skipped = run_skip(conns, phys, v, t)
        return Moved(0, 0, span=(skipped.from_ts, skipped.to_ts))
    if mode == "stale":
        left = run_stale(conns, phys, v, t)
        return Moved(0, 0, span=(left.from_ts, left.to_ts))
    if isinstance(e, DeltaToRel):
        return _delta_to_rel(conns, phys, e, t)
    if isinstance(e, Union):
        return _union(conns, phys, e, t)
    if isinstance(e, CopyDelta):
        return _copy(conns, phys, e, t)
    if isinstance(e, Pad):
        padded = pad_delta(conns[e.dst.machine], pad_spec(phys, e), t)
        return Moved(padded.read, padded.rows, span=(padded.from_ts, padded.to_ts))
    if isinstance(e, Aggregate):
        done = aggregate_delta(conns[e.dst.machine], aggregate_spec(phys, e), t)
        return Moved(done.read, done.rows, span=(done.from_ts, done.to_ts))
    return _join(conns, phys, e, t, spark)


def _delta_to_rel(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                  e: DeltaToRel, t: datetime) -> Moved:
    src, dst = phys.vertices[e.src], phys.vertices[e.dst]
    applied = delta_to_rel(conns[e.dst.machine], delta=src.table, rel=dst.table,
                           columns=dst.names, rel_vertex=dst.ts_key, delta_vertex=src.ts_key,
                           to_ts=t, probe=phys.probe_column(dst))
    return Moved(applied.read, applied.inserted + applied.deleted,
                 span=(applied.from_ts, applied.to_ts))


def _union(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, e: Union,
           t: datetime) -> Moved:
    dst = phys.vertices[e.dst]
    united = union(conns[e.dst.machine],
                   inputs=[(phys.vertices[s].table, phys.vertices[s].ts_key)
                           for s in (e.left, e.right)],
                   dst_table=dst.table, dst_vertex=dst.ts_key, columns=dst.names, to_ts=t)
    return Moved(united.rows, united.rows, span=(united.from_ts, united.to_ts))


def _copy(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, e: CopyDelta,
          t: datetime) -> Moved:
    src, dst = phys.vertices[e.src], phys.vertices[e.dst]
    here, there = conns[e.src.machine], conns[e.dst.machine]
    if src.base:  # from a base delta: filter and project on the way
        cols = [c for (_, c), _ in dst.columns]
        where = " AND ".join(f"({rewrite_columns(s, lambda a, c: ('d', c))})"
                             for s in e.selection) or None
        done = copy_delta(here, there, src_table=src.table, src_vertex=src.ts_key,
                          dst_table=dst.table, dst_vertex=dst.ts_key, columns=cols,
                          dst_columns=dst.names, to_ts=t, where=where)
    else:  # the destination's columns: a copy may feed a narrower vertex from a wider one
        done = copy_delta(here, there, src_table=src.table, src_vertex=src.ts_key,
                          dst_table=dst.table, dst_vertex=dst.ts_key, columns=dst.names,
                          to_ts=t)
    if e.dst.machine != e.src.machine:  # retention on the source may now release rows
        if here.autocommit and here.info.transaction_status == TransactionStatus.IDLE:
            vertex_ts.raise_to(here, [mirror_key(e.dst.label)], t)  # a transaction of its own
        else:
            with here.transaction():
                vertex_ts.raise_to(here, [mirror_key(e.dst.label)], t)
    return Moved(done.rows, done.rows, done.bytes, span=(done.from_ts, done.to_ts))


def join_spec(phys: PhysicalPlan, e: Join) -> JoinSpec:
    """The physical form of a Join edge: its sides' tables and columns, its predicates and
    filters in physical names."""
    dst = phys.vertices[e.dst]
    left, right = e.dst.expr.left, e.dst.expr.right
    delta_aliases = left if e.delta_side == "left" else (right,)
    other_aliases = (right,) if e.delta_side == "left" else left

    def side(vertex: Vertex, aliases: tuple[str, ...]) -> Side:
        pv = phys.vertices[vertex]
        return Side(pv.table, pv.ts_key, pv.mapping(aliases[0] if pv.base else None))

    d_side = side(e.delta, delta_aliases)
    o_side = side(e.other, other_aliases)
    preds = []
    for lhs, rhs in e.predicates:
        a, b = column_ref(lhs), column_ref(rhs)
        preds.append((a, b) if a in d_side.columns else (b, a))
    filters = tuple(_join_filter(f, d_side, o_side) for f in e.filters)
    return JoinSpec(d_side, o_side, side(e.other_delta, other_aliases), dst.table, dst.ts_key,
                    tuple(preds), tuple(dst.columns), e.delta_side, filters)


def _join_filter(f: str, d_side: Side, o_side: Side) -> tuple[Literal["d", "x"], str]:
    """A join filter in physical names, with the one side it reads."""
    sides: set[Literal["d", "x"]] = set()

    def to_physical(a: str, c: str) -> tuple[str, str]:
        if (a, c) in d_side.columns:
            sides.add("d")
            return "d", d_side.columns[(a, c)]
        sides.add("x")
        return "x", o_side.columns[(a, c)]

    text = rewrite_columns(f, to_physical)
    if len(sides) != 1:
        raise AgentError(f"a join filter must read one side: {f}")
    return sides.pop(), text


def _join(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, e: Join,
          t: datetime, spark: SparkJoins | None) -> Moved:
    conn = conns[e.dst.machine]
    spec = join_spec(phys, e)
    if spark is not None and (e.engine == "spark" or spark.every_join):
        joined = join_delta_spark(conn, spark.dsns[e.dst.machine], spark.session(), spec, t)
        return Moved(joined.read, joined.rows, spark=True,
                     span=(joined.from_ts, joined.to_ts))
    joined = join_delta(conn, spec, t)
    return Moved(joined.read, joined.rows, span=(joined.from_ts, joined.to_ts))


def push_plan(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan, t: datetime,
              spark: SparkJoins | None = None, sharing: str | None = None,
              modes: Mapping[Vertex, Mode] | None = None) -> int:
    """Advance every vertex of the plan (or of one sharing in it) to t, sources first (what
    the executor does over the broker), each in its mode (`optimizer.recompute`; a skipped
    delta after its readers); returns the rows written."""
    mine = phys.plan.of_sharing(sharing) if sharing is not None else None
    modes = modes or {}
    order = [v for v in phys.order() if mine is None or v in mine]
    skipped = [v for v in order if modes.get(v) == "skip"]
    return sum(advance_vertex(conns, phys, v, t, spark, modes.get(v, "incremental")).rows_out
               for v in [*(v for v in order if v not in skipped), *reversed(skipped)])


def mv_ts(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
          sharing: str | None = None) -> datetime:
    """TS of a sharing's MV (by default, the plan's only sharing)."""
    entry = phys.plan.sharing(sharing) if sharing is not None else phys.plan.sharings[0]
    return vertex_ts.read(conns[entry.mv.machine], phys.vertices[entry.mv].ts_key)
