"""The most a plumbing of each vertex of D can save (paper §7.1), for every vertex in one pass,
so that the search for candidates (`plumbing.candidates`) builds and prices in full only the
routes that may save something.

A plumbing of DST removes DST's incoming edge and those of the vertices that fed only DST's
old route (`plumbing._dead_after`): vertices every path of which to a MV (a vertex that feeds
nothing) goes through DST — those DST post-dominates. So a plumbing of DST saves at most what
the incoming edges of DST and of the vertices it post-dominates cost (`removable`): the
post-dominator tree of D (each vertex's nearest post-dominator is the nearest common one of
the vertices it feeds) summed bottom-up. Its benefit is that less what its new edges cost,
less what the edges feeding its source cost more once they serve DST's sharings too — never
negative when each edge is pushed once per push of each sharing it serves: more sharings
served, more pushes, and over-provisioned for the most demanding. With shared pushes
(`load.Rides`) an edge serving more sharings can be pushed less often (a push it went along
with becomes its own), so no such bound is claimed there (`bounded`).

Must not: change D; claim a bound a candidate's benefit could exceed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.load import Assessment
    from smile.optimizer.plan import Edge, Vertex


def bounded(a: Assessment) -> bool:
    """Whether `removable` bounds the benefits of plumbings assessed by `a` (not with shared
    pushes)."""
    return a.rides is None


def post_dominators(plan: GlobalPlan) -> dict[Vertex, Vertex | None]:
    """Each vertex's nearest post-dominator in D (None: only the exit every vertex that feeds
    nothing leads to).

    >>> from smile.optimizer.global_plan import GlobalPlan, SharingEntry
    >>> from smile.optimizer.plan import CopyDelta, Expr, Vertex
    >>> a, b, c = (Vertex("delta", Expr.base(n), "m1") for n in "abc")
    >>> d = GlobalPlan((CopyDelta(a, b, 1, 8), CopyDelta(b, c, 1, 8)),
    ...                (SharingEntry("S", c, (a,), 10, 0, ()),))
    >>> [v and v.label for v in post_dominators(d).values()]
    ['Δb@m1', 'Δc@m1', None]
    """
    parent: dict[Vertex, Vertex | None] = {}
    depth: dict[Vertex | None, int] = {None: 0}
    order = list(plan.position)
    for v in reversed(order):  # a vertex after every vertex it feeds
        nearest: Vertex | None = None
        first = True
        for e in plan.outgoing.get(v, ()):
            if first:
                nearest, first = e.dst, False
            else:
                nearest = _meet(nearest, e.dst, parent, depth)
        parent[v] = nearest
        depth[v] = depth[nearest] + 1
    return {v: parent[v] for v in order}


def _meet(x: Vertex | None, y: Vertex | None, parent: dict[Vertex, Vertex | None],
          depth: dict[Vertex | None, int]) -> Vertex | None:
    """The nearest common post-dominator of `x` and `y` (themselves included)."""
    while x != y:
        if depth[x] >= depth[y]:
            x = parent[x]  # type: ignore[index]
        else:
            y = parent[y]  # type: ignore[index]
    return x


def dominated(plan: GlobalPlan, dst: Vertex) -> set[Vertex]:
    """The vertices `dst` post-dominates (`post_dominators`), found from `dst` alone: those
    of its ancestors every out-edge of which leads to `dst` or to another of them.

    >>> from smile.optimizer.global_plan import GlobalPlan, SharingEntry
    >>> from smile.optimizer.plan import CopyDelta, Expr, Vertex
    >>> a, b, c = (Vertex("delta", Expr.base(n), "m1") for n in "abc")
    >>> d = GlobalPlan((CopyDelta(a, b, 1, 8), CopyDelta(b, c, 1, 8)),
    ...                (SharingEntry("S", c, (a,), 10, 0, ()),))
    >>> sorted(v.label for v in dominated(d, c))
    ['Δa@m1', 'Δb@m1']
    """
    old = plan.ancestors(dst)
    memo: dict[Vertex, bool] = {}

    def only_to_dst(u: Vertex) -> bool:
        if u not in memo:
            memo[u] = True  # a DAG: the provisional value is never read back wrongly
            memo[u] = u in old and all(e.dst == dst or only_to_dst(e.dst)
                                       for e in plan.outgoing.get(u, ()))
        return memo[u]

    return {u for u in old if only_to_dst(u)}


def removable(plan: GlobalPlan, a: Assessment) -> dict[Vertex, float]:
    """Per vertex with an incoming edge: the $/s (`Assessment.edge_cost`) of its incoming
    edge and of those of the vertices it post-dominates — the most a plumbing of it removes."""
    parent = post_dominators(plan)
    total = {v: a.edge_cost[e] for v, e in plan.incoming.items()}
    for v, up in parent.items():  # a vertex after every vertex it post-dominates
        if up is not None and v in total and up in total:
            total[up] += total[v]
    return total


class Limits:
    """What plumbings of D's vertices can save at most, under assessment `a`: what each
    removes at most (`removable`), less what its new edges cost (`price`: an edge's $/s were
    it to serve some sharings), less what the edges feeding its sources cost more once they
    serve DST's sharings too — the terms of `plumbing._make`'s benefit, with the vertices it
    removes taken at their most."""

    def __init__(self, plan: GlobalPlan, a: Assessment,
                 price: Callable[[Edge, frozenset[str]], float], eps: float,
                 few: bool = False) -> None:
        """`few`: only a few vertices will be asked about — each one's most removable is
        made on its own (`dominated`), not all of them in one pass."""
        self.plan, self.a, self.price, self.eps = plan, a, price, eps
        self._removable = {} if few else removable(plan, a)
        self.few = few
        self._grown: dict[tuple[Vertex, frozenset[str]], float] = {}

    def may_remove(self, dst: Vertex, added: float) -> bool:
        """Whether re-routing `dst` by new edges costing `added` may save more than `eps`,
        on what it removes alone."""
        return self.removable(dst) - added > self.eps / 2

    def removable(self, dst: Vertex) -> float:
        """What a plumbing of `dst` removes at most (`removable`)."""
        got = self._removable.get(dst)
        if got is None:
            plan, cost = self.plan, self.a.edge_cost
            got = self._removable[dst] = cost[plan.incoming[dst]] + sum(
                cost[plan.incoming[u]] for u in dominated(plan, dst) if u in plan.incoming)
        return got

    def may_save(self, dst: Vertex, new_edges: list[Edge], added: float | None = None) -> bool:
        """Whether re-routing `dst` by `new_edges` (costing `added`, if known) may save more
        than `eps`: the vertices the new edges read, and those they read, are added up until
        what they would cost more takes all the rest."""
        serves = self.plan.shr.get(dst, frozenset())
        if added is None:
            added = sum(self.price(e, serves) for e in new_edges)
        room = self.removable(dst) - added
        if room <= self.eps / 2:
            return False
        made = {e.dst for e in new_edges}
        todo = list(dict.fromkeys(s for e in new_edges for s in e.sources if s not in made))
        seen = set(todo)
        while todo:  # breadth first: the nearest feeds cost the most more
            u = todo.pop(0)
            room -= self._grows(u, serves)
            if room <= self.eps / 2:
                return False
            feed = self.plan.incoming.get(u)
            for v in feed.sources if feed is not None else ():
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        return True

    def _grows(self, u: Vertex, serves: frozenset[str]) -> float:
        """What `u`'s incoming edge costs more serving `serves` as well (0 without one)."""
        key = (u, serves)
        got = self._grown.get(key)
        if got is None:
            feed = self.plan.incoming.get(u)
            now = self.plan.shr.get(u, frozenset())
            grown = now | serves
            got = 0.0 if feed is None or grown == now else \
                self.price(feed, grown) - self.a.edge_cost[feed]
            self._grown[key] = got
        return got
