"""Plans for queries beyond SPJ (docs/design/beyond_spj.md): their SPJ parts planned by
DPD/DPT like any sharing, the new edges added on the MV's machine.

- An aggregate over an SPJ core: the core's plan, its MV's machine the aggregate's; an
  `Aggregate` edge reads the core's delta there, and its relation only when the aggregation
  keeps a min or max (otherwise the core's relation, and the DeltaToRel keeping it, go).
- An outer join `L ⟕ R`: three SPJ plans to one machine — the inner join `L ⋈ R` (its delta),
  `L` and `R` (each a relation with its delta); a `Pad` edge makes the padded rows' delta,
  a `Union` of the two the outer join's delta, a `DeltaToRel` its relation (the MV, or the
  input of an aggregate on top).

Each part's plan fits the capacity left on its own; the whole is priced again by
`dp_evaluate.evaluate` (critical path, COST) and held to the capacity once more.

Must not: touch a database.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from smile.optimizer.dp import Planned, optimize
from smile.optimizer.dp_context import Context
from smile.optimizer.dp_evaluate import evaluate, reaching
from smile.optimizer.estimate import Estimates
from smile.optimizer.expr import AggPlan, Expr, OuterPlan
from smile.optimizer.plan import Aggregate, DeltaToRel, Edge, Pad, Plan, Union, Vertex
from smile.optimizer.sharing import ColRef, SpjQuery

if TYPE_CHECKING:
    from smile.costmodel.prices import Prices
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.dp_context import Reuse
    from smile.optimizer.sharing import Aggregation, OuterJoin, Query, Sharing

Metric = Literal["time", "dollar"]


def plan_query(catalog: CatalogSnapshot, query: Query, sharing: Sharing, model: TimeModel,
               metric: Metric, prices: Prices, kept: frozenset[Vertex] = frozenset(),
               reuse: Reuse | None = None, fast: bool = True) -> Planned | None:
    """DPT (`metric='time'`) or DPD (`'dollar'`) for `query`; None when no plan fits."""
    inner = optimize(catalog, query.core, sharing, model, metric, prices, kept, reuse, fast)
    if inner is None:
        return None
    machine = inner.plan.mv.machine
    pinned = replace(sharing, mv_machine=machine)
    edges: dict[Edge, None] = dict.fromkeys(inner.plan.edges)
    sources = set(inner.plan.sources)
    delta, rel = _kept(inner.plan)
    expr = inner.plan.mv.expr
    if query.outer is not None:
        sides = []
        for aliases in (query.outer.left, query.outer.right):
            part = optimize(catalog, _side(query.core, aliases), pinned, model, metric, prices,
                            kept, reuse, fast)
            if part is None:
                return None
            edges.update(dict.fromkeys(part.plan.edges))
            sources |= set(part.plan.sources)
            sides.append(_kept(part.plan))
        delta, rel, expr = _outer(edges, expr, delta, sides, query.outer, machine)
    mv = rel
    if query.aggregate is not None:
        mv = _aggregate(edges, expr, delta, rel, query, catalog)
    plan = reaching(Plan(sharing.name, tuple(edges), mv, tuple(sorted(sources)),
                         _outputs(query), _where(query)))
    return _priced(plan, catalog, query, sharing, model, prices, kept, reuse, fast)


def _kept(plan: Plan) -> tuple[Vertex, Vertex]:
    """(delta, relation) of a plan's MV on its machine: the relation and the delta it is
    kept from."""
    into = next(e for e in plan.edges if e.dst == plan.mv)
    assert isinstance(into, DeltaToRel), f"{plan.mv.label} is not kept from its delta"
    return into.src, plan.mv


def _side(core: SpjQuery, aliases: frozenset[str]) -> SpjQuery:
    """The SPJ query of one side of an outer join: its relations, the joins and selections
    among them, every column the whole query needs of them."""
    reads = frozenset(ColRef(a, c) for a in aliases for c in core.needed_columns(a))
    return SpjQuery(tuple(r for r in core.relations if r.alias in aliases),
                    tuple(j for j in core.joins if j.aliases() <= aliases),
                    tuple(s for s in core.selections if s.alias in aliases), (), core.sql,
                    reads)


def _outer(edges: dict[Edge, None], expr: Expr, inner_delta: Vertex,
           sides: list[tuple[Vertex, Vertex]], outer: OuterJoin, machine: str
           ) -> tuple[Vertex, Vertex, Expr]:
    """The outer join's vertices and edges, on `machine`: (its delta, its relation, what
    they hold)."""
    left = tuple(sorted(outer.left))
    preds = tuple(sorted(
        (j.left.sql(), j.right.sql()) if j.left.alias in outer.left else
        (j.right.sql(), j.left.sql()) for j in outer.predicates))
    plan = OuterPlan(outer.kind, left, preds)
    whole = replace(expr, outer=plan)
    pad = Vertex("delta", replace(whole, pad=True), machine)
    delta = Vertex("delta", whole, machine)
    rel = Vertex("relation", whole, machine)
    rate_in = sum(_rate(edges, d) for d, _ in sides)
    inner_rate = _rate(edges, inner_delta)
    padded = Pad(sides[0][0], sides[0][1], sides[1][0], sides[1][1], pad, rate_in, rate_in)
    union = Union(inner_delta, pad, delta, inner_rate + rate_in)
    stored = sum(_stored(edges, r) for _, r in sides) + _stored(edges, _rel_of(edges,
                                                                                 inner_delta))
    keep = DeltaToRel(delta, rel, inner_rate + rate_in, stored)
    # the inner join's own relation is not kept: its delta feeds the union
    for e in [e for e in edges if isinstance(e, DeltaToRel) and e.src == inner_delta]:
        del edges[e]
    edges.update(dict.fromkeys((padded, union, keep)))
    return delta, rel, whole


def _aggregate(edges: dict[Edge, None], expr: Expr, delta: Vertex, rel: Vertex, query: Query,
               catalog: CatalogSnapshot) -> Vertex:
    """The Aggregate edge over `delta` (and `rel`, to recompute an extreme) on their machine;
    the relation and the DeltaToRel keeping it go when it keeps no min or max."""
    agg = query.aggregate
    assert agg is not None
    plan = _agg_plan(agg, query)
    dst = Vertex("relation", replace(expr, agg=plan), delta.machine)
    rate = _rate(edges, delta)
    if not plan.extreme:
        for e in [e for e in edges if isinstance(e, DeltaToRel) and e.dst == rel]:
            del edges[e]
    groups = _groups(agg, query, catalog)
    edges[Aggregate(delta, rel if plan.extreme else None, dst, min(rate, groups), rate,
                    groups * plan.group_bytes)] = None
    return dst


def _agg_plan(agg: Aggregation, query: Query) -> AggPlan:
    return AggPlan(tuple(k.sql() for k in agg.group_by),
                   tuple((c.func, c.arg or "", c.distinct) for c in agg.calls),
                   tuple(p.sql for p in query.above), agg.global_, agg.distinct_rows)


def _groups(agg: Aggregation, query: Query, catalog: CatalogSnapshot) -> float:
    """How many groups the aggregate keeps: the product of its keys' distinct values, at
    most one per input row (1 for a global aggregate)."""
    if agg.global_:
        return 1.0
    n = 1.0
    for k in agg.group_by:
        relation = query.core.relation_of(k.alias)
        n *= catalog.relation(relation).column(k.column).n_distinct
    rows = Estimates(catalog, query.core).stats(frozenset(query.core.aliases)).rows
    return max(1.0, min(n, rows))


def _rate(edges: dict[Edge, None], v: Vertex) -> float:
    return next((e.tuples_per_s for e in edges if e.dst == v), 0.0)


def _rel_of(edges: dict[Edge, None], delta: Vertex) -> Vertex | None:
    return next((e.dst for e in edges if isinstance(e, DeltaToRel) and e.src == delta), None)


def _stored(edges: dict[Edge, None], rel: Vertex | None) -> float:
    return next((e.stored_bytes for e in edges if isinstance(e, DeltaToRel) and e.dst == rel),
                0.0)


def _outputs(query: Query) -> tuple[tuple[str, str], ...]:
    if query.aggregate is not None:
        return query.aggregate.outputs
    return tuple((p.name, p.sql) for p in query.core.projections)


def _where(query: Query) -> str:
    if query.aggregate is not None:
        return query.aggregate.having or ""
    return " AND ".join(f"({p.sql})" for p in query.above)


def _priced(plan: Plan, catalog: CatalogSnapshot, query: Query, sharing: Sharing,
            model: TimeModel, prices: Prices, kept: frozenset[Vertex], reuse: Reuse | None,
            fast: bool) -> Planned | None:
    """The composed plan priced as a whole, if it fits the capacity left."""
    est = Estimates(catalog, query.core)
    held = kept | (reuse.d.vertices if reuse is not None else frozenset())
    metrics = evaluate(plan, catalog, sharing, model, est, prices, held)
    ctx = Context(catalog, query.core, sharing, model, prices, reuse, cached=fast)
    if not ctx.fits(ctx.flat(metrics.usage)) or not math.isfinite(metrics.cp_s):
        return None
    added = None if reuse is None else evaluate(plan, catalog, sharing, model, est, prices,
                                                held, reuse.d.vertices).cost
    return Planned(plan, metrics, metrics.cp_s, metrics.resource_cost, metrics.usage, added)
