"""Plumbing (paper §7.1) and greedy hill-climbing (§7.2) over the global plan D.

A plumbing re-routes one destination vertex `DST` of D: it gets its tuples through new edges
from vertices D already has (`SRC`), and whatever only fed DST's old route is removed. Since a
vertex's contents never depend on its route (NOTES §8), any route that computes the same thing
is exact. Two kinds, as in the paper:

- **copy plumbing**: DST, a delta (or partial delta), is fed by a CopyDelta from another delta
  of D holding at least its rows and columns (`Expr.covers`), on any machine;
- **join plumbing**: DST, a partial delta Δ(ΔL⋈X) or Δ(L⋈ΔX), is computed by a Join where a
  relation of D holding its other side lives, from the driving delta there (copied there when
  D has it only elsewhere), the result copied to DST when DST lives elsewhere.

Each candidate carries, computed on the D it was found in: what it adds and removes, its
benefit in $/s (the removed edges' dollars minus the added edges' — the paper's definition —
minus what the edges feeding its source cost more once they serve DST's sharings too: pushed
for them as well, over-provisioned for the most demanding), its change of load per machine,
and what it reads. Hill-climbing applies the best feasible one
(positive benefit, no sharing's critical path above its SLA, no machine over its bound),
checks that COST(D) really fell, and goes on until nothing applies. `ilp.py` solves the same
candidates exactly, as the reference that measures the greedy's gap: both read the same
candidates, benefits, times and conflicts.

Must not: touch a database; D in, a new D out (the old one is never changed).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from smile.costmodel.formulas import edge_load
from smile.costmodel.prices import Prices
from smile.errors import PlanError
from smile.optimizer.load import assess, raised
from smile.optimizer.plan import (
    CopyDelta,
    DeltaToRel,
    Expr,
    Join,
    Vertex,
    edge_kind,
    edge_seconds,
    edge_tuples,
    join_tuples,
    ref_alias,
)
from smile.optimizer.rates import delta_rate

if TYPE_CHECKING:
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.load import Assessment
    from smile.optimizer.plan import Edge

EPS = 1e-15


@dataclass(frozen=True)
class Plumbing:
    kind: Literal["copy", "join"]
    dst: Vertex
    new_edges: tuple[Edge, ...]
    new_vertices: frozenset[Vertex]
    removed_edges: frozenset[Edge]
    removed_vertices: frozenset[Vertex]
    needs: frozenset[Vertex]
    """Vertices of D the new edges read."""
    benefit: float
    """$/s saved, on the D it was found in."""
    dload: dict[str, float] = field(compare=False, hash=False)
    """machine → change of its load (core-seconds per second)."""

    def describe(self) -> str:
        via = ", ".join(sorted(v.label for v in self.needs))
        return f"{self.kind} plumbing: {self.dst.label} from {via}"


@dataclass(frozen=True)
class Context:
    """What plumbing needs besides D: the catalog (machines, widths), time model and prices."""

    catalog: CatalogSnapshot
    model: TimeModel
    prices: Prices = field(default_factory=Prices)

    def width(self, v: Vertex) -> float:
        total = 0.0
        for p in v.expr.parts:
            rel = self.catalog.relation(p.relation)
            total += rel.width if p.raw else sum(rel.column(c).width for c in p.columns)
        return total or 8.0


def _edge_cost(ctx: Context, a: Assessment, e: Edge, serves: frozenset[str]
               ) -> tuple[float, float]:
    """(load, $/s) of an edge that would serve `serves`, under assessment `a` (as `load.assess`
    prices the edges of D)."""
    line = ctx.model.edge_line(edge_kind(e), e.dst.label)
    pushes = a.pushes(serves)
    load = edge_load(line.a, line.b, edge_tuples(e), pushes)
    m = ctx.catalog.machine(e.dst.machine)
    dollars = load * ctx.prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)
    if isinstance(e, CopyDelta) and e.crosses_machines:
        dollars += e.tuples_per_s * e.bytes_per_tuple * ctx.prices.network_per_byte()
    if isinstance(e, DeltaToRel):
        dollars += e.stored_bytes * ctx.prices.storage_per_byte_second()
    provision = max((a.cps[s] / a.slas[s] for s in serves), default=0.0)
    return load, dollars * (1.0 + provision)


def _copy_edge(src: Vertex, dst: Vertex, rate: float, width: float) -> CopyDelta:
    if src.expr.raw and not dst.expr.raw:  # from the base as captured: filter and project
        part = dst.expr.parts[0]
        return CopyDelta(src, dst, rate, width, part.selections, part.columns)
    return CopyDelta(src, dst, rate, width)


def _dead_after(plan: GlobalPlan, dst: Vertex, keep: set[Vertex]) -> set[Vertex]:
    """Ancestors of `dst` that would feed nothing once `dst` no longer reads its current
    route (and the new route reads `keep`, which stays with its ancestors)."""
    old = plan.ancestors(dst)
    live_src = set(keep)
    for k in keep:
        live_src |= plan.ancestors(k)
    memo: dict[Vertex, bool] = {}
    old_in = plan.incoming[dst]

    def live(u: Vertex) -> bool:
        if u in memo:
            return memo[u]
        memo[u] = True  # DAG: no cycles, the provisional value is never read back wrongly
        if u in live_src or u not in old:
            return True
        ok = any(live(e.dst) for e in plan.outgoing.get(u, ()) if e is not old_in)
        memo[u] = ok
        return ok

    return {u for u in old if not live(u)}


def _make(ctx: Context, plan: GlobalPlan, a: Assessment, kind: Literal["copy", "join"],
          dst: Vertex, new_edges: list[Edge]) -> Plumbing | None:
    new_vertices = frozenset(e.dst for e in new_edges if e.dst != dst)
    needs = frozenset(s for e in new_edges for s in e.sources if s not in new_vertices)
    desc = plan.descendants(dst) | {dst}
    if needs & desc:
        return None  # a cycle
    old = plan.incoming[dst]
    if len(new_edges) == 1 and new_edges[0] == old:
        return None
    dead = _dead_after(plan, dst, set(needs))
    removed = {old} | {plan.incoming[u] for u in dead if u in plan.incoming}
    serves = plan.shr.get(dst, frozenset())
    dload: dict[str, float] = defaultdict(float)
    saved = 0.0
    for e in removed:
        saved += a.edge_cost[e]
        dload[e.dst.machine] -= a.edge_load[e]
    for e in new_edges:
        load, dollars = _edge_cost(ctx, a, e, serves)
        saved -= dollars
        dload[e.dst.machine] += load
    # what feeds the new route now serves DST's sharings too: pushed for them as well, and
    # over-provisioned for the most demanding of them
    upstream = set(needs)
    for u in needs:
        upstream |= plan.ancestors(u)
    shr = plan.shr
    for u in upstream:
        feed = plan.incoming.get(u)
        grown = shr.get(u, frozenset()) | serves
        if feed is None or feed in removed or grown == shr.get(u, frozenset()):
            continue
        load, dollars = _edge_cost(ctx, a, feed, grown)
        saved -= dollars - a.edge_cost[feed]
        dload[feed.dst.machine] += load - a.edge_load[feed]
    return Plumbing(kind, dst, tuple(new_edges), new_vertices, frozenset(removed),
                    frozenset(dead), needs, saved, dict(dload))


def candidates(plan: GlobalPlan, ctx: Context, a: Assessment | None = None) -> list[Plumbing]:
    """Every copy and join plumbing of D with a positive benefit, best first."""
    a = a or assess(plan, ctx.catalog, ctx.model, ctx.prices)
    deltas: dict[tuple[object, ...], list[Vertex]] = defaultdict(list)
    relations: dict[tuple[object, ...], list[Vertex]] = defaultdict(list)
    for v in plan.vertices:
        key = _shape(v.expr)
        if v.kind in ("delta", "partial"):
            deltas[(v.kind, *key)].append(v)
        elif v.kind == "relation" and v in plan.incoming:
            relations[key].append(v)
    out: list[Plumbing] = []
    arrive = plan.arrivals(ctx.model)
    for dst in sorted(plan.incoming):
        if dst.base or dst.kind not in ("delta", "partial"):
            continue
        rate = plan.incoming[dst].tuples_per_s
        width = ctx.width(dst)
        for src in _covering(deltas, dst.kind, dst.expr):
            if src == dst:
                continue
            p = _make(ctx, plan, a, "copy", dst, [_copy_edge(src, dst, rate, width)])
            if p is not None and p.benefit > EPS:
                out.append(p)
        if dst.kind == "partial":
            for new_edges in _join_routes(plan, ctx, deltas, relations, dst, rate, width,
                                          arrive):
                p = _make(ctx, plan, a, "join", dst, new_edges)
                if p is not None and p.benefit > EPS:
                    out.append(p)
    out.sort(key=lambda p: (-p.benefit, p.dst.label, p.describe()))
    return out


def _shape(expr: Expr) -> tuple[object, ...]:
    """What must be equal for one vertex to cover another (all but the kept columns)."""
    return (tuple((p.alias, p.relation, p.selections) for p in expr.parts), expr.joins,
            expr.left, expr.driving)


def covering(plan: GlobalPlan, kind: str, expr: Expr) -> list[Vertex]:
    """The vertices of `kind` in D that hold at least what `expr` holds — the same relations,
    joins and selections with at least its columns, or the base relation as captured."""
    index: dict[tuple[object, ...], list[Vertex]] = defaultdict(list)
    for v in plan.vertices:
        index[(v.kind, *_shape(v.expr))].append(v)
    return _covering(index, kind, expr)


def _covering(index: dict[tuple[object, ...], list[Vertex]], kind: str,
              expr: Expr) -> list[Vertex]:
    """Vertices of `kind` that hold at least what `expr` holds (the base as captured too)."""
    keys = [(kind, *_shape(expr))]
    if kind == "delta" and len(expr.parts) == 1 and not expr.raw:  # and the base as captured
        keys.append(("delta", *_shape(Expr.base(expr.parts[0].relation))))
    found = dict.fromkeys(v for k in keys for v in index.get(k, ()))
    # shapes leave the columns out: a narrower vertex of the same shape does not cover
    return [v for v in found if v.expr.covers(expr)]


def _join_routes(plan: GlobalPlan, ctx: Context,
                 deltas: dict[tuple[object, ...], list[Vertex]],
                 relations: dict[tuple[object, ...], list[Vertex]], dst: Vertex, rate: float,
                 width: float, arrive: dict[Vertex, float]) -> list[list[Edge]]:
    e = dst.expr
    left, right = e.left, e.right
    drive_aliases = left if e.driving == "left" else (right,)
    other_aliases = (right,) if e.driving == "left" else left
    drive, other = e.restrict(drive_aliases), e.restrict(other_aliases)
    routes = []
    keys = [_shape(other)]
    if len(other.parts) == 1:  # the base relation as captured (R̂) holds it too
        keys.append(_shape(Expr.base(other.parts[0].relation)))
    others = [x for x in dict.fromkeys(v for k in keys for v in relations.get(k, ()))
              if x.expr.covers(other)]
    preds = []
    for lhs, rhs in e.joins:
        la, ra = ref_alias(lhs), ref_alias(rhs)
        if la in left and ra == right:
            preds.append((lhs, rhs))
        elif ra in left and la == right:
            preds.append((rhs, lhs))
    for x in others:
        dx = plan.incoming[x].sources[0]  # a relation's own delta, on its machine
        mx = x.machine
        here = [y for y in _covering(deltas, "delta", drive) if y.machine == mx]
        new: list[Edge] = []
        if here:
            y = here[0]
            rows_in = delta_rate(plan, ctx.catalog, y)
        else:
            anywhere = _covering(deltas, "delta", drive)
            if not anywhere:
                continue
            src = min(anywhere, key=lambda v: (arrive.get(v, 0.0), v.label))
            y = Vertex("delta", drive, mx)
            if y in plan.vertices:
                continue
            rows_in = delta_rate(plan, ctx.catalog, src)
            new.append(_copy_edge(src, y, rows_in, ctx.width(y)))
        filters = tuple(
            f for side, aliases in ((y, drive_aliases), (x, other_aliases)) if side.expr.raw
            for al in aliases for f in e.part(al).selections)
        out = dst if mx == dst.machine else dst.at(mx)
        if out != dst and out in plan.vertices:
            continue  # that is a copy plumbing
        engine = ctx.model.join(join_tuples(rate, rows_in))[1]
        new.append(Join(y, x, dx, out, "left" if e.driving == "left" else "right", tuple(preds),
                        filters, rate, engine, rows_in))  # type: ignore[arg-type]
        if out != dst:
            new.append(CopyDelta(out, dst, rate, width))
        routes.append(new)
    return routes


def apply(plan: GlobalPlan, p: Plumbing) -> GlobalPlan:
    """D with plumbing `p` done (pruned)."""
    done = plan.extra.get("plumbings", [])
    out = plan.with_incoming(p.new_edges)
    return replace(out, extra={**plan.extra, "plumbings": [*done, p.describe()]})


def conflict(p: Plumbing, q: Plumbing) -> bool:
    """Whether p and q cannot both be applied as found: the same DST, one removing what the
    other reads or re-routes, overlapping removals (their benefits would count twice), or
    both adding the same new vertex."""
    if p.dst == q.dst:
        return True
    if (p.removed_vertices & (q.needs | {q.dst})) or (q.removed_vertices & (p.needs | {p.dst})):
        return True
    if p.removed_edges & q.removed_edges:
        return True
    return bool(p.new_vertices & q.new_vertices)


def feasible(plan: GlobalPlan, a: Assessment, p: Plumbing, model: TimeModel,
             arrive: dict[Vertex, float]) -> bool:
    """No cycle, no machine over its bound and, bounding the new arrival at DST, no sharing
    it serves over its SLA — on the D as it is now (plumbings found together may have
    changed it since)."""
    if p.dst not in plan.incoming or p.needs - plan.vertices:
        return False
    if p.needs & (plan.descendants(p.dst) | {p.dst}):
        return False
    for m, d in p.dload.items():
        if d > 0 and a.machine_load.get(m, 0.0) + d > a.bounds[m][0] + 1e-12:
            return False
    at: dict[Vertex, float] = {}
    for e in p.new_edges:  # new edges are listed sources first
        at[e.dst] = max(at.get(s, arrive.get(s, 0.0)) for s in e.sources) + edge_seconds(e, model)
    delta = at[p.dst] - arrive.get(p.dst, 0.0)
    if delta <= 0:
        return True
    return all(a.cps[s] + delta <= a.slas[s] + 1e-12 for s in plan.shr.get(p.dst, ()))


@dataclass
class Climb:
    plan: GlobalPlan
    applied: list[Plumbing]
    trace: list[tuple[int, int, float]]
    """(vertices, edges, COST) before the first and after each applied plumbing."""
    seconds: float
    candidates_seen: int


def hill_climb(plan: GlobalPlan, ctx: Context, rounds: int | None = None,
               deadline_s: float | None = None) -> Climb:
    """Greedy hill-climbing: apply the best feasible plumbing, re-assess, repeat; candidates
    are found anew each round (up to `rounds`), so a plumbing can build on the last one."""
    started = time.perf_counter()
    a = assess(plan, ctx.catalog, ctx.model, ctx.prices)
    trace = [(len(plan.vertices), len(plan.edges), a.total)]
    applied: list[Plumbing] = []
    seen = 0
    n = 0
    while rounds is None or n < rounds:
        n += 1
        found = candidates(plan, ctx, a)
        seen += len(found)
        taken: list[Plumbing] = []
        arrive = plan.arrivals(ctx.model)
        for p in found:
            if deadline_s is not None and time.perf_counter() - started > deadline_s:
                break
            if any(conflict(p, q) for q in taken):
                continue
            if not feasible(plan, a, p, ctx.model, arrive):
                continue
            nxt = apply(plan, p)
            wrong = nxt.problems()
            if wrong:  # never reached with sound candidates; refuse rather than run it
                raise PlanError(f"{p.describe()} would make the plan unsound: {wrong[0]}")
            b = assess(nxt, ctx.catalog, ctx.model, ctx.prices)
            if b.total >= a.total - EPS or raised(a, b) or b.late():
                continue
            plan, a = nxt, b
            arrive = plan.arrivals(ctx.model)
            taken.append(p)
            applied.append(p)
            trace.append((len(plan.vertices), len(plan.edges), a.total))
        if not taken:
            break
    return Climb(plan, applied, trace, time.perf_counter() - started, seen)
