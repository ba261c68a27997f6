"""What the global plan D costs and weighs on each machine, as the lazy executor runs it
(paper §5.2 and §8.2, NOTES §5–6).

- **Push periods.** Each sharing is pushed every P seconds, P = (l·s − lag − CP(0) − d) /
  (1 + CP'), from its SLA and its critical path in D (`formulas.push_period`), d being how
  much longer than that path a running sharing's pushes have taken (`CatalogSnapshot.delays`,
  learnt by the executor): the lazy rule adds it to CP, so its pushes come that much sooner.
- **Shared pushes** (`CatalogSnapshot.shared_pushes`, `shared_periods`). The executor pushes
  a sharing along with a due one that advances most of its vertices (a companion) once it
  is past half its SLA: its period is the shorter of its own and `formulas.ride_period`'s.
  Measured at 100 tweets/s with Table 1 (89ec054's bench): the 40- and 60-s sharings beside
  10-s ones were pushed every 0.64–0.68 of their own period; charged as if each went alone,
  the edges' pushes were off by 27% (median), 23% with ride periods, and their sum came to
  0.98 of the measured instead of 0.93. (eef7170 also counted the vertices a rider shares
  with the companion it follows once per push of the two: the median came to 14% but the
  sum to 0.82 — the most shared copies, R̂ of users and tweets, were pushed more often than
  that — and the bench's 1000-tweets/s round to 0.77–0.86 of the measured load; taken out.)
  Each sharing's pushes are then split into those it starts and those it goes along with a
  companion's (`ride_split`, a fixed point: what a companion starts is what it does not
  ride), so that a vertex is charged a push a group makes once (`pushes_per_s`).
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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from smile.costmodel.formulas import (
    SHARE_FROM,
    SHARE_OVERLAP,
    edge_load,
    late_penalty_per_s,
    push_period,
    ride_period,
)
from smile.costmodel.prices import Prices
from smile.optimizer.plan import (
    CopyDelta,
    DeltaToRel,
    Edge,
    edge_kind,
    edge_seconds,
    edge_tuples,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.global_plan import GlobalPlan

LAZINESS = 0.8
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

    def pushes(self, serves: Iterable[str]) -> float:
        """Pushes per second of an edge that serves `serves` (`pushes_per_s`)."""
        return pushes_per_s(self.periods, serves, self.rides)

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
    prices = prices or Prices()
    machines = {m.name: m for m in catalog.machines}
    seconds = {e: edge_seconds(e, model) for e in plan.edges}
    fixed = {e: model.seconds(edge_kind(e), 0.0, e.dst.label) for e in plan.edges}
    at1 = plan.arrivals(model, 1.0, seconds)
    at0 = plan.arrivals(model, 0.0, fixed)
    shr = plan.shr
    delays = dict(catalog.delays)  # a running sharing's pushes start that much earlier
    cps, periods, slas, shares = {}, {}, {}, {}
    for s in plan.sharings:
        cp1, cp0 = at1.get(s.mv, 0.0), at0.get(s.mv, 0.0)
        cps[s.name], slas[s.name] = cp1, s.sla_s
        d, slope = delays.get(s.name, 0.0), max(0.0, cp1 - cp0)
        periods[s.name] = push_period(s.sla_s, cp0 + d, slope, laziness)
        if catalog.shared_pushes:  # assessed many times over in a hill-climb: only if used
            shares[s.name] = push_period(s.sla_s, cp0 + d, slope, SHARE_FROM)
    rides = None
    if catalog.shared_pushes:
        own = periods
        comps = companions(plan)
        periods = shared_periods(comps, own, shares)
        rides = ride_split(comps, own, shares, periods)
    loads: dict[Edge, float] = {}
    costs: dict[Edge, float] = {}
    rho: dict[str, float] = dict.fromkeys(cps, 0.0)
    m_load: dict[str, float] = dict.fromkeys(machines, 0.0)
    m_disk: dict[str, float] = dict.fromkeys(machines, 0.0)
    m_net: dict[str, float] = dict.fromkeys(machines, 0.0)
    for e in plan.edges:
        serves = shr.get(e.dst, frozenset())
        line = model.edge_line(edge_kind(e), e.dst.label)
        pushes = pushes_per_s(periods, serves, rides)
        load = edge_load(line.a, line.b, edge_tuples(e), pushes)
        m = machines[e.dst.machine]
        dollars = load * prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)
        m_load[m.name] += load
        if isinstance(e, CopyDelta) and e.crosses_machines:
            nbytes = e.tuples_per_s * e.bytes_per_tuple
            m_net[e.src.machine] += nbytes / 1e6
            m_net[e.dst.machine] += nbytes / 1e6
            dollars += nbytes * prices.network_per_byte()
        if isinstance(e, DeltaToRel):
            m_disk[m.name] += e.stored_bytes / 1e9
            dollars += e.stored_bytes * prices.storage_per_byte_second()
        provision = max((cps[name] / slas[name] for name in serves), default=0.0)
        loads[e] = load
        costs[e] = dollars * (1.0 + provision)
        for name in serves:
            rho[name] = max(rho[name], seconds[e])
    penalties = {s.name: late_penalty_per_s(s.mv_rate, rho[s.name], s.sla_s,
                                            s.penalty_per_tuple) for s in plan.sharings}
    bounds = {name: (catalog.cpu_limit(name), m.disk_gb, m.network_mb_s)
              for name, m in machines.items()}
    return Assessment(periods, cps, loads, costs, penalties, m_load, m_disk, m_net, bounds,
                      slas, {name: m.cpu_bound for name, m in machines.items()},
                      catalog.box_bound, model, rides)


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


def shared_periods(comps: dict[str, tuple[str, ...]], own: dict[str, float],
                   share: dict[str, float]) -> dict[str, float]:
    """The push periods shared pushes make (module docstring): a sharing's companions
    (`comps`, `companions`) are the others whose push advances at least `SHARE_OVERLAP` of
    the vertices its own advances, as the executor takes them along; its period is
    `ride_period`'s, from its period alone (`own`), the one at `SHARE_FROM` of its SLA
    (`share`) and its companions' pushes per second — at their own periods, an upper
    bound where a companion rides too. Every sharing of D counts, as with one executor that
    pushes them all lazily (`SharingService.catalog` sets `shared_pushes` only then)."""
    periods = dict(own)
    for s, theirs in comps.items():
        periods[s] = ride_period(own[s], share[s], sum(1.0 / own[c] for c in theirs))
    return periods


RIDE_ROUNDS = 200
"""At most this many rounds of `ride_split`'s fixed point (it settles in a few dozen)."""


def ride_split(comps: dict[str, tuple[str, ...]], own: dict[str, float],
               share: dict[str, float], periods: dict[str, float]) -> Rides:
    """Which of each sharing's pushes (every `periods[s]`) it starts and which it goes along
    with a companion's (`comps`, `companions`), as the executor's shared pushes make them.

    A sharing goes along with a push a companion starts once `share[s]` has passed since its
    own last push, and starts one itself at `own[s]` if none came: out of step, pushes started
    at λ a second come within that window with probability q = min(1, (own − share)·λ).
    What a companion starts is what it does not ride, so the starts are found together, as a
    fixed point from every sharing starting all its own pushes. The charged periods stay
    `shared_periods`' (companions at their own rates: never fewer pushes of a sharing), split
    by q: (1 − q)/P started, q/P along with the companions in proportion to their starts.

    Measured against the push log of the main command's cloud (Table 1, 100 tweets/s, eight
    minutes): counting every push of every sharing, the edges that serve seven sharings were
    charged 2.2× the pushes they had (those serving one 0.85×); split so, 0.81× — and 0.95×
    (one: 0.97×) once the executor stopped repeating pushes and the periods were charged
    the watermark's lag (`formulas.WATERMARK_LAG_S`), all edges together 1.06×.

    >>> comps = {"a": (), "b": ("a",)}  # b's vertices are mostly a's: it rides along
    >>> r = ride_split(comps, {"a": 8.0, "b": 32.0}, {"a": 5.0, "b": 20.0},
    ...                {"a": 8.0, "b": 24.0})
    >>> r.starts["a"], r.starts["b"], round(r.along["b"]["a"], 4)
    (0.125, 0.0, 0.0417)
    """
    starts = {s: 1.0 / p for s, p in own.items()}
    ride: dict[str, float] = dict.fromkeys(own, 0.0)
    for _ in range(RIDE_ROUNDS):
        moved = 0.0
        new = {}
        for s, mine in own.items():
            rate = sum(starts[c] for c in comps.get(s, ()))
            ride[s] = min(1.0, max(0.0, mine - share[s]) * rate)
            new[s] = (1.0 - ride[s]) / ride_period(mine, share[s], rate)
            moved = max(moved, abs(new[s] - starts[s]) * mine)
        starts = {s: (starts[s] + new[s]) / 2 for s in own}  # halfway: no see-saw
        if moved < 1e-9:
            break
    along: dict[str, dict[str, float]] = {}
    for s, theirs in comps.items():
        rate = sum(starts[c] for c in theirs)
        if rate > 0 and ride[s] > 0:
            along[s] = {c: ride[s] / periods[s] * starts[c] / rate for c in theirs}
    return Rides({s: (1.0 - ride[s]) / periods[s] for s in periods}, along)


def companions(plan: GlobalPlan) -> dict[str, tuple[str, ...]]:
    """Per sharing, the sharings a push of which can take it along (`Executor._companions`):
    those whose push advances at least `SHARE_OVERLAP` of the vertices its own advances."""
    adv = plan.advances
    return {s: tuple(c for c, theirs in adv.items() if c != s and mine
                     and len(mine & theirs) >= SHARE_OVERLAP * len(mine))
            for s, mine in adv.items()}
