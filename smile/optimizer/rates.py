"""Rates re-estimated: the global plan D with every edge's tuples per second (and every
relation's size) recomputed from a newer catalog snapshot — the relations' change rates
measured while traffic runs — so loads and costs follow the traffic D actually sees.

Every edge carries its destination's delta rate, and what a vertex holds says how that rate
follows from the base relations (`estimate.Estimates` over the vertex's own parts, joins and
selections): Δ(σπ⋈R) for a relation or delta, ΔL·|X|·sel or |L|·ΔX·sel for a partial delta
driven by its left or right input — unless the catalog carries the rate measured for that
computation on the running plan (`CatalogSnapshot.observed`), which wins: uniform statistics
miss skew (the users whose rows change most are those who tweet most).

A relation's size is its rows times its width, a join's rows with skew counted
(`Estimates.stored_rows`): the uniform estimate puts `loc ⋈ tweets` at a 580th of its rows,
and a recomputation of it is charged what it writes (`recompute_load`).

A join also carries the rate of the delta that drives it (`Join.rows_in_per_s`): its time
follows the rows it reads as well as those it writes (`plan.edge_tuples`).

Must not: touch a database; the snapshot is handed in.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING

from smile.optimizer.estimate import Estimates
from smile.optimizer.expr import split_ref
from smile.optimizer.plan import DeltaToRel, Join
from smile.optimizer.sharing import ColRef, JoinPredicate, Projection, RelRef, Selection, SpjQuery

if TYPE_CHECKING:
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.expr import Expr
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.plan import Edge, Vertex


def query_of(expr: Expr) -> SpjQuery:
    """The SPJ query that computes what `expr` holds (its whole join)."""
    joins = tuple(sorted(JoinPredicate(*sorted((ColRef(*split_ref(lhs)), ColRef(*split_ref(rhs)))))
                         for lhs, rhs in expr.joins))
    return SpjQuery(
        tuple(RelRef(p.alias, p.relation) for p in expr.parts), joins,
        tuple(Selection(p.alias, text, frozenset()) for p in expr.parts for text in p.selections),
        tuple(Projection(f"{p.alias}.{c}", f'"{p.alias}"."{c}"', p.alias, frozenset({c}))
              for p in expr.parts for c in p.columns))


def rerate(plan: GlobalPlan, catalog: CatalogSnapshot) -> GlobalPlan:
    """D with its edges' rates and sizes from `catalog` (same vertices, same edges); an edge
    over a relation the catalog does not have (its machine being detached) keeps its own."""

    @cache
    def estimates(expr: Expr) -> Estimates:
        return Estimates(catalog, query_of(expr))

    def rate_and_rows(expr: Expr) -> tuple[float, float, float]:
        if expr.raw:
            rel = catalog.relation(expr.parts[0].relation)
            return rel.update_rate, rel.rows, float(rel.width)
        whole = expr.whole()
        est = estimates(whole)
        everything = frozenset(whole.aliases)
        stats = est.stats(everything)
        if not expr.driving:
            return stats.rate, est.stored_rows(everything), stats.width
        left = frozenset(expr.left)
        rate = (est.driving_left(left, expr.right) if expr.driving == "left"
                else est.driving_right(left, expr.right))
        return rate, stats.rows, stats.width

    observed = dict(catalog.observed)
    known = {r.name for r in catalog.relations}
    edges: list[Edge] = []
    for e in plan.edges:
        if any(p.relation not in known for p in e.dst.expr.parts):
            edges.append(e)  # over a relation of a machine the catalog lost: as it was
            continue
        rate, rows, width = rate_and_rows(e.dst.expr)
        seen = observed.get(e.dst.computation)
        rate = rate if seen is None else seen
        if isinstance(e, DeltaToRel):
            edges.append(replace(e, tuples_per_s=rate, stored_bytes=rows * width))
        else:
            edges.append(replace(e, tuples_per_s=rate))
    rated = replace(plan, edges=tuple(edges))
    return replace(rated, edges=tuple(
        replace(e, rows_in_per_s=delta_rate(rated, catalog, e.delta)) if isinstance(e, Join)
        else e for e in rated.edges))


def delta_rate(plan: GlobalPlan, catalog: CatalogSnapshot, v: Vertex) -> float:
    """Rows per second delta vertex `v` of D receives: its incoming edge's, or for a captured
    base delta its relation's change rate."""
    if v in plan.incoming:
        return plan.incoming[v].tuples_per_s
    return catalog.relation(v.expr.parts[0].relation).update_rate
