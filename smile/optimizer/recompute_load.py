"""What the load model charges a sharing whose pushes can recompute: the cheaper of its two
paths (`optimizer.recompute`), at its push period.

Per sharing, the vertices its push advances and no other sharing needs are priced both ways:
incrementally, the load their edges were charged (their lines at the sharing's rates, once per
push); by recomputation, each relation vertex's `recompute` line at its size, once per push
(the skipped deltas, and the join steps a push recomputing them all leaves stale, at the
`skip` line's fixed work). Where recomputing costs less, those edges are
charged that — scaled down together, each keeping its machine — and the sharing is said to be
charged by recompute (`Assessment.recomputed`), which is how admission lets in a sharing like
S14 (`loc ⋈ tweets`, whose delta grows as rate² × time) once recomputing it fits. Vertices
other sharings also need keep their incremental charge: their pushes advance them anyway, and
so does every member of a consistent group (a group's pushes always apply deltas).

Sizes are the catalog's: a base relation's rows; a kept relation's stored bytes (as D's edges
were last rated, `rates.rerate`: a join's with skew counted) over the width of the columns it
keeps; an aggregate's groups (its stored bytes over a group's).

Must not: touch a database, or change D.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from smile.optimizer.plan import Aggregate, DeltaToRel, Edge, Vertex
from smile.optimizer.recompute import (
    Recompute,
    recompute_key,
    recompute_modes,
    recompute_tuples,
    recomputes,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.global_plan import GlobalPlan


def catalog_rows(plan: GlobalPlan, catalog: CatalogSnapshot) -> Callable[[Vertex], float]:
    """Rows of a relation vertex by the catalog (see the module)."""

    def width(v: Vertex) -> float:
        """Bytes of a row of `v`: of the columns it keeps, as its stored bytes count them."""
        total = 0.0
        for p in v.expr.parts:
            try:
                rel = catalog.relation(p.relation)
                total += float(sum(rel.column(c).width for c in p.columns) if p.columns
                               else rel.width)
            except Exception:  # a relation (or column) the snapshot lacks: a typical row
                total += 64.0
        return max(total, 1.0)

    @cache  # one estimate per vertex for the whole assessment
    def rows(v: Vertex) -> float:
        if v.expr.raw:
            try:
                return float(catalog.relation(v.expr.parts[0].relation).rows)
            except Exception:
                return 0.0
        e = plan.incoming.get(v)
        if isinstance(e, Aggregate):  # its groups
            return e.stored_bytes / v.expr.agg.group_bytes
        if isinstance(e, DeltaToRel):
            return e.stored_bytes / width(v)
        return 0.0

    return rows


def cheaper_charges(plan: GlobalPlan, catalog: CatalogSnapshot, model: TimeModel,
                    pushes: Callable[[str], float], loads: dict[Edge, float]
                    ) -> tuple[dict[Edge, float], frozenset[str]]:
    """The edges whose charge recomputing lowers, with their new load, and the sharings
    charged by recompute (`pushes(s)`: pushes per second of sharing `s`)."""
    rec = recomputes(plan)
    if not rec:
        return {}, frozenset()
    rows = catalog_rows(plan, catalog)
    shr = plan.shr
    most = _incremental_bounds(plan, shr, loads)
    changed: dict[Edge, float] = {}
    charged: set[str] = set()
    for s in plan.sharings:
        if s.mv not in rec or s.group:  # a group's pushes always apply deltas
            continue
        if shr.get(s.mv, frozenset()) == {s.name} and _seconds(
                model, rec[s.mv], rows) * pushes(s.name) >= most.get(s.name, 0.0):
            continue  # recomputing its own MV alone costs what all its edges are charged
        todo = plan.advanced_by([s.mv])
        modes = recompute_modes(plan, todo)
        own = [v for v, m in modes.items() if m != "incremental"
               and shr.get(v, frozenset()) == {s.name}]
        if not any(modes[v] == "recompute" for v in own):
            continue
        edges = [plan.incoming[v] for v in own]
        incremental = sum(loads.get(e, 0.0) for e in edges)
        per_push = sum(_seconds(model, rec[v], rows) if modes[v] == "recompute"
                       else model.line("skip").a for v in own)
        by_recompute = per_push * pushes(s.name)
        if by_recompute < incremental and incremental > 0:
            factor = by_recompute / incremental
            for e in edges:
                changed[e] = loads.get(e, 0.0) * factor
            charged.add(s.name)
    return changed, frozenset(charged)


def _seconds(model: TimeModel, r: Recompute, rows: Callable[[Vertex], float]) -> float:
    """The operator seconds one recomputation of `r.dst` is charged (its dispatch apart)."""
    return model.seconds("recompute", recompute_tuples(r, rows),
                         recompute_key(r.dst.label)) - model.dispatch_s


def _incremental_bounds(plan: GlobalPlan, shr: dict[Vertex, frozenset[str]],
                        loads: dict[Edge, float]) -> dict[str, float]:
    """Per sharing, the load of every edge it is served by: at least what its own edges are
    charged incrementally. A sharing whose own MV's recomputation alone costs as much is not
    looked at further (the check is cheap; the modes of its push are not)."""
    most: dict[str, float] = {}
    for e in plan.edges:
        load = loads.get(e, 0.0)
        for name in shr.get(e.dst, frozenset()):
            most[name] = most.get(name, 0.0) + load
    return most
