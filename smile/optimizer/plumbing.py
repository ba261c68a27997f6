"""Plumbing (paper §7.1): the candidate re-routings of the global plan D's vertices.

A plumbing re-routes one destination vertex `DST` of D: it gets its tuples through new edges
from vertices D already has (`SRC`), and whatever only fed DST's old route is removed. Since a
vertex's contents never depend on its route (docs/design/semantics.md §8), any route that
computes the same thing is exact. Two kinds, as in the paper:

- **copy plumbing**: DST, a delta (or partial delta), is fed by a CopyDelta from another delta
  of D holding at least its rows and columns (`Expr.covers`), on any machine;
- **join plumbing**: DST, a partial delta Δ(ΔL⋈X) or Δ(L⋈ΔX), is computed by a Join where a
  relation of D holding its other side lives, from the driving delta there (copied there when
  D has it only elsewhere), the result copied to DST when DST lives elsewhere.

Each candidate carries, computed on the D it was found in: what it adds and removes, its
benefit in $/s (the removed edges' dollars minus the added edges' — the paper's definition —
minus what the edges feeding its source cost more once they serve DST's sharings too: pushed
for them as well, over-provisioned for the most demanding), its change of load per machine,
and what it reads (`candidates`, of all of D's vertices or of some: `changed` says which may
differ between two versions of D). Routes that cannot save anything are not priced in full
(`plumbing_bound`). `hill_climb.py` applies the best feasible ones (`feasible`: no cycle, no
sharing's critical path above its SLA, no machine over its bound; `conflict`) while COST(D)
really falls; `ilp.py` solves the same candidates exactly, as the reference that measures the
greedy's gap: both read the same candidates, benefits, times and conflicts.

Must not: touch a database; D in, a new D out (the old one is never changed).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from smile.costmodel.prices import Prices
from smile.optimizer.expr import Expr, ref_alias
from smile.optimizer.groups import grouped
from smile.optimizer.load import assess, price_edge
from smile.optimizer.plan import CopyDelta, Join, Vertex, edge_seconds, join_tuples
from smile.optimizer.plumbing_bound import Limits, bounded, post_dominators
from smile.optimizer.rates import delta_rate
from smile.optimizer.reassess import EPS

FEW = 200
"""Below this many vertices to look at, what each can remove is found on its own, not for all
of D in one pass (`plumbing_bound.Limits`)."""

if TYPE_CHECKING:
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.load import Assessment
    from smile.optimizer.plan import Edge



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
    fast: bool = True
    """Skip the routes that cannot save anything (`plumbing_bound.removable`), and judge a
    plumbing by re-assessing only what it touches (`reassess`) before re-assessing D whole;
    off, every route is priced and every plumbing tried re-assesses D (the reference: the
    same plumbings are applied either way)."""

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
    return price_edge(e, a.pushes(serves), a.provision(serves), ctx.model,
                      ctx.catalog.machine(e.dst.machine), ctx.prices)


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


def candidates(plan: GlobalPlan, ctx: Context, a: Assessment | None = None,
               only: set[Vertex] | None = None) -> list[Plumbing]:
    """Every copy and join plumbing of D with a positive benefit (of the vertices `only`,
    when given), best first. With `ctx.fast`, the routes that cannot save anything
    (`plumbing_bound.Limits`) are not priced in full: the same candidates come out."""
    a = a or assess(plan, ctx.catalog, ctx.model, ctx.prices)
    deltas: dict[tuple[object, ...], list[Vertex]] = defaultdict(list)
    relations: dict[tuple[object, ...], list[Vertex]] = defaultdict(list)
    for v in plan.vertices:
        if grouped(v):  # a group's MV: only the group's pushes may advance it
            continue
        key = _shape(v.expr)
        if v.kind in ("delta", "partial"):
            deltas[(v.kind, *key)].append(v)
        elif v.kind == "relation" and v in plan.incoming:
            relations[key].append(v)
    out: list[Plumbing] = []
    arrive = plan.arrivals(ctx.model)
    limits = Limits(plan, a, lambda e, serves: _edge_cost(ctx, a, e, serves)[1], EPS,
                    few=only is not None and len(only) < FEW) if ctx.fast and bounded(a) else None
    looked = plan.incoming.keys() if only is None else only & plan.incoming.keys()
    # found in any order: they are sorted below, by what tells any two apart
    for dst in (looked if ctx.fast else sorted(looked)):
        if dst.base or dst.kind not in ("delta", "partial"):
            continue
        rate = plan.incoming[dst].tuples_per_s
        width = ctx.width(dst)
        routes: list[tuple[Literal["copy", "join"], list[Edge]]] = [
            ("copy", [e]) for e in _copies(plan, deltas, dst, rate, width, limits)]
        if dst.kind == "partial":
            routes += [("join", r) for r in _join_routes(plan, ctx, deltas, relations, dst,
                                                         rate, width, arrive)
                       if limits is None or limits.may_save(dst, r)]
        for kind, new_edges in routes:
            p = _make(ctx, plan, a, kind, dst, new_edges)
            if p is not None and p.benefit > EPS:
                out.append(p)
    out.sort(key=lambda p: (-p.benefit, p.dst.label, p.describe()))
    return out


def _copies(plan: GlobalPlan, deltas: dict[tuple[object, ...], list[Vertex]], dst: Vertex,
            rate: float, width: float, limits: Limits | None) -> list[CopyDelta]:
    """The copies that could feed `dst` (those that may save something, with `limits`): a
    copy's $/s depend on its source only by whether it crosses machines."""
    out = []
    price: dict[bool, float] = {}
    old = plan.incoming[dst]
    for src in _covering(deltas, dst.kind, dst.expr):
        if src == dst:
            continue
        crosses = src.machine != dst.machine
        if limits is not None and crosses in price and \
                not limits.may_remove(dst, price[crosses]):
            continue
        e = _copy_edge(src, dst, rate, width)
        if limits is not None:
            if crosses not in price:
                price[crosses] = limits.price(e, plan.shr.get(dst, frozenset()))
            if e == old or not limits.may_save(dst, [e], price[crosses]):
                continue
        out.append(e)
    return out


def changed(before: GlobalPlan, a: Assessment, after: GlobalPlan, b: Assessment,
            model: TimeModel) -> set[Vertex] | None:
    """The vertices of `after` whose candidates may differ from what they were in `before`
    (assessed `a` and `b`), when `after` keeps `before`'s sharings first (None when it does
    not): those that serve a sharing whose critical path or push period changed, or that some
    vertex now serves or no longer serves — what they remove, what their new edges cost, what
    the vertices their routes read cost more serving them —; those whose arrival changed;
    those that post-dominate a vertex that feeds fewer than it did — a plumbing of them may now
    remove it (`plumbing_bound.removable`) —; those that fed a vertex through an edge that went
    (a route from it is no cycle now); those whose routes read vertices of a shape that has
    new or removed ones or ones arriving otherwise (`_reads`: sources, relations or drivers to
    join from); and those paying for a feed that changed (`_paying`). Those serving a sharing
    served by a vertex provisioned otherwise (`load.provision_of`) count among the first: a
    plumbing moving its pushes saves otherwise there."""
    n = len(before.sharings)
    if after.sharings[:n] != before.sharings:
        return None
    at, at0 = after.arrivals(model), before.arrivals(model)
    moved = _moved(before, a, after, b)
    out = {v for v, m in after.shr_masks.items() if m & moved}
    # an edge provisioned otherwise changes what any plumbing moving its sharings' pushes
    # saves on it, and what any plumbing reading it pays for its growth
    provisioned = {v for v in out if v in after.incoming and v in before.incoming
                   and b.provision(after.shr[v]) != a.provision(before.shr[v])}
    for v in provisioned:
        moved |= after.shr_masks[v]
    out |= {v for v, m in after.shr_masks.items() if m & moved}
    timed = {v for v, t in at.items() if t != at0.get(v)}
    out |= timed | _freed_from(before, after)
    shapes = {_kind_shape(v) for v in (after.vertices ^ before.vertices) | timed}
    out.update(v for v in after.incoming if not shapes.isdisjoint(_reads(v.kind, v.expr)))
    rerouted = {v for v, e in after.incoming.items() if before.incoming.get(v) != e}
    # a vertex serving sharings it did not (a new sharing re-using D's vertices) feeds them
    # too: what a plumbing reading it saves or pays there changed
    served = {v for v, m in after.shr_masks.items() if before.shr_masks.get(v) != m}
    out |= _paying(after, rerouted | provisioned | served)
    return out


def _paying(after: GlobalPlan, fed: set[Vertex]) -> set[Vertex]:
    """The vertices whose routes read a vertex of `fed` (re-routed or provisioned otherwise)
    or one below it, and serve a sharing it does not: a plumbing of them pays for that
    vertex's feed serving its sharings too, and what that costs changed. One serving only
    sharings it serves pays nothing there."""
    served: dict[tuple[object, ...], set[int]] = defaultdict(set)  # shape → the fed's masks
    masks = after.shr_masks
    for u in fed:
        for w in after.descendants(u) | {u}:
            served[_kind_shape(w)].add(masks.get(u, 0))
    return {v for v in after.incoming
            if any(masks.get(v, 0) & ~m for k in _reads(v.kind, v.expr) & served.keys()
                   for m in served[k])}


def _moved(before: GlobalPlan, a: Assessment, after: GlobalPlan, b: Assessment) -> int:
    """The sharings (as a mask of `GlobalPlan.shr_masks`) whose critical path or period
    changed, or that some vertex serves now and did not, or no longer serves."""
    masks, masks0 = after.shr_masks, before.shr_masks  # the same bits: before's come first
    moved = 0
    for i, s in enumerate(before.sharings):
        if a.cps[s.name] != b.cps[s.name] or a.periods[s.name] != b.periods[s.name]:
            moved |= 1 << i
    for v, m in masks0.items():
        moved |= masks.get(v, 0) ^ m
    for v, m in masks.items():
        if v not in masks0:
            moved |= m
    return moved


def _freed_from(before: GlobalPlan, after: GlobalPlan) -> set[Vertex]:
    """The vertices that a removed edge's destination no longer comes after (a route from
    it is no cycle now), and those that post-dominate a vertex that feeds fewer than it did
    (a plumbing of them may now remove it)."""
    gone = set(before.edges) - set(after.edges)
    out: set[Vertex] = set()
    for e in gone:
        out |= before.ancestors(e.dst) & after.incoming.keys()
    fewer = {u for e in gone for u in e.sources if u in after.incoming}
    if fewer:
        up = post_dominators(after)
        chains: set[Vertex] = set()
        for u in fewer:
            w = up[u]
            while w is not None and w not in chains:
                chains.add(w)
                w = up[w]
        out |= chains
    return out


def _kind_shape(v: Vertex) -> tuple[object, ...]:
    return (v.kind, *_shape(v.expr))


@lru_cache(maxsize=1 << 14)
def _reads(kind: str, expr: Expr) -> frozenset[tuple[object, ...]]:
    """The kinds and shapes (`_kind_shape`) of the vertices the routes to a vertex of `kind`
    holding `expr` read (`_copies`, `_join_routes`), or whose presence they ask about."""
    keys = {(kind, *_shape(expr))}
    if kind == "delta" and len(expr.parts) == 1 and not expr.raw:
        keys.add(("delta", *_shape(Expr.base(expr.parts[0].relation))))
    if kind == "partial":
        js = _JoinShape.of(expr)
        keys.update(("relation", *k) for k in js.other_keys)
        keys.add(("delta", *_shape(js.drive)))
        if len(js.drive.parts) == 1 and not js.drive.raw:
            keys.add(("delta", *_shape(Expr.base(js.drive.parts[0].relation))))
    return frozenset(keys)


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


@dataclass(frozen=True)
class _JoinShape:
    """What a partial delta's joins read, by its contents alone: the aliases and contents of
    its driving and other sides, the shapes a relation holding the other side has, and the
    join predicates (left side first)."""

    drive_aliases: tuple[str, ...]
    other_aliases: tuple[str, ...]
    drive: Expr
    other: Expr
    other_keys: tuple[tuple[object, ...], ...]
    preds: tuple[tuple[str, str], ...]

    @staticmethod
    @lru_cache(maxsize=1 << 14)
    def of(e: Expr) -> _JoinShape:
        left, right = e.left, e.right
        drive_aliases = left if e.driving == "left" else (right,)
        other_aliases = (right,) if e.driving == "left" else left
        drive, other = e.restrict(drive_aliases), e.restrict(other_aliases)
        keys = [_shape(other)]
        if len(other.parts) == 1:  # the base relation as captured (R̂) holds it too
            keys.append(_shape(Expr.base(other.parts[0].relation)))
        preds = []
        for lhs, rhs in e.joins:
            la, ra = ref_alias(lhs), ref_alias(rhs)
            if la in left and ra == right:
                preds.append((lhs, rhs))
            elif ra in left and la == right:
                preds.append((rhs, lhs))
        return _JoinShape(drive_aliases, other_aliases, drive, other, tuple(keys), tuple(preds))


def _join_routes(plan: GlobalPlan, ctx: Context,
                 deltas: dict[tuple[object, ...], list[Vertex]],
                 relations: dict[tuple[object, ...], list[Vertex]], dst: Vertex, rate: float,
                 width: float, arrive: dict[Vertex, float]) -> list[list[Edge]]:
    e = dst.expr
    js = _JoinShape.of(e)
    routes = []
    others = [x for x in dict.fromkeys(v for k in js.other_keys for v in relations.get(k, ()))
              if x.expr.covers(js.other)]
    drives = _covering(deltas, "delta", js.drive)
    for x in others:
        dx = plan.incoming[x].sources[0]  # a relation's own delta, on its machine
        mx = x.machine
        here = [y for y in drives if y.machine == mx]
        new: list[Edge] = []
        if here:  # the first there to arrive (not the first D happens to list: a set's order)
            y = min(here, key=lambda v: (arrive.get(v, 0.0), v.label))
            rows_in = delta_rate(plan, ctx.catalog, y)
        else:
            if not drives:
                continue
            src = min(drives, key=lambda v: (arrive.get(v, 0.0), v.label))
            y = Vertex("delta", js.drive, mx)
            if y in plan.vertices:
                continue
            rows_in = delta_rate(plan, ctx.catalog, src)
            new.append(_copy_edge(src, y, rows_in, ctx.width(y)))
        filters = tuple(
            f for side, aliases in ((y, js.drive_aliases), (x, js.other_aliases))
            if side.expr.raw for al in aliases for f in e.part(al).selections)
        out = dst if mx == dst.machine else dst.at(mx)
        if out != dst and out in plan.vertices:
            continue  # that is a copy plumbing
        engine = ctx.model.join(join_tuples(rate, rows_in))[1]
        new.append(Join(y, x, dx, out, "left" if e.driving == "left" else "right", js.preds,
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
