"""D with one plumbing applied, re-assessed only where the plumbing touches it (paper §7.2):
whether hill-climbing would take it — COST(D) falls by more than `EPS`, no machine it loads
more goes over its bound, no sharing goes over its SLA — told without building the new D or
assessing it whole (`load.assess`), which costs in proportion to all of D.

A plumbing of DST changes, in D (`load.assess`'s terms):
- the edges: DST's incoming edge and those of the vertices that feed only DST's old route go
  (the vertices `GlobalPlan.pruned` would drop), the plumbing's new edges come;
- the arrivals (critical paths) of DST and of what it feeds, so the critical path and push
  period of the sharings DST serves (SHR(DST)) — and with them the pushes and the
  over-provisioning of every edge serving one of those whose critical path changed;
- the SHR of the vertices of the old route that stay (they may no longer serve DST's
  sharings) and of the new route's sources and all they read (they now serve them too);
- ρ, so the penalty, of DST's sharings.
Everything else keeps its figures, so the new COST(D) and loads are the old plus what changes
— equal to those of D re-assessed whole up to the order of the additions. A verdict within
rounding of one of the thresholds is not given (`judge` says None) and the caller assesses D
whole. With shared pushes (`load.Rides`) a change of one sharing's period moves every other's,
so nothing is judged here; nor where a sharing is charged by recompute
(`recompute_load`), whose charge is its whole push's.

Must not: change D; give a verdict re-assessing D whole could contradict.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from smile.costmodel.formulas import late_penalty_per_s
from smile.optimizer.load import period_of, price_edge, provision_of
from smile.optimizer.plan import CopyDelta, DeltaToRel, edge_seconds

if TYPE_CHECKING:
    from smile.costmodel.prices import Prices
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.load import Assessment
    from smile.optimizer.plan import Edge, Vertex
    from smile.optimizer.plumbing import Plumbing

EPS = 1e-15
"""Hill-climbing takes a plumbing when COST(D) falls by more than this ($/s)."""
TOTAL_TOL = 1e-12
"""Relative distance of the new COST(D) to its threshold within which no verdict is given."""
LOAD_TOL = 1e-10
"""Absolute distance of a machine's new load, disk or network to a threshold within which no
verdict is given."""


class Reassessor:
    """Judges plumbings of one D under its assessment `a` (made with the same catalog
    snapshot, model, prices and laziness)."""

    def __init__(self, plan: GlobalPlan, a: Assessment, catalog: CatalogSnapshot,
                 model: TimeModel, prices: Prices, laziness: float) -> None:
        self.plan, self.a, self.model, self.prices = plan, a, model, prices
        self.laziness = laziness
        self.machines = {m.name: m for m in catalog.machines}
        self.delays = dict(catalog.delays)
        self.at1 = plan.arrivals(model, 1.0)
        self.at0 = plan.arrivals(model, 0.0)
        self.late = set(a.late())
        self.mvs = {s.mv for s in plan.sharings}

    def judge(self, p: Plumbing) -> bool | None:
        """Whether hill-climbing would keep D with `p` applied (see the module's docstring):
        None when that cannot be told here."""
        if self.a.rides is not None or self.a.recomputed:  # what recomputing saves spans a
            return None  # sharing's whole push: told by assessing D whole
        change = _Change(self, p)
        if not change.sound:
            return None
        return change.verdict()


class _Change:
    """D and D with one plumbing, where they differ."""

    def __init__(self, r: Reassessor, p: Plumbing) -> None:
        self.r, self.p = r, p
        plan = r.plan
        self.made = [e.dst for e in p.new_edges if e.dst != p.dst]
        self.sound = p.dst in plan.incoming and not any(v in plan.vertices for v in self.made)
        if not self.sound:
            return
        self.old_in = plan.incoming[p.dst]
        needs = {s for e in p.new_edges for s in e.sources if s not in set(self.made)}
        self.upstream = set(needs)
        for u in needs:
            self.upstream |= plan.ancestors(u)
        self.dead = self._dead()
        self.removed = [self.old_in] + [plan.incoming[u] for u in self.dead
                                        if u in plan.incoming]
        self.new_in = {e.dst: e for e in p.new_edges}
        self.gone = set(self.removed)
        self.masks = self._masks()
        self.serving = plan.shr_masks.get(p.dst, 0)

    def _dead(self) -> set[Vertex]:
        """The vertices D would prune with the plumbing done: those of DST's old route that
        reach no MV any more."""
        plan, old_in = self.r.plan, self.old_in
        old = plan.ancestors(self.p.dst)
        memo: dict[Vertex, bool] = {}

        def live(u: Vertex) -> bool:
            if u in memo:
                return memo[u]
            memo[u] = True  # a DAG: the provisional value is never read back wrongly
            if u in self.upstream or u not in old or u in self.r.mvs:
                return True
            memo[u] = any(live(e.dst) for e in plan.outgoing.get(u, ()) if e is not old_in)
            return memo[u]

        return {u for u in old if not live(u)}

    def _out(self, v: Vertex) -> list[Vertex]:
        """What `v` feeds in the new D."""
        out = [e.dst for e in self.r.plan.outgoing.get(v, ()) if e not in self.gone]
        return out + [e.dst for e in self.p.new_edges if v in e.sources]

    def _masks(self) -> dict[Vertex, int]:
        """SHR masks (`GlobalPlan.shr_masks`) in the new D of the vertices whose may change:
        DST, the new vertices, the old route's that stay, the new route's sources and what
        they read."""
        plan, dst = self.r.plan, self.p.dst
        old = plan.shr_masks
        kept_old = (plan.ancestors(dst) - self.dead) | self.upstream
        out = {dst: old.get(dst, 0)}  # what DST feeds does not change
        todo = [*reversed(self.made),
                *sorted(kept_old, key=plan.position.__getitem__, reverse=True)]
        for v in todo:
            m = plan.mv_masks.get(v, 0)
            for w in self._out(v):
                m |= out[w] if w in out else old.get(w, 0)
            out[v] = m
        return out

    def mask(self, v: Vertex) -> int:
        return self.masks[v] if v in self.masks else self.r.plan.shr_masks.get(v, 0)

    def incoming(self, v: Vertex) -> Edge | None:
        if v in self.new_in:
            return self.new_in[v]
        return None if v in self.dead else self.r.plan.incoming.get(v)

    def arrivals(self) -> tuple[dict[Vertex, float], dict[Vertex, float]]:
        """The arrivals (x = 1 s, x = 0) that change: of the new vertices, DST and what DST
        feeds."""
        r, plan = self.r, self.r.plan
        at1: dict[Vertex, float] = {}
        at0: dict[Vertex, float] = {}
        below = sorted(plan.descendants(self.p.dst), key=plan.position.__getitem__)
        for e in [*self.p.new_edges, *(plan.incoming[v] for v in below)]:
            for x, at, old in ((1.0, at1, r.at1), (0.0, at0, r.at0)):
                at[e.dst] = max(at[s] if s in at else old.get(s, 0.0) for s in e.sources) \
                    + edge_seconds(e, r.model, x)
        return at1, at0

    def verdict(self) -> bool | None:
        r, a = self.r, self.r.a
        plan = r.plan
        at1, at0 = self.arrivals()
        cps, periods = dict(a.cps), dict(a.periods)
        moved = 0  # the sharings whose critical path or period changed
        for i, s in enumerate(plan.sharings):
            if self.serving >> i & 1 and s.mv in at1:
                cp1, cp0 = at1[s.mv], at0[s.mv]
                if cp1 != a.cps[s.name] or cp0 != r.at0.get(s.mv, 0.0):
                    cps[s.name] = cp1
                    periods[s.name] = period_of(s.sla_s, cp1, cp0, r.delays.get(s.name, 0.0),
                                                r.laziness)
                    moved |= 1 << i
        late = {name for name in r.late if cps[name] > a.slas[name] + 1e-12} | {
            name for name in plan.named(moved) if cps[name] > a.slas[name] + 1e-12}
        if late:
            return False
        return self._priced(cps, periods, moved)

    def _priced(self, cps: dict[str, float], periods: dict[str, float],
                moved: int) -> bool | None:
        """The verdict on COST(D) and the machines, once the critical paths are within SLA."""
        r, a = self.r, self.r.a
        dload: dict[str, float] = defaultdict(float)
        ddisk: dict[str, float] = defaultdict(float)
        dnet: dict[str, float] = defaultdict(float)
        dtotal = 0.0
        for e in self.removed:
            dtotal -= a.edge_cost[e]
            dload[e.dst.machine] -= a.edge_load[e]
            _stores(e, ddisk, dnet, -1.0)
        for e in self._repriced(moved):
            m = r.machines[e.dst.machine]
            pushes, provision = self._pushes(e, moved, cps, periods)
            load, cost = price_edge(e, pushes, provision, r.model, m, r.prices)
            dtotal += cost - a.edge_cost.get(e, 0.0)
            dload[m.name] += load - a.edge_load.get(e, 0.0)
            if e not in a.edge_cost:
                _stores(e, ddisk, dnet, 1.0)
        dtotal += self._penalties()
        total = a.total + dtotal
        if abs(total - (a.total - EPS)) <= TOTAL_TOL * abs(a.total):
            return None
        if total >= a.total - EPS:
            return False
        return _raised(a, dload, ddisk, dnet)

    def _pushes(self, e: Edge, moved: int, cps: dict[str, float],
                periods: dict[str, float]) -> tuple[float, float]:
        """Pushes per second and over-provisioning of edge `e` in the new D: for an edge of
        D, its own (`Assessment.by_serves`) with what changed added — the sharings it serves
        now and did not, those it no longer serves, those whose period moved — up to the
        order of the sums; for a new edge, made afresh."""
        r, a = self.r, self.r.a
        plan = r.plan
        now = self.mask(e.dst)
        if e not in a.edge_cost:
            serves = plan.named(now)
            return sum(1.0 / periods[s] for s in serves), provision_of(cps, a.slas, serves)
        was = plan.shr_masks.get(e.dst, 0)
        pushes, provision = a.by_serves[plan.shr.get(e.dst, frozenset())]
        for s in plan.named(now & ~was):
            pushes += 1.0 / periods[s]
        for s in plan.named(was & ~now):
            pushes -= 1.0 / a.periods[s]
        for s in plan.named(now & was & moved):
            pushes += 1.0 / periods[s] - 1.0 / a.periods[s]
        raised = plan.named(now & (moved | ~was))
        if was & ~now or any(cps[s] < a.cps[s] for s in raised):  # the most demanding may go
            return pushes, provision_of(cps, a.slas, plan.named(now))
        return pushes, max([provision, *(cps[s] / a.slas[s] for s in raised)])

    def _repriced(self, moved: int) -> list[Edge]:
        """The edges of the new D whose figures may change: the new ones, those into a vertex
        whose SHR changed, and those serving a sharing whose critical path or period did."""
        plan = self.r.plan
        out = dict.fromkeys(self.p.new_edges)
        for v, m in self.masks.items():
            e = self.incoming(v)
            if e is not None and m != plan.shr_masks.get(v, 0):
                out[e] = None
        if moved:
            todo = [s.mv for i, s in enumerate(plan.sharings) if moved >> i & 1]
            seen = set(todo)
            while todo:
                e = self.incoming(todo.pop())
                if e is None:
                    continue
                out[e] = None
                for u in e.sources:
                    if u not in seen:
                        seen.add(u)
                        todo.append(u)
        return list(out)

    def _penalties(self) -> float:
        """How much the penalties of DST's sharings change, their ρ (the busiest edge serving
        each) taken again over the new D."""
        r, a = self.r, self.r.a
        out = 0.0
        for i, s in enumerate(r.plan.sharings):
            if not self.serving >> i & 1:
                continue
            rho = 0.0
            todo, seen = [s.mv], {s.mv}
            while todo:
                e = self.incoming(todo.pop())
                if e is None:
                    continue
                rho = max(rho, edge_seconds(e, r.model))
                for u in e.sources:
                    if u not in seen:
                        seen.add(u)
                        todo.append(u)
            out += late_penalty_per_s(s.mv_rate, rho, s.sla_s, s.penalty_per_tuple) \
                - a.penalties[s.name]
        return out


def _stores(e: Edge, ddisk: dict[str, float], dnet: dict[str, float], sign: float) -> None:
    """What edge `e` keeps on disk and moves between machines (`load.assess`), `sign` times."""
    if isinstance(e, CopyDelta) and e.crosses_machines:
        nbytes = e.tuples_per_s * e.bytes_per_tuple
        dnet[e.src.machine] += sign * nbytes / 1e6
        dnet[e.dst.machine] += sign * nbytes / 1e6
    if isinstance(e, DeltaToRel):
        ddisk[e.dst.machine] += sign * e.stored_bytes / 1e9


def _raised(a: Assessment, dload: dict[str, float], ddisk: dict[str, float],
            dnet: dict[str, float]) -> bool | None:
    """True when no machine goes over a bound it was within with more than before
    (`load.raised`); None when one is within rounding of telling."""
    for k, change in enumerate((dload, ddisk, dnet)):
        before = (a.machine_load, a.machine_disk_gb, a.machine_net_mb_s)[k]
        for m, d in change.items():
            now, bound = before.get(m, 0.0) + d, a.bounds[m][k]
            if abs(d - 1e-9) <= LOAD_TOL or abs(now - bound - 1e-12) <= LOAD_TOL:
                return None
            if d > 1e-9 and now > bound + 1e-12:
                return False
    return True
