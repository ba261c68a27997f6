"""The global plan D (paper §7, NOTES §8): every admitted sharing's plan merged into one DAG.

Vertices are named by their contents (`plan.Expr`), so merging is a union: a vertex two
sharings both need exists once, with one incoming edge — the one D already runs, when a new
sharing brings another route to it — and serves both (`SHR`). SHR is not stored: it is what
reaches each sharing's MV, recomputed from the edges, so it can never disagree with them.
Vertices that reach no MV (a route a merge or a plumbing made redundant, a withdrawn sharing's
own vertices) are pruned.

Critical paths: every vertex has one incoming edge, so the time at which a push of x seconds of
updates reaches a vertex is its *arrival*: the latest of its incoming edge's sources plus that
edge's seconds; a sharing's CP is its MV's arrival (sources arrive at 0).

Must not: touch a database or a broker; plans in, plans out (each change returns a new D).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from smile.errors import PlanError
from smile.optimizer.plan import (
    CopyDelta,
    DeltaToRel,
    Edge,
    Plan,
    Union,
    Vertex,
    edge_seconds,
    edge_to_json,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from smile.costmodel.time_model import TimeModel


@dataclass(frozen=True)
class SharingEntry:
    """What D keeps of one admitted sharing besides its vertices."""

    name: str
    mv: Vertex
    sources: tuple[Vertex, ...]
    sla_s: float
    penalty_per_tuple: float
    outputs: tuple[tuple[str, str], ...]
    """The MV's columns as its consumer sees them: (name, SQL over `alias.column`)."""
    mv_rate: float = 0.0
    """Tuples per second arriving at the MV (λ of the penalty's M/M/1 model)."""
    algorithm: str = ""
    """Which plan admission took for it (DPD or DPT)."""


@dataclass(frozen=True)
class GlobalPlan:
    edges: tuple[Edge, ...] = ()
    sharings: tuple[SharingEntry, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """Free-form annotations (e.g. the plumbings that made it), not part of its identity."""

    def __post_init__(self) -> None:
        seen: dict[Vertex, Edge] = {}
        for e in self.edges:
            if e.dst in seen and seen[e.dst] != e:
                raise PlanError(f"{e.dst.label} has two incoming edges in the global plan")
            seen[e.dst] = e

    # -- reading ---------------------------------------------------------------------------
    @staticmethod
    def of(plan: Plan, sla_s: float, penalty_per_tuple: float, mv_rate: float = 0.0,
           algorithm: str = "") -> GlobalPlan:
        """The global plan of one sharing alone."""
        return GlobalPlan().add(plan, SharingEntry(
            plan.sharing, plan.mv, plan.sources, sla_s, penalty_per_tuple, plan.outputs,
            mv_rate, algorithm))

    @cached_property
    def incoming(self) -> dict[Vertex, Edge]:
        return {e.dst: e for e in self.edges}

    @cached_property
    def outgoing(self) -> dict[Vertex, list[Edge]]:
        out: dict[Vertex, list[Edge]] = defaultdict(list)
        for e in self.edges:
            for s in dict.fromkeys(e.sources):
                out[s].append(e)
        return out

    @cached_property
    def vertices(self) -> frozenset[Vertex]:
        out: set[Vertex] = {s.mv for s in self.sharings}
        for e in self.edges:
            out.add(e.dst)
            out.update(e.sources)
        return frozenset(out)

    def sharing(self, name: str) -> SharingEntry:
        for s in self.sharings:
            if s.name == name:
                return s
        raise PlanError(f"no sharing {name!r} in the global plan")

    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sharings)

    def ancestors(self, v: Vertex) -> set[Vertex]:
        """Every vertex `v` reads from, directly or not (without `v`)."""
        seen: set[Vertex] = set()
        stack = [v]
        while stack:
            e = self.incoming.get(stack.pop())
            if e is None:
                continue
            for s in e.sources:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return seen

    def descendants(self, v: Vertex) -> set[Vertex]:
        seen: set[Vertex] = set()
        stack = [v]
        while stack:
            for e in self.outgoing.get(stack.pop(), ()):
                if e.dst not in seen:
                    seen.add(e.dst)
                    stack.append(e.dst)
        return seen

    def of_sharing(self, name: str) -> set[Vertex]:
        """A sharing's vertices: its MV and everything it reads (the captured bases too)."""
        mv = self.sharing(name).mv
        return {mv, *self.ancestors(mv)}

    def advanced_by(self, targets: Iterable[Vertex]) -> set[Vertex]:
        """The vertices a push of `targets` advances: they and all they read, but the
        captured bases (no edge comes into those)."""
        return {u for v in targets for u in self.ancestors(v) | {v} if u in self.incoming}

    @cached_property
    def advances(self) -> dict[str, frozenset[Vertex]]:
        """Per sharing: the vertices its push advances (`advanced_by` its MV)."""
        return {s.name: frozenset(self.advanced_by([s.mv])) for s in self.sharings}

    @cached_property
    def shr(self) -> dict[Vertex, frozenset[str]]:
        """SHR(v): the sharings whose MV `v` feeds (or is). An edge's SHR is its dst's."""
        acc: dict[Vertex, set[str]] = defaultdict(set)
        for s in self.sharings:
            for v in self.of_sharing(s.name):
                acc[v].add(s.name)
        return {v: frozenset(names) for v, names in acc.items()}

    def edges_of(self, name: str) -> list[Edge]:
        keep = self.of_sharing(name)
        return [e for e in self.edges if e.dst in keep]

    def plan_of(self, name: str) -> Plan:
        """One sharing's part of D as a plan of its own (shared vertices included)."""
        s = self.sharing(name)
        return Plan(name, tuple(self.edges_of(name)), s.mv, s.sources, s.outputs)

    def computing(self, plan: Plan) -> Plan | None:
        """`plan` on D's own vertices when D computes its MV's contents already (another
        sharing's MV, or a relation it keeps, of the same expression) — on the same machine
        when one is found there, else on any — so that the sharing adds only a view; None
        when D has no such vertex."""
        want = plan.mv
        mv = min((v for v in self.vertices if v.kind == want.kind and v.expr == want.expr
                  and not v.owner and v in self.incoming),
                 key=lambda v: (v.machine != want.machine, v.machine), default=None)
        if mv is None:
            return None
        reads = self.ancestors(mv)
        sources = tuple(sorted(v for v in reads if v not in self.incoming))
        return Plan(plan.sharing, tuple(self.feeding([mv])), mv, sources, plan.outputs)

    def feeding(self, targets: Iterable[Vertex]) -> list[Edge]:
        """D's edges that compute `targets` from the captured bases (in D's order)."""
        keep = self.advanced_by(targets)
        return [e for e in self.edges if e.dst in keep]

    def order(self) -> list[Vertex]:
        """Vertices with an incoming edge, every one after those it reads (a cycle raises
        PlanError: D is a DAG)."""
        return list(self._order)

    @cached_property
    def _order(self) -> tuple[Vertex, ...]:
        waiting = {v: len(set(e.sources)) for v, e in self.incoming.items()}
        ready = sorted(v for v in self.vertices if v not in self.incoming)
        out: list[Vertex] = []
        while ready:
            u = ready.pop()
            for e in self.outgoing.get(u, ()):
                waiting[e.dst] -= 1
                if waiting[e.dst] == 0:
                    out.append(e.dst)
                    ready.append(e.dst)
        if len(out) != len(self.incoming):
            raise PlanError("the global plan has a cycle")
        return tuple(out)

    def arrivals(self, model: TimeModel, x: float = 1.0,
                 seconds: Mapping[Edge, float] | None = None) -> dict[Vertex, float]:
        """When a push of `x` seconds of updates reaches each vertex (sources at 0)."""
        out: dict[Vertex, float] = {}
        for v in self.order():
            e = self.incoming[v]
            t = seconds[e] if seconds is not None else edge_seconds(e, model, x)
            out[v] = max(out.get(s, 0.0) for s in e.sources) + t
        return out

    def cp(self, name: str, model: TimeModel, x: float = 1.0) -> float:
        """A sharing's critical path in D: when a push of `x` seconds reaches its MV."""
        return self.arrivals(model, x).get(self.sharing(name).mv, 0.0)

    def cps(self, model: TimeModel, x: float = 1.0) -> dict[str, float]:
        arrive = self.arrivals(model, x)
        return {s.name: arrive.get(s.mv, 0.0) for s in self.sharings}

    def problems(self) -> list[str]:
        """What is unsound in D, in words (empty when nothing is): every edge's destination
        must be computable from what it reads — a copy from a delta holding at least its rows
        and columns, a DeltaToRel from the relation's own delta, a union of the two partial
        deltas of its join, a join whose two sides hold every column it writes and joins on."""
        out = []
        for e in self.edges:
            dst = e.dst.expr
            if isinstance(e, CopyDelta):
                if not e.src.expr.covers(dst) or e.src.kind != e.dst.kind:
                    out.append(f"{e.src.label} cannot feed {e.dst.label} by a copy")
            elif isinstance(e, DeltaToRel):
                if e.src.expr != dst or e.src.kind != "delta" or e.dst.kind != "relation":
                    out.append(f"{e.dst.label} is not kept from its own delta")
            elif isinstance(e, Union):
                halves = {(v.expr.driving, v.expr.whole()) for v in (e.left, e.right)}
                if halves != {("left", dst), ("right", dst)}:
                    out.append(f"{e.dst.label} is not the union of its join's partial deltas")
            else:
                drive, other = ((dst.left, (dst.right,)) if e.delta_side == "left"
                                else ((dst.right,), dst.left))
                ok = (e.delta.expr.covers(dst.restrict(drive))
                      and e.other.expr.covers(dst.restrict(other))
                      and e.other_delta.expr == e.other.expr and e.delta_side == dst.driving)
                if not ok:
                    out.append(f"{e.dst.label} cannot be joined from {e.delta.label} and "
                               f"{e.other.label}")
        return out

    # -- changing --------------------------------------------------------------------------
    def add(self, plan: Plan, entry: SharingEntry) -> GlobalPlan:
        """D with `plan` merged in: its vertices that D has already are D's (with D's route);
        the rest come with their edges. Vertices left reaching no MV are pruned."""
        if entry.name in self.names():
            raise PlanError(f"a sharing named {entry.name!r} is already in the global plan")
        edges = list(self.edges)
        have = set(self.incoming)
        for e in plan.edges:
            if e.dst not in have:
                edges.append(e)
                have.add(e.dst)
        return replace(self, edges=tuple(edges),
                       sharings=(*self.sharings, entry)).pruned()

    def without(self, name: str) -> GlobalPlan:
        """D without a sharing: its MV goes, and every vertex only it needed."""
        self.sharing(name)
        return replace(self, sharings=tuple(s for s in self.sharings if s.name != name)
                       ).pruned()

    def with_incoming(self, new: Iterable[Edge]) -> GlobalPlan:
        """D with these edges in place of the destinations' current incoming ones (a plumbing),
        pruned."""
        new = list(new)
        dsts = {e.dst for e in new}
        edges = [e for e in self.edges if e.dst not in dsts] + new
        return replace(self, edges=tuple(edges)).pruned()

    def pruned(self) -> GlobalPlan:
        """Only what reaches some MV (and the MVs)."""
        keep: set[Vertex] = set()
        for s in self.sharings:
            keep.add(s.mv)
            keep |= self.ancestors(s.mv)
        edges = tuple(e for e in self.edges if e.dst in keep)
        if len(edges) == len(self.edges):
            return self
        return replace(self, edges=edges)

    # -- for people --------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        shr = self.shr
        return {
            "sharings": [s.name for s in self.sharings],
            "mvs": {s.name: s.mv.label for s in self.sharings},
            "vertices": [{"vertex": v.label, "kind": v.kind, "machine": v.machine,
                          "shr": by_number(shr.get(v, ()))}
                         for v in sorted(self.vertices, key=lambda v: (v.machine, v.label))],
            "edges": [edge_to_json(e) | {"shr": by_number(shr.get(e.dst, ()))}
                      for e in self.edges],
        }


def by_number(names: Iterable[str]) -> list[str]:
    """Sharing names in natural order (S2 before S10).

    >>> by_number(frozenset({"S10", "S2", "x"}))
    ['S2', 'S10', 'x']
    """
    import re

    return sorted(names, key=lambda n: [int(t) if t.isdigit() else t
                                        for t in re.split(r"(\d+)", n)])
