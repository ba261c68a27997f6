"""The global plan D (paper §7, docs/design/semantics.md §8): every admitted sharing's plan
merged into one DAG.

Vertices are named by their contents (`expr.Expr`), so merging is a union: a vertex two
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
from typing import TYPE_CHECKING, Any, TypeVar

from smile.errors import PlanError
from smile.optimizer.plan import (
    Edge,
    Plan,
    Vertex,
    edge_seconds,
    edge_to_json,
)
from smile.optimizer.soundness import edge_problem

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from smile.costmodel.time_model import TimeModel


MEMO = 4
"""How many results of each kind (`arrivals`, `load.assess`) a global plan keeps, for as many
different time models, catalog snapshots or x."""
T = TypeVar("T")


@dataclass(frozen=True)
class SharingEntry:
    """What D keeps of one admitted sharing besides its vertices."""

    name: str
    mv: Vertex
    sources: tuple[Vertex, ...]
    sla_s: float
    penalty_per_tuple: float
    outputs: tuple[tuple[str, str], ...]
    """The MV's columns as its consumer sees them: (name, SQL over `alias.column`, or over the
    aggregate's slots `"__agg"."g0"`, `"__agg"."a1"`)."""
    mv_rate: float = 0.0
    """Tuples per second arriving at the MV (λ of the penalty's M/M/1 model)."""
    algorithm: str = ""
    """Which plan admission took for it (DPD or DPT)."""
    where: str = ""
    """A predicate over the same references as `outputs` that the consumer's view applies
    (HAVING, or what must see an outer join's padded rows); '' for none."""
    group: str = ""
    """The key of the consistent group it is in (`groups.key`); '' for none."""


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
            mv_rate, algorithm, plan.where))

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

    def readers(self, relation: str) -> set[str]:
        """The sharings that read the base relation `relation` (names of published tables
        are unique across machines)."""
        return {name for v, names in self.shr.items() for p in v.expr.parts
                if p.relation == relation for name in names}

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
        names: dict[int, frozenset[str]] = {}
        out = {}
        for v, mask in self.shr_masks.items():
            got = names.get(mask)
            if got is None:
                got = names[mask] = frozenset(self.named(mask))
            out[v] = got
        return out

    def named(self, mask: int) -> list[str]:
        """The names of the sharings of a mask of `shr_masks`."""
        out = []
        while mask:
            low = mask & -mask
            out.append(self.sharings[low.bit_length() - 1].name)
            mask ^= low
        return out

    @cached_property
    def shr_masks(self) -> dict[Vertex, int]:
        """SHR(v) as a bit mask over `sharings` (bit i: the i-th sharing), for every vertex
        that feeds a MV: each vertex's is its own MVs' and those of every vertex it feeds,
        made in one pass from the MVs up."""
        masks = dict(self.mv_masks)
        for v in reversed(self.position):
            m = masks.get(v, 0)
            for e in self.outgoing.get(v, ()):
                m |= masks.get(e.dst, 0)
            if m:
                masks[v] = m
        return masks

    @cached_property
    def mv_masks(self) -> dict[Vertex, int]:
        """Each MV's sharings, as a mask of `shr_masks`."""
        masks: dict[Vertex, int] = {}
        for i, s in enumerate(self.sharings):
            masks[s.mv] = masks.get(s.mv, 0) | 1 << i
        return masks

    @cached_property
    def position(self) -> dict[Vertex, int]:
        """Every vertex's place in one order where each comes after those it reads (for a D
        made by `add`, its parent's order and then the vertices it adds; else the captured
        bases first, then `order()`)."""
        return {v: i for i, v in enumerate(self._topological)}

    @cached_property
    def _topological(self) -> tuple[Vertex, ...]:
        sources = sorted(v for v in self.vertices if v not in self.incoming)
        return (*sources, *self._order)

    def edges_of(self, name: str) -> list[Edge]:
        keep = self.of_sharing(name)
        return [e for e in self.edges if e.dst in keep]

    def plan_of(self, name: str) -> Plan:
        """One sharing's part of D as a plan of its own (shared vertices included)."""
        s = self.sharing(name)
        return Plan(name, tuple(self.edges_of(name)), s.mv, s.sources, s.outputs, s.where)

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
        return Plan(plan.sharing, tuple(self.feeding([mv])), mv, sources, plan.outputs,
                    plan.where)

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
        """When a push of `x` seconds of updates reaches each vertex (sources at 0). Without
        `seconds`, kept for the next call with an equal model and `x` (D is a value; the
        result must not be changed)."""
        if seconds is None:
            return self.remembered("arrivals", (model, x), lambda: self.arrivals(
                model, x, self.seconds(model, x)))
        out: dict[Vertex, float] = {}
        for v in self.order():
            e = self.incoming[v]
            out[v] = max(out.get(s, 0.0) for s in e.sources) + seconds[e]
        return out

    def seconds(self, model: TimeModel, x: float = 1.0) -> dict[Edge, float]:
        """Each edge's seconds for a push of `x` seconds of updates (`plan.edge_seconds`), kept
        like `arrivals`."""
        return self.remembered("seconds", (model, x),
                               lambda: {e: edge_seconds(e, model, x) for e in self.edges})

    def remembered(self, what: str, key: tuple[Any, ...], make: Callable[[], T]) -> T:
        """What `make()` gives for `what` and `key`, made once per D for each of the last
        `MEMO` keys (compared by identity, then equality): D is a value, and what is made
        from it and from values (a time model, a catalog snapshot) is one too — it must not
        be changed."""
        got = self.recalled(what, key)
        if got is None:
            got = make()
            self.remember(what, key, got)
        return got  # type: ignore[no-any-return]

    def recalled(self, what: str, key: tuple[Any, ...]) -> Any:
        """What `remember` kept for `what` and `key` (None: nothing)."""
        for k, got in self.__dict__.get(f"_memo_{what}", ()):
            if all(a is b or a == b for a, b in zip(k, key, strict=True)):
                return got
        return None

    def remember(self, what: str, key: tuple[Any, ...], value: Any) -> None:
        """Keep `value` for `what` and `key` with D (see `remembered`)."""
        memo: list[tuple[tuple[Any, ...], Any]] = self.__dict__.setdefault(f"_memo_{what}", [])
        memo[:] = [*memo[-(MEMO - 1):], (key, value)]

    def cp(self, name: str, model: TimeModel, x: float = 1.0) -> float:
        """A sharing's critical path in D: when a push of `x` seconds reaches its MV."""
        return self.arrivals(model, x).get(self.sharing(name).mv, 0.0)

    def cps(self, model: TimeModel, x: float = 1.0) -> dict[str, float]:
        arrive = self.arrivals(model, x)
        return {s.name: arrive.get(s.mv, 0.0) for s in self.sharings}

    def problems(self) -> list[str]:
        """What is unsound in D, in words (empty when nothing is): every edge's destination
        must be computable from what it reads (`edge_problem`)."""
        return [p for e in self.edges if (p := edge_problem(e)) is not None]

    # -- changing --------------------------------------------------------------------------
    def add(self, plan: Plan, entry: SharingEntry) -> GlobalPlan:
        """D with `plan` merged in: its vertices that D has already are D's (with D's route);
        the rest come with their edges. Vertices left reaching no MV are pruned."""
        if entry.name in self.names():
            raise PlanError(f"a sharing named {entry.name!r} is already in the global plan")
        have = set(self.incoming)
        new: dict[Vertex, Edge] = {}
        for e in plan.edges:
            if e.dst not in have:
                new[e.dst] = e
                have.add(e.dst)
        if not self.recalled("pruned", ()):
            return replace(self, edges=(*self.edges, *new.values()),
                           sharings=(*self.sharings, entry)).pruned()
        # D reaches its MVs already, and its vertices read none of the new ones: what the new
        # edges do not bring to the new MV is all there is to prune
        reach, todo = {entry.mv}, [entry.mv]
        while todo:
            step = new.get(todo.pop())
            for u in step.sources if step is not None else ():
                if u not in reach:
                    reach.add(u)
                    todo.append(u)
        out = replace(self, edges=(*self.edges, *(e for v, e in new.items() if v in reach)),
                      sharings=(*self.sharings, entry))
        out.remember("pruned", (), True)
        out._grown_from(self)
        return out

    def _grown_from(self, parent: GlobalPlan) -> None:
        """Know what `parent` knew, with this D's additions (its edges after the parent's, and
        its last sharing): adding a sharing changes no arrival of the parent's vertices and
        adds the new sharing to the SHR of what its MV reads only."""
        new = self.edges[len(parent.edges):]
        order = self._grown_structure(parent, new)
        self._grown_sharing(parent)
        for (model, x), took in parent.__dict__.get("_memo_seconds", ()):
            self.remember("seconds", (model, x), took | {e: edge_seconds(e, model, x)
                                                         for e in new})
        for (model, x), at in parent.__dict__.get("_memo_arrivals", ()):
            grown = dict(at)
            for v in order:
                e = self.incoming[v]
                grown[v] = max(grown.get(s, 0.0) for s in e.sources) + edge_seconds(e, model, x)
            self.remember("arrivals", (model, x), grown)

    def _grown_structure(self, parent: GlobalPlan, new: tuple[Edge, ...]) -> list[Vertex]:
        """`incoming`, `outgoing`, `vertices` and an order from the parent's; the new edges'
        destinations, each after those it reads."""
        incoming = dict(parent.incoming)
        outgoing = defaultdict(list, parent.outgoing)
        for e in new:
            incoming[e.dst] = e
            for s in dict.fromkeys(e.sources):
                outgoing[s] = [*outgoing.get(s, ()), e]
        added = {e.dst for e in new}
        fresh = {s for e in new for s in e.sources if s not in added} - parent.vertices
        order: list[Vertex] = []
        waiting = {e.dst: {s for s in e.sources if s in added} for e in new}
        while waiting:
            ready = [v for v, w in waiting.items() if not w]
            for v in ready:
                del waiting[v]
                for w in waiting.values():
                    w.discard(v)
            order += ready
        self.__dict__.update(incoming=incoming, outgoing=outgoing,
                             vertices=parent.vertices | added | fresh | {self.sharings[-1].mv})
        self.__dict__["_topological"] = (*parent._topological, *sorted(fresh),
                                         *(v for v in order if v not in parent.vertices))
        return order

    def _grown_sharing(self, parent: GlobalPlan) -> None:
        """`mv_masks`, `shr_masks` (and `shr`, if the parent had it): the new sharing added to
        its MV and what that reads."""
        bit = 1 << (len(self.sharings) - 1)
        mv = self.sharings[-1].mv
        masks = dict(parent.shr_masks)
        grew = self.ancestors(mv) | {mv}
        for v in grew:
            masks[v] = masks.get(v, 0) | bit
        self.__dict__["mv_masks"] = {**parent.mv_masks, mv: parent.mv_masks.get(mv, 0) | bit}
        self.__dict__["shr_masks"] = masks
        if "shr" in parent.__dict__:
            shr = dict(parent.shr)
            names: dict[int, frozenset[str]] = {}
            for v in grew:
                m = masks[v]
                shr[v] = names[m] if m in names else names.setdefault(m, frozenset(self.named(m)))
            self.__dict__["shr"] = shr

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
        """Only what reaches some MV (and the MVs); known to be so afterwards (`add` then
        prunes only what it adds)."""
        keep: set[Vertex] = {s.mv for s in self.sharings}
        todo = list(keep)
        incoming = self.incoming
        while todo:
            e = incoming.get(todo.pop())
            if e is not None:
                for u in e.sources:
                    if u not in keep:
                        keep.add(u)
                        todo.append(u)
        edges = tuple(e for e in self.edges if e.dst in keep)
        out = self if len(edges) == len(self.edges) else replace(self, edges=edges)
        out.remember("pruned", (), True)
        return out

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

