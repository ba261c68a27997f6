"""What the DP of one sharing reads (paper §6): the query's space (`dp_space.Space`: estimates,
prices per machine, the push period), the capacity left on each machine, and what the global
plan D computes already (`Reuse`).

A state `<R, m>` is named by its contents (`Context.content`), so a state D holds already —
its delta and relation at `m` — is free for the new sharing and its route there is D's own
(`Context.reused`).

Must not: search, build plans or touch a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.costmodel.formulas import push_period
from smile.optimizer.dp_space import Space, space_for
from smile.optimizer.dp_state import State
from smile.optimizer.plan import Vertex

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from smile.costmodel.prices import Prices
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.expr import Expr
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.sharing import Sharing, SpjQuery


@dataclass(frozen=True)
class Reuse:
    """What the global plan D computes already, for the DP to build on: D itself, and when a
    push reaches each of its vertices (`GlobalPlan.arrivals`, x = 1 s).

    A state `<R, m>` whose delta ΔR and relation R (by contents, `Context.content`) D holds at
    `m` costs the new sharing nothing: its plan reads them as they are, and merged into D its
    route there is D's own. Without it the DP, which sees D's load but not its vertices, picks
    each sharing's join order as if it were alone, and two sharings over the same three
    relations can share no intermediate (docs/design/optimizer.md, "Plans built on D")."""

    d: GlobalPlan
    arrival: Mapping[Vertex, float]

    @staticmethod
    def of(d: GlobalPlan, model: TimeModel) -> Reuse:
        return Reuse(d, d.arrivals(model))

    def holds(self, *vertices: Vertex) -> bool:
        return all(v in self.d.incoming for v in vertices)


@dataclass(frozen=True)
class Overflow:
    """One bound a plan's usage would cross (`Context.overflows`)."""

    machine: str | None
    """None: the operator work of all the box's machines together."""
    resource: int
    """Its index in `load.RESOURCES`."""
    added: float
    room: float


def sharing_period(sharing: Sharing) -> float:
    """The push period the DP charges fixed costs by: the lazy executor's, before the plan's
    own critical path is known (the global plan's assessment refines it)."""
    return push_period(sharing.staleness_s, 0.0, 0.0)


class Context:
    """What the DP of one sharing reads: its query's `Space` (estimates, prices per machine,
    the push period fixed costs are charged by, the figures of every join step), the capacity
    left on each machine and D's vertices (`reuse`). `cached`: take the space from the cache
    shared between admissions (`dp_space.space_for`), else build it afresh."""

    def __init__(self, catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing,
                 model: TimeModel, prices: Prices, reuse: Reuse | None = None,
                 cached: bool = False) -> None:
        period = sharing_period(sharing)
        self.space: Space = (space_for(catalog, query, model, prices, period) if cached
                             else Space(catalog, query, model, prices, period))
        self.catalog, self.query, self.sharing, self.model = catalog, query, sharing, model
        self.prices, self.reuse = prices, reuse
        sp = self.space
        self.est, self.machines, self.index = sp.est, sp.machines, sp.index
        self.cpu_price, self.net_price, self.store_price = (sp.cpu_price, sp.net_price,
                                                            sp.store_price)
        self.all, self.period = sp.all, period
        box = catalog.box_bound  # on one box: the operator work left to all together
        self.box_room = None if box is None else \
            box - sum(catalog.used(m.name).cpu_cores for m in catalog.machines)
        self.room = []
        for m in catalog.machines:
            u = catalog.used(m.name)
            cpu = self.box_room if self.box_room is not None else m.cpu_bound - u.cpu_cores
            self.room.append((cpu, m.disk_gb - u.disk_gb, m.network_mb_s - u.network_mb_s))
        self.flat_room = [x for room in self.room for x in room]

    def seconds(self, kind: str, tuples: float) -> float:
        return self.space.seconds(kind, tuples)

    def load(self, kind: str, tuples: float) -> float:
        """The edge's work per second on its machine when pushed once per period."""
        return self.space.load(kind, tuples)

    def content(self, aliases: frozenset[str] | list[str] | tuple[str, ...]) -> Expr:
        """What σπ(⋈ aliases) holds (`Space.content`)."""
        return self.space.content(aliases)

    def result(self, R: frozenset[str], mi: int) -> tuple[Vertex, Vertex]:
        """ΔR and R at machine `mi`, named by their contents."""
        expr = self.content(R)
        return Vertex("delta", expr, self.machines[mi]), Vertex("relation", expr,
                                                                 self.machines[mi])

    def reused(self, R: frozenset[str], mi: int) -> State | None:
        """`<R, mi>` as D holds it already (`Reuse`): free, arriving when D's push does."""
        if self.reuse is None:
            return None
        d, r = self.result(R, mi)
        if not self.reuse.holds(d, r):
            return None
        dl, rl = self.reuse.arrival.get(d, 0.0), self.reuse.arrival.get(r, 0.0)
        return State(dl, rl, 0.0, 0.0, (0.0,) * (3 * len(self.machines)), None, reused=True)

    def fits(self, usage: tuple[float, ...]) -> bool:
        """Whether what `usage` adds fits the room left on each machine it adds to. A machine
        the plan does not use is not asked: one already over its bound (its tables grew) must
        not refuse a sharing that runs elsewhere. On one box the operator work it adds is
        also held together against the room the box leaves (`CatalogSnapshot.one_box`). The
        same test as `overflows`, without its objects: the DP asks it of every state it keeps."""
        if self.box_room is not None:
            added = sum(usage[0::3])
            if added > 1e-12 and added > self.box_room + 1e-12:
                return False
        for added, room in zip(usage, self.flat_room, strict=True):
            if added > 1e-12 and added > room + 1e-12:
                return False
        return True

    def overflows(self, usage: tuple[float, ...]) -> Iterator[Overflow]:
        """Where what `usage` adds does not fit (`fits`), the box's operator work first."""
        if self.box_room is not None:
            added = sum(usage[0::3])
            if added > 1e-12 and added > self.box_room + 1e-12:
                yield Overflow(None, 0, added, self.box_room)
        for i, room in enumerate(self.room):
            for k in range(3):
                added = usage[3 * i + k]
                if added > 1e-12 and added > room[k] + 1e-12:
                    yield Overflow(self.machines[i], k, added, room[k])

    def flat(self, usage: dict[str, tuple[float, float, float]]) -> tuple[float, ...]:
        """machine → (cores, GB, MB/s) as the DP's usage tuple (3 per machine, in order)."""
        return tuple(x for m in self.machines for x in usage.get(m, (0.0,) * 3))
