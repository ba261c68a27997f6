"""What the global plan D costs and weighs on each machine, as the lazy executor runs it
(paper §5.2 and §8.2, docs/design/semantics.md §5–6).

- **Push periods.** Each sharing is pushed every P seconds, P = (l·s − lag − CP(0) − d) /
  (1 + CP'), from its SLA and its critical path in D (`formulas.push_period`), d being how
  much longer than that path a running sharing's pushes have taken (`CatalogSnapshot.delays`,
  learnt by the executor): the lazy rule adds it to CP, so its pushes come that much sooner.
- **Shared pushes** (`CatalogSnapshot.shared_pushes`, `ride_split`). The executor pushes
  a sharing along with a due one that advances most of its vertices (a companion) once it
  is past half its SLA. `ride_split` plays that rule out over the sharings' own periods: each
  sharing's period is what it gives, and its pushes are split into those it starts and those
  it goes along with a companion's, so that a vertex is charged a push a group makes once
  (`pushes_per_s`). Sharings with about equal periods lock into step (one starts, the others
  ride every push), which a count of pushes out of step missed (docs/design/optimizer.md,
  "Shared pushes in the load model").
- **Consistent groups** (docs/design/groups.md). A group's members are pushed together at
  the period of its tightest SLA with the group's critical path (`groups.timing`): its first
  member starts each push, the others go along (`_group_rides`), so a vertex several members
  share is charged once per push of the group; they neither take nor go along with others.
- **Load.** An edge runs once per push that advances it: without shared pushes once per push
  of each sharing it serves, Σ 1/P over its SHR; with them once per push one of its SHR
  starts or goes along with a companion outside it (`Assessment.pushes`). Its per-tuple cost
  counts once per tuple:
  core-seconds per second on the machine of its destination (the agent that runs it). A
  vertex several sharings share — R̂'s upkeep included — is one edge, charged once. Each
  machine's load is held against its bound,
  `cores × max_load`. Where the machine's load was measured (`CatalogSnapshot.busy`), what a
  change of D adds is also held on top of that measurement (`measured_over`): the model may
  under-rate a join it has not seen run, and a machine already over its bound takes nothing
  more. Machines that share one box (the local cloud, `CatalogSnapshot.one_box`) are held
  together instead (`box_over`): their total load, predicted and measured, against the sum
  of their shares, while each may carry up to that sum on its own
  (`CatalogSnapshot.cpu_limit`) — their clusters' backends run on any of the box's cores, and
  held to a third each, `loc⋈tweets` on m2 was refused at 1000 tweets/s with m1 and m3 near
  idle (docs/design/executor.md, "Capacity on this box").
- **Dollars.** Per edge: its load × the machine's price per core-second, the bytes it moves
  between machines × the network price, and what its relation stores × the storage price; the
  whole over-provisioned by the paper's (1 + CP/s) of the most demanding sharing it serves.
  Per sharing: the M/M/1 penalty λ·P_late·pen. COST(D) is their sum, in $/s.

Must not: touch a database; D and the catalog snapshot are handed in.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from smile.costmodel.formulas import (
    LAZINESS,
    SHARE_FROM,
    SHARE_OVERLAP,
    edge_load,
    late_penalty_per_s,
    push_period,
)
from smile.costmodel.prices import Prices
from smile.optimizer import groups
from smile.optimizer.plan import (
    CopyDelta,
    DeltaToRel,
    Edge,
    edge_kind,
    edge_seconds,
    edge_tuples,
)
from smile.optimizer.recompute_load import cheaper_charges

if TYPE_CHECKING:
    from collections.abc import Iterable

    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot, Machine
    from smile.optimizer.global_plan import GlobalPlan

BOX = "*"
"""`Overload.machine` of the machines of one box taken together (`box_over`)."""
RESOURCES = (("operator work", "core-s/s"), ("storage", "GB"), ("network", "MB/s"))
"""What a machine's bounds (`Assessment.bounds`) bound, in their order, with their units."""


@dataclass(frozen=True)
class Overload:
    machine: str
    resource: str
    load: float
    bound: float
    unit: str

    def __str__(self) -> str:
        who = "the machines together" if self.machine == BOX else f"machine {self.machine}"
        return (f"{who} would carry {self.load:.3f} {self.unit} of {self.resource}, over "
                f"{'the sum of their shares' if self.machine == BOX else 'its bound'} of "
                f"{self.bound:.3f}")


@dataclass(frozen=True)
class Rides:
    """How shared pushes make a sharing's pushes (`ride_split`): `starts[s]`, the pushes per
    second `s` starts itself, falling due; `along[s][c]`, those it goes along with a push
    companion `c` starts. Together they are its 1/P."""

    starts: dict[str, float]
    along: dict[str, dict[str, float]]

    def period(self, s: str) -> float:
        """Seconds between `s`'s pushes, started or along."""
        return 1.0 / (self.starts[s] + sum(self.along.get(s, {}).values()))


@dataclass(frozen=True)
class Assessment:
    periods: dict[str, float]
    """sharing → seconds between its pushes."""
    cps: dict[str, float]
    """sharing → critical path (x = 1 s of updates) in D."""
    edge_load: dict[Edge, float]
    """core-seconds per second each edge takes on its machine."""
    edge_cost: dict[Edge, float]
    """$/s of each edge, over-provisioned."""
    penalties: dict[str, float]
    machine_load: dict[str, float]
    machine_disk_gb: dict[str, float]
    machine_net_mb_s: dict[str, float]
    bounds: dict[str, tuple[float, float, float]]
    """machine → (cores busy, GB, MB/s) it may carry (cores: `CatalogSnapshot.cpu_limit`,
    on one box all the box leaves operators)."""
    slas: dict[str, float]
    shares: dict[str, float] = field(default_factory=dict)
    """machine → its own bound of operator work (`Machine.cpu_bound`): on one box its share
    of what the box leaves operators, else the same as its bound."""
    box: float | None = None
    """On one box, the operator work its machines may carry together (`box_over`)."""
    model: TimeModel | None = None
    """The time model it was made with: each edge was charged its `edge_line` — its kind's
    line times its vertex's scale — which with `edge_tuples` and `pushes` is what its load is
    made of (`edge_load`)."""
    rides: Rides | None = None
    """With shared pushes, which of each sharing's pushes it starts and which it rides along
    with whom (`ride_split`); None: each push of each sharing is its own."""

    by_serves: dict[frozenset[str], tuple[float, float]] = field(
        default_factory=dict, compare=False, repr=False)
    """(pushes per second, over-provisioning) of an edge serving each set of sharings asked
    about, D's own first (`pushes`, `provision`): hill-climbing asks of the same sets again
    and again, and a set can hold hundreds of sharings."""
    recomputed: frozenset[str] = frozenset()
    """Sharings charged what recomputing costs, being cheaper than applying their deltas
    (`recompute_load.cheaper_charges`)."""

    def pushes(self, serves: Iterable[str]) -> float:
        """Pushes per second of an edge that serves `serves` (`pushes_per_s`)."""
        if not isinstance(serves, frozenset):
            return pushes_per_s(self.periods, serves, self.rides)
        return self._of(serves)[0]

    def provision(self, serves: Iterable[str]) -> float:
        """How much an edge serving `serves` is over-provisioned (`provision_of`)."""
        if not isinstance(serves, frozenset):
            return provision_of(self.cps, self.slas, serves)
        return self._of(serves)[1]

    def _of(self, serves: frozenset[str]) -> tuple[float, float]:
        got = self.by_serves.get(serves)
        if got is None:
            got = self.by_serves[serves] = (pushes_per_s(self.periods, serves, self.rides),
                                            provision_of(self.cps, self.slas, serves))
        return got

    @property
    def total(self) -> float:
        """COST(D) in $/s."""
        return sum(self.edge_cost.values()) + sum(self.penalties.values())

    def per_sharing_second(self) -> float:
        return self.total / max(1, len(self.cps))

    def carried(self, resource: str) -> dict[str, float]:
        """machine → what it carries of `resource` (one of `RESOURCES`)."""
        return {"operator work": self.machine_load, "storage": self.machine_disk_gb,
                "network": self.machine_net_mb_s}[resource]

    def over(self) -> list[Overload]:
        out = []
        for m, bounds in self.bounds.items():
            for (resource, unit), bound in zip(RESOURCES, bounds, strict=True):
                load = self.carried(resource).get(m, 0.0)
                if load > bound + 1e-12:
                    out.append(Overload(m, resource, load, bound, unit))
        return out

    def late(self) -> list[str]:
        """Sharings whose critical path in D exceeds their SLA."""
        return [s for s, cp in self.cps.items() if cp > self.slas[s] + 1e-12]


def raised(before: Assessment, after: Assessment) -> list[Overload]:
    """`after.over()` on the machines `after` loads more than `before` did: a machine already
    over its bound (its tables grew since the sharings on it were admitted) takes nothing
    more, but does not refuse a change that adds nothing to it."""
    return [o for o in after.over()
            if o.load > before.carried(o.resource).get(o.machine, 0.0) + 1e-9]


def measured_over(before: Assessment, after: Assessment,
                  catalog: CatalogSnapshot) -> list[Overload]:
    """Machines on which the load `after` adds to `before` would, on top of their measured
    load, go over their bound (machines it adds nothing to are not asked)."""
    out = []
    for m, busy in catalog.busy:
        added = after.machine_load.get(m, 0.0) - before.machine_load.get(m, 0.0)
        bound = after.bounds.get(m, (0.0, 0.0, 0.0))[0]
        if added > 1e-9 and busy + added > bound + 1e-12:
            out.append(Overload(m, "operator work (measured, plus what it adds)",
                                busy + added, bound, "core-s/s"))
    return out


def box_over(before: Assessment, after: Assessment,
             catalog: CatalogSnapshot) -> list[Overload]:
    """On one box (`CatalogSnapshot.one_box`), when `after` adds operator work to the box:
    the machines' total load — predicted, and measured plus what `after` adds — if over the
    sum of their shares (`Assessment.box`). Each machine on its own may take up to that sum
    (`raised`'s and `measured_over`'s bound): the box's cores are anyone's."""
    if after.box is None:
        return []
    predicted = sum(after.machine_load.values())
    added = predicted - sum(before.machine_load.values())
    if added <= 1e-9:
        return []
    bound = after.box
    out = []
    if predicted > bound + 1e-12:
        out.append(Overload(BOX, "operator work", predicted, bound, "core-s/s"))
    measured = sum(busy for _, busy in catalog.busy)
    if catalog.busy and measured + added > bound + 1e-12:
        out.append(Overload(BOX, "operator work (measured, plus what it adds)",
                            measured + added, bound, "core-s/s"))
    return out


def assess(plan: GlobalPlan, catalog: CatalogSnapshot, model: TimeModel,
           prices: Prices | None = None, laziness: float = LAZINESS) -> Assessment:
    """What D costs and weighs on each machine (see the module's docstring); made once per D
    for the same catalog snapshot, model, prices and laziness (`GlobalPlan.remembered`: the
    D an admission leaves is the D the next one starts from)."""
    prices = prices or Prices()
    return plan.remembered("assess", (catalog, model, prices, laziness),
                           lambda: _assess(plan, catalog, model, prices, laziness))


def _assess(plan: GlobalPlan, catalog: CatalogSnapshot, model: TimeModel, prices: Prices,
            laziness: float) -> Assessment:
    machines = {m.name: m for m in catalog.machines}
    seconds = {e: edge_seconds(e, model) for e in plan.edges}
    cps, periods, rides = _periods(plan, catalog, model, laziness)
    slas = {s.name: s.sla_s for s in plan.sharings}
    for names in groups.groups(plan).values():  # a group's SLA is its tightest member's
        slas.update(dict.fromkeys(names, min(slas[n] for n in names)))
    shr = plan.shr
    loads: dict[Edge, float] = {}
    costs: dict[Edge, float] = {}
    m_load: dict[str, float] = dict.fromkeys(machines, 0.0)
    m_disk: dict[str, float] = dict.fromkeys(machines, 0.0)
    m_net: dict[str, float] = dict.fromkeys(machines, 0.0)
    by_serves: dict[frozenset[str], tuple[float, float]] = {}  # → (pushes, provision)
    busiest: dict[frozenset[str], float] = {}  # → the most seconds of an edge serving them
    nothing: frozenset[str] = frozenset()
    for e in plan.edges:
        serves = shr.get(e.dst, nothing)
        got = by_serves.get(serves)
        if got is None:
            got = by_serves[serves] = (pushes_per_s(periods, serves, rides),
                                       provision_of(cps, slas, serves))
        m = machines[e.dst.machine]
        loads[e], costs[e] = price_edge(e, got[0], got[1], model, m, prices)
        m_load[m.name] += loads[e]
        if isinstance(e, CopyDelta) and e.crosses_machines:
            nbytes = e.tuples_per_s * e.bytes_per_tuple
            m_net[e.src.machine] += nbytes / 1e6
            m_net[e.dst.machine] += nbytes / 1e6
        if isinstance(e, DeltaToRel):
            m_disk[m.name] += e.stored_bytes / 1e9
        busiest[serves] = max(busiest.get(serves, 0.0), seconds[e])
    cheaper, recomputed = cheaper_charges(
        plan, catalog, model, lambda s: pushes_per_s(periods, [s], rides), loads) \
        if catalog.chooses_paths else ({}, frozenset())
    for e, load in cheaper.items():  # charged by recompute: the cheaper path
        m_load[e.dst.machine] += load - loads[e]
        costs[e] *= load / loads[e] if loads[e] > 0 else 1.0
        loads[e] = load
    rho: dict[str, float] = dict.fromkeys(cps, 0.0)
    for serves, most in busiest.items():
        for name in serves:
            rho[name] = max(rho[name], most)
    penalties = {s.name: late_penalty_per_s(s.mv_rate, rho[s.name], s.sla_s,
                                            s.penalty_per_tuple) for s in plan.sharings}
    bounds = {name: (catalog.cpu_limit(name), m.disk_gb, m.network_mb_s)
              for name, m in machines.items()}
    return Assessment(periods, cps, loads, costs, penalties, m_load, m_disk, m_net, bounds,
                      slas, {name: m.cpu_bound for name, m in machines.items()},
                      catalog.box_bound, model, rides, by_serves, recomputed)


def _periods(plan: GlobalPlan, catalog: CatalogSnapshot, model: TimeModel,
             laziness: float) -> tuple[dict[str, float], dict[str, float], Rides | None]:
    """(critical paths, push periods, shared pushes) of D's sharings."""
    at1, at0 = plan.arrivals(model, 1.0), plan.arrivals(model, 0.0)  # (kept with D)
    delays = dict(catalog.delays)  # a running sharing's pushes start that much earlier
    team = groups.timing(plan, at1, at0, plan.seconds(model, 1.0), plan.seconds(model, 0.0),
                         delays) if any(s.group for s in plan.sharings) else {}
    cps, periods, shares = {}, {}, {}
    for s in plan.sharings:
        cp1, cp0, sla, delay = team.get(s.name) or (
            at1.get(s.mv, 0.0), at0.get(s.mv, 0.0), s.sla_s, delays.get(s.name, 0.0))
        cps[s.name] = cp1
        periods[s.name] = period_of(sla, cp1, cp0, delay, laziness)
        if catalog.shared_pushes:  # assessed many times over in a hill-climb: only if used
            shares[s.name] = period_of(sla, cp1, cp0, delay, SHARE_FROM)
    rides = None
    if catalog.shared_pushes:
        comps = companions(plan)
        if team:  # a group's pushes take no other sharing along, nor go along with one
            comps = {s: () if s in team else tuple(c for c in cs if c not in team)
                     for s, cs in comps.items()}
        rides = ride_split(comps, periods, shares)
    if team:
        rides = _group_rides(plan, periods, rides)
    if rides is not None:
        periods = {s: rides.period(s) for s in periods}
    return cps, periods, rides


def _group_rides(plan: GlobalPlan, periods: dict[str, float], rides: Rides | None) -> Rides:
    """`rides` (None: every sharing starts each of its pushes) with each group's pushes as
    the executor makes them: its first member starts every push of the group, the others go
    along, so a vertex several members share is charged once per push of the group."""
    starts = dict(rides.starts) if rides is not None else {s: 1.0 / p for s, p in
                                                           periods.items()}
    along = dict(rides.along) if rides is not None else {}
    for names in groups.groups(plan).values():
        rate = 1.0 / periods[names[0]]
        starts[names[0]] = rate
        along.pop(names[0], None)
        for other in names[1:]:
            starts[other] = 0.0
            along[other] = {names[0]: rate}
    return Rides(starts, along)


def period_of(sla_s: float, cp1: float, cp0: float, delay: float, laziness: float) -> float:
    """A sharing's push period from its critical path for one second of updates (`cp1`) and
    for none (`cp0`), and its pushes' learnt delay (`formulas.push_period`)."""
    return push_period(sla_s, cp0 + delay, max(0.0, cp1 - cp0), laziness)


def provision_of(cps: dict[str, float], slas: dict[str, float], serves: Iterable[str]) -> float:
    """How much an edge serving `serves` is over-provisioned: the paper's CP/s of the most
    demanding of them (0 for none)."""
    return max((cps[name] / slas[name] for name in serves), default=0.0)


def price_edge(e: Edge, pushes: float, provision: float, model: TimeModel, machine: Machine,
               prices: Prices) -> tuple[float, float]:
    """(load, $/s) of edge `e` pushed `pushes` times a second, on `machine`: its fixed work
    once per push and its work per tuple (`formulas.edge_load`) at the machine's price, the
    bytes it moves between machines, what it stores — over-provisioned by `provision`."""
    line = model.edge_line(edge_kind(e), e.dst.label)
    load = edge_load(line.a, line.b, edge_tuples(e), pushes)
    dollars = load * prices.cpu_per_core_second(machine.price_per_hour, machine.cpu_cores)
    if isinstance(e, CopyDelta) and e.crosses_machines:
        nbytes = e.tuples_per_s * e.bytes_per_tuple
        dollars += nbytes * prices.network_per_byte()
    if isinstance(e, DeltaToRel):
        dollars += e.stored_bytes * prices.storage_per_byte_second()
    return load, dollars * (1.0 + provision)


def pushes_per_s(periods: dict[str, float], serves: Iterable[str],
                 rides: Rides | None = None) -> float:
    """Pushes per second of an edge that serves `serves` (KeyError for a sharing without a
    period): once per push of each of them; with `rides`, once per push one of them starts
    and per push it goes along with a companion outside `serves` — one it goes along with a
    companion of `serves` is that companion's push, and the vertex is advanced once for both.

    >>> round(pushes_per_s({"a": 5.0, "b": 10.0}, ["a", "b"]), 6)
    0.3
    >>> r = Rides({"a": 0.2, "b": 0.0}, {"b": {"a": 0.1}})  # b always rides along with a
    >>> round(pushes_per_s({"a": 5.0, "b": 10.0}, ["a", "b"], r), 6), pushes_per_s({}, ["b"], r)
    (0.2, 0.1)
    """
    if rides is None:
        return sum(1.0 / periods[s] for s in serves)
    mine = set(serves)
    return sum(rides.starts[s] + sum(n for c, n in rides.along.get(s, {}).items()
                                     if c not in mine) for s in mine)


RIDE_CYCLES = 40
"""`ride_split` plays the executor's rule over this many of the longest own period..."""
RIDE_WARMUP = 8
"""...and counts the pushes after the first this many (the phases it starts from settle)."""
RIDE_EVENTS = 20_000
"""...but plays no longer than this many pushes take (a sharing with an SLA of hours beside
10-s ones): one assessment of Table 1's 25 takes about 3 ms, and hill-climbs make many."""
GOLDEN = 0.6180339887498949
"""Sharing i (by name) starts i·GOLDEN (mod 1) of its own period into it: out of step, and the
same phases for the same sharings whatever order the catalog lists them in."""


def ride_split(comps: dict[str, tuple[str, ...]], own: dict[str, float],
               share: dict[str, float]) -> Rides:
    """Which of each sharing's pushes it starts and which it goes along with a companion's
    (`comps`, `companions`), as the executor's shared pushes make them: its rule played out.

    A sharing falls due `own[s]` after its last push and starts one; every sharing with it
    among its companions goes along if `share[s]` has passed since its own last push (the
    executor's `_companions`: past `SHARE_FROM` of its SLA). Going along resets its clock, so
    sharings whose periods are about equal lock into step: once one goes along with the
    other, the one due first starts every push and the other rides every one — S3 rode
    along with S4 42 times of 43 on the main command's push log, where out-of-step pushes
    (q = (own − share)·λ, until 2026-11-28) gave 0.3. Played from out-of-step phases
    (`GOLDEN`) for `RIDE_CYCLES` of the longest own period, counted after `RIDE_WARMUP`;
    each sharing's pushes per second are its pushes over the span from its first counted
    push to its last, split between starts and rides as they came. A pair whose phases
    start in the window neither rides (one due while the other is short of `share`) stays
    out of step: the model keeps it dearer, on the safe side.

    Measured on `fig12live`'s cloud (Table 1 at SLA 45 s, 200 tweets/s), where every
    sharing's own period is within 0.3 s of 35 s and the companions lock into step: the
    model's operator seconds for DPD+HC with shared pushes were 1.25× the measured with the
    out-of-step split (21d5951), 1.05× with this one (b493b36); on the paper's catalog the
    edges' pushes come to 6.9 a second here against 7.9 so.

    >>> comps = {"a": (), "b": ("a",)}  # b's vertices are mostly a's: it rides along
    >>> r = ride_split(comps, {"a": 8.0, "b": 32.0}, {"a": 5.0, "b": 20.0})
    >>> round(r.starts["a"], 4), r.starts["b"], round(r.along["b"]["a"], 4), r.period("b")
    (0.125, 0.0, 0.0417, 24.0)
    >>> r = ride_split({"a": ("b",), "b": ("a",)}, {"a": 35.0, "b": 35.1},
    ...                {"a": 21.0, "b": 21.0})  # in step: b rides every push of a
    >>> round(r.period("a"), 3), round(r.period("b"), 3), r.starts["b"]
    (35.0, 35.0, 0.0)
    """
    names = sorted(own)
    riders = {c: [s for s in names if c in comps.get(s, ())] for c in names}
    longest = max(own.values(), default=0.0)
    horizon = min(RIDE_CYCLES * longest, RIDE_EVENTS / max(sum(1.0 / p for p in own.values()),
                                                            1e-12))
    warm = horizon * RIDE_WARMUP / RIDE_CYCLES
    last = {s: -own[s] * ((i * GOLDEN) % 1.0) for i, s in enumerate(names)}
    started = dict.fromkeys(names, 0)
    went: dict[str, dict[str, int]] = {s: {} for s in names}
    first: dict[str, float] = {}
    latest: dict[str, float] = {}
    due = [(last[s] + own[s], s) for s in names]
    heapq.heapify(due)

    def pushed(s: str, t: float) -> bool:
        last[s] = t
        heapq.heappush(due, (t + own[s], s))
        if t < warm:
            return False
        first.setdefault(s, t)
        latest[s] = t
        return True

    while due:
        t, s = heapq.heappop(due)
        if t > horizon:
            break
        if t != last[s] + own[s]:
            continue  # went along with a companion since: due later
        for o in riders[s]:
            if o != s and t - last[o] >= share[o] and pushed(o, t):
                went[o][s] = went[o].get(s, 0) + 1
        if pushed(s, t):
            started[s] += 1
    starts: dict[str, float] = {}
    along: dict[str, dict[str, float]] = {}
    for s in names:
        n = started[s] + sum(went[s].values())
        span = latest.get(s, 0.0) - first.get(s, 0.0)
        rate = (n - 1) / span if n > 1 and span > 0 else 1.0 / own[s]
        starts[s] = rate * started[s] / n if n else rate
        if went[s]:
            along[s] = {c: rate * k / n for c, k in went[s].items()}
    return Rides(starts, along)


def companions(plan: GlobalPlan) -> dict[str, tuple[str, ...]]:
    """Per sharing, the sharings a push of which can take it along (`Executor._companions`):
    those whose push advances at least `SHARE_OVERLAP` of the vertices its own advances."""
    adv = plan.advances
    return {s: tuple(c for c, theirs in adv.items() if c != s and mine
                     and len(mine & theirs) >= SHARE_OVERLAP * len(mine))
            for s, mine in adv.items()}
