"""Algorithm 1 (paper §6): dynamic programming over join sequences × machines.

A state is a set of aliases `R` joined on machine `m`; it keeps the best way found to produce
R's relation and delta there, judged by COSTCALC — the critical path (DPT) or COST (DPD) — with
the capacity it uses. `R` grows left-deep: `<R−a, mj>` is joined with base relation `a` (at its
home `mk`) into `<R, mi>` in one of the four ways of Fig. 3, each a `join_step.Step`: where the
two partial deltas are computed, and so what is copied where. The partial deltas are copied to
`mi`, united into ΔR and applied to R (the MV at the end).

What a step costs is charged in one place (`_charge`; a `Ledger` charges whole plans), and
when a push arrives where in one place (`_arrive`): a candidate is first scored without its
capacity figures (`_quick`, the hot loop), and only a candidate that would win is charged
again with them (`extend`). The winner is rebuilt as a real DAG by `Builder` from the same
steps, and `evaluate` recomputes every figure from that DAG — the tests check the two agree.
Given the global plan's vertices (`Reuse`), a state D holds already is free and its plan is
D's own route there, so a sharing is built on what D computes.

Must not: parse SQL or touch a database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from smile.costmodel.formulas import edge_load, late_penalty_per_s, plan_cost, push_period
from smile.costmodel.prices import Prices
from smile.optimizer.estimate import Estimates
from smile.optimizer.join_step import CASES, Step, step
from smile.optimizer.plan import (
    CopyDelta,
    DeltaToRel,
    Edge,
    Expr,
    Join,
    Part,
    Plan,
    Union,
    Vertex,
    edge_kind,
    edge_seconds,
    edge_tuples,
    join_tuples,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.sharing import Sharing, SpjQuery

Metric = Literal["time", "dollar"]
__all__ = ["CASES", "Builder", "Context", "Metric", "Metrics", "Planned", "Reuse", "State",
           "build_plan", "evaluate", "optimize"]


@dataclass(frozen=True)
class Metrics:
    cp_s: float
    resource_cost: float
    """$/s of CPU, network and storage."""
    utilization: float
    """The busiest edge's seconds of work per second of updates (ρ)."""
    cost: float
    """COST in $/s (∞ if the plan cannot keep up)."""
    usage: dict[str, tuple[float, float, float]]
    """machine → (CPU cores, disk GB, network MB/s) this plan uses."""


@dataclass(frozen=True)
class State:
    dl: float  # critical path to ΔR at the state's machine
    rl: float  # ... to R itself
    res: float
    rho: float
    usage: tuple[float, ...]  # 3 per machine: cores, GB, MB/s
    back: tuple[frozenset[str], int, str, str] | None  # (R−a, mj, a, case)
    hang: float = 0.0  # the longest path ending anywhere else in the plan (e.g. at R̂)
    reused: bool = False  # R's delta and relation at the state's machine are D's already

    @property
    def cp(self) -> float:
        return max(self.rl, self.hang)


@dataclass(frozen=True)
class Reuse:
    """What the global plan D computes already, for the DP to build on: D itself, and when a
    push reaches each of its vertices (`GlobalPlan.arrivals`, x = 1 s).

    A state `<R, m>` whose delta ΔR and relation R (by contents, `content`) D holds at `m`
    costs the new sharing nothing: its plan reads them as they are, and merged into D its
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


class Context:
    """What the DP of one sharing reads: the catalog, the query's estimates, prices per
    machine, the capacity left, and the push period that fixed costs are charged by."""

    def __init__(self, catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing,
                 model: TimeModel, prices: Prices, reuse: Reuse | None = None) -> None:
        self.catalog, self.query, self.sharing, self.model = catalog, query, sharing, model
        self.prices, self.reuse = prices, reuse
        self.est = Estimates(catalog, query)
        self.machines = [m.name for m in catalog.machines]
        self.index = {m: i for i, m in enumerate(self.machines)}
        self.cpu_price = [prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)
                          for m in catalog.machines]
        self.net_price = prices.network_per_byte()
        self.store_price = prices.storage_per_byte_second()
        box = catalog.box_bound  # on one box: the operator work left to all together
        self.box_room = None if box is None else \
            box - sum(catalog.used(m.name).cpu_cores for m in catalog.machines)
        self.room = []
        for m in catalog.machines:
            u = catalog.used(m.name)
            cpu = self.box_room if self.box_room is not None else m.cpu_bound - u.cpu_cores
            self.room.append((cpu, m.disk_gb - u.disk_gb, m.network_mb_s - u.network_mb_s))
        self.all = frozenset(query.aliases)
        self.period = sharing_period(sharing)

    def seconds(self, kind: str, tuples: float) -> float:
        return self.model.seconds(kind, tuples)  # type: ignore[arg-type]

    def content(self, aliases: frozenset[str] | list[str] | tuple[str, ...]) -> Expr:
        """What σπ(⋈ aliases) holds: each alias's needed columns after its selections — the
        name of a vertex computing it, whichever sharing or join order computes it."""
        est, q = self.est, self.query
        chosen = set(aliases)
        parts = tuple(sorted(
            Part(a, est.alias[a].relation.name, est.alias[a].needed,
                 tuple(sorted(s.sql for s in q.selections_of(a)))) for a in chosen))
        joins = tuple(sorted((j.left.sql(), j.right.sql()) for j in q.joins
                             if j.aliases() <= chosen))
        return Expr(parts, joins)

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

    def load(self, kind: str, tuples: float) -> float:
        """The edge's work per second on its machine when pushed once per period."""
        line = self.model.line(kind)  # type: ignore[arg-type]
        return edge_load(line.a, line.b, tuples, 1.0 / self.period)

    def fits(self, usage: tuple[float, ...]) -> bool:
        """Whether what `usage` adds fits the room left on each machine it adds to. A machine
        the plan does not use is not asked: one already over its bound (its tables grew) must
        not refuse a sharing that runs elsewhere. On one box the operator work it adds is
        also held together against the room the box leaves (`CatalogSnapshot.one_box`)."""
        return next(self.overflows(usage), None) is None

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


@dataclass
class Ledger:
    """What a plan (or part of one) costs, charged one item at a time — the only place the
    resource cost is summed: CPU (an edge's load at its machine's price), network (bytes
    between machines), storage (bytes kept), ρ (the busiest edge's seconds), and, when asked
    for, the capacity used per machine."""

    cpu_price: list[float]
    net_price: float
    store_price: float
    with_usage: bool = True
    res: float = 0.0
    rho: float = 0.0
    usage: list[float] = field(default_factory=list)

    @staticmethod
    def of(ctx: Context, with_usage: bool = True) -> Ledger:
        return Ledger(ctx.cpu_price, ctx.net_price, ctx.store_price, with_usage,
                      usage=[0.0] * (3 * len(ctx.machines)) if with_usage else [])

    def work(self, m: int, seconds: float, load: float) -> None:
        if self.with_usage:
            self.usage[3 * m] += load
        self.res += load * self.cpu_price[m]
        self.rho = max(self.rho, seconds)

    def move(self, src: int, dst: int, nbytes: float) -> None:
        if src == dst:
            return
        if self.with_usage:
            self.usage[3 * src + 2] += nbytes / 1e6
            self.usage[3 * dst + 2] += nbytes / 1e6
        self.res += nbytes * self.net_price

    def store(self, m: int, nbytes: float) -> None:
        if self.with_usage:
            self.usage[3 * m + 1] += nbytes / 1e9
        self.res += nbytes * self.store_price

    def charge_step(self, s: Step, f: StepFigures) -> None:
        """Every edge a join step adds (see `_charge`)."""
        self.res, self.rho = _charge(s, f, self.cpu_price, self.net_price, self.store_price,
                                     self.res, self.rho, self.usage if self.with_usage else None)


def _charge(s: Step, f: StepFigures, cpu: list[float], net_price: float, store_price: float,
            res: float, rho: float, usage: list[float] | None) -> tuple[float, float]:
    """(resCost, ρ) after charging every edge of step `s` — work where it runs, bytes it
    moves, what it keeps — and, with `usage`, the capacity it takes. The same three charges as
    `Ledger.work`, `move` and `store`, in one loop without objects: the DP's inner loop calls
    this tens of thousands of times per admission."""
    t, w, b = f.t, f.w, f.nbytes
    for m, key, src, keeps in s.charges:
        res += w[key] * cpu[m]
        if t[key] > rho:  # noqa: PLR1730 (max() would be a call in the DP's inner loop)
            rho = t[key]
        if src != m:  # a copy between machines: its delta's bytes cross
            res += b[key] * net_price
            if usage is not None:
                usage[3 * src + 2] += b[key] / 1e6
                usage[3 * m + 2] += b[key] / 1e6
        if keeps:
            res += b[key] * store_price
            if usage is not None:
                usage[3 * m + 1] += b[key] / 1e9
        if usage is not None:
            usage[3 * m] += w[key]
    return res, rho


def _arrive(s: Step, t: dict[str, float], dl: float, rl: float, ra: float) -> float:
    """When a push reaches the result's delta ΔR through step `s`, given when it reaches ΔL
    (`dl`), L (`rl`) and a's R̂ (`ra`). Δ(ΔL⋈a) reads ΔL, a and Δa where it runs; Δ(L⋈Δa)
    reads Δa, L and ΔL — each at home, or after its copy (and the DeltaToRel keeping a
    relation from it); each partial is copied to the result's machine and united there."""
    copied_l, copied_a = dl + t["cL"], t["ca"]
    e1 = max(dl if s.j1 == s.mj else copied_l,
             ra if s.j1 == s.mk else copied_a + t["da"],
             0.0 if s.j1 == s.mk else copied_a) + t["j1"]
    e2 = max(0.0 if s.j2 == s.mk else copied_a,
             rl if s.j2 == s.mj else copied_l + t["dL"],
             dl if s.j2 == s.mj else copied_l) + t["j2"]
    if s.j1 != s.mi:
        e1 += t["c1"]
    if s.j2 != s.mi:
        e2 += t["c2"]
    return max(e1, e2) + t["u"]


def _score_of(ctx: Context, cp: float, res: float, rho: float, rate: float,
              metric: Metric) -> tuple[float, float]:
    """COSTCALC: (CP, resCost) for DPT, (COST, CP) for DPD."""
    if metric == "time":
        return (cp, res)
    staleness = ctx.sharing.staleness_s
    pen = late_penalty_per_s(rate, rho, staleness, ctx.sharing.penalty_per_tuple)
    return (plan_cost(res, cp, staleness, pen), cp)


def _score(ctx: Context, s: State, rate: float, metric: Metric) -> tuple[float, float]:
    return _score_of(ctx, s.cp, s.res, s.rho, rate, metric)


def _base_state(ctx: Context, alias: str) -> tuple[int, State]:
    st = ctx.est.alias[alias]
    rel = st.relation
    mk = ctx.index[st.home]
    t = ctx.seconds("delta_to_rel", rel.update_rate)  # the shadow R̂'s upkeep
    # priced (time, dollars) but not held against the room: the plan may read a copy of R
    # kept elsewhere instead, or the R̂ D keeps already; `optimize` checks the plan it builds
    ledger = Ledger.of(ctx, with_usage=False)
    ledger.work(mk, t, ctx.load("delta_to_rel", rel.update_rate))
    ledger.store(mk, rel.rows * rel.width)
    return mk, State(0.0, t, ledger.res, t, (0.0,) * (3 * len(ctx.machines)), None)


def _join_kind(ctx: Context, tuples: float) -> str:
    return "join_spark" if ctx.model.join(tuples)[1] == "spark" else "join_pg"


@dataclass(frozen=True)
class StepFigures:
    """Per-edge seconds (x = 1 s), loads and sizes of joining `left` with base alias `a`:
    copies of L and a, their relations kept, the two partial joins and their copies to the
    result's machine, the union, the result's DeltaToRel."""

    t: dict[str, float]
    w: dict[str, float]
    nbytes: dict[str, float]


def _step_figures(ctx: Context, left: frozenset[str], a: str) -> StepFigures:
    est = ctx.est
    ls, aa = est.stats(left), est.alias[a]
    out = est.stats(left | {a})
    p1 = est.driving_left(left, a)  # Δ(ΔL ⋈ a)
    p2 = est.driving_right(left, a)  # Δ(L ⋈ Δa)
    kinds = {"cL": ("copy_delta", ls.rate), "dL": ("delta_to_rel", ls.rate),
             "ca": ("copy_delta", aa.rate), "da": ("delta_to_rel", aa.rate),
             # a join is charged the driving rows it reads and the rows it writes
             "j1": (_join_kind(ctx, join_tuples(p1, ls.rate)), join_tuples(p1, ls.rate)),
             "j2": (_join_kind(ctx, join_tuples(p2, aa.rate)), join_tuples(p2, aa.rate)),
             "c1": ("copy_delta", p1), "c2": ("copy_delta", p2),
             "u": ("union", out.rate), "dJ": ("delta_to_rel", out.rate)}
    return StepFigures(
        {k: ctx.seconds(kind, n) for k, (kind, n) in kinds.items()},
        {k: ctx.load(kind, n) for k, (kind, n) in kinds.items()},
        {"cL": ls.rate * ls.width, "dL": ls.rows * ls.width,  # bytes moved / kept
         "ca": aa.rate * aa.width, "da": aa.rows * aa.width,
         "c1": p1 * out.width, "c2": p2 * out.width, "dJ": out.rows * out.width})


def extend(ctx: Context, L: State, A: State, a_new: bool, s: Step, f: StepFigures) -> State:
    """`<L, mj> ⋈ <a, mk> → <R, mi>` by step `s`, with its capacity figures. `A` is base
    alias a's own state (its R̂'s upkeep), counted unless L already holds the same relation (a
    self-join shares ΔR and R̂)."""
    usage = [x + y for x, y in zip(L.usage, A.usage, strict=True)] if a_new else list(L.usage)
    res, rho = _charge(s, f, ctx.cpu_price, ctx.net_price, ctx.store_price,
                       L.res + (A.res if a_new else 0.0),
                       max(L.rho, A.rho) if a_new else L.rho, usage)
    d_new = _arrive(s, f.t, L.dl, L.rl, A.rl)
    return State(d_new, d_new + f.t["dJ"], res, rho, tuple(usage), None,
                 max(L.hang, L.rl, A.rl))


def _quick(ctx: Context, L: State, A: State, a_new: bool, s: Step,
           f: StepFigures) -> tuple[float, float, float]:
    """(CP, resCost, ρ) of `extend`'s result, without its capacity figures or objects: the
    DP's inner loop scores every candidate this way, and `extend`s only those that win."""
    res, rho = _charge(s, f, ctx.cpu_price, ctx.net_price, ctx.store_price,
                       L.res + (A.res if a_new else 0.0),
                       max(L.rho, A.rho) if a_new else L.rho, None)
    rl = _arrive(s, f.t, L.dl, L.rl, A.rl) + f.t["dJ"]
    return max(rl, L.hang, L.rl, A.rl), res, rho


def _single(ctx: Context) -> dict[int, State]:
    """A one-relation sharing: ΔR filtered and projected to the MV's machine, then applied."""
    a = ctx.query.aliases[0]
    st = ctx.est.alias[a]
    mk, base = _base_state(ctx, a)
    out: dict[int, State] = {}
    for mi in range(len(ctx.machines)):
        ledger = Ledger.of(ctx)
        ledger.res, ledger.rho = base.res, base.rho
        ledger.usage = list(base.usage)
        c = ctx.seconds("copy_delta", st.rate)
        d = ctx.seconds("delta_to_rel", st.rate)
        ledger.work(mi, c, ctx.load("copy_delta", st.rate))
        ledger.move(mk, mi, st.rate * st.width)
        ledger.work(mi, d, ctx.load("delta_to_rel", st.rate))
        ledger.store(mi, st.rows * st.width)
        s = State(c, c + d, ledger.res, ledger.rho, tuple(ledger.usage), None, base.rl)
        if ctx.fits(s.usage):
            out[mi] = s
    return out


def _dp(ctx: Context, metric: Metric) -> dict[frozenset[str], dict[int, State]]:
    """Every state the DP keeps: alias set → machine → best state."""
    aliases = ctx.query.aliases
    if len(aliases) == 1:
        return {ctx.all: _single(ctx)}
    base: dict[str, tuple[int, State]] = {a: _base_state(ctx, a) for a in aliases}
    best: dict[frozenset[str], dict[int, State]] = {
        frozenset({a}): {mk: s} for a, (mk, s) in base.items()}
    connected = _connected_sets(ctx.query)
    machines = range(len(ctx.machines))
    for size in range(2, len(aliases) + 1):
        for R in connected[size]:
            states: dict[int, State] = {}
            rate = ctx.est.stats(R).rate
            scores: dict[int, tuple[float, float]] = {}
            for a in sorted(R):
                left = R - {a}
                if left not in best or not ctx.query.joins_between(left, a):
                    continue
                mk, astate = base[a]
                rel = ctx.est.alias[a].relation.name
                a_new = all(ctx.est.alias[x].relation.name != rel for x in left)
                figures = _step_figures(ctx, left, a)
                for mj, L in best[left].items():
                    for mi in machines:
                        for case in CASES:
                            s = step(mj, mk, mi, case)
                            if s is None:
                                continue
                            cp, res, rho = _quick(ctx, L, astate, a_new, s, figures)
                            sc = _score_of(ctx, cp, res, rho, rate, metric)
                            if mi in scores and not sc < scores[mi]:
                                continue
                            full = extend(ctx, L, astate, a_new, s, figures)
                            if not ctx.fits(full.usage):
                                continue
                            scores[mi] = sc
                            states[mi] = replace(full, back=(left, mj, a, case))
            for mi in machines if size < len(aliases) else ():  # the MV: `computing`'s
                held = ctx.reused(R, mi)
                if held is None:
                    continue
                sc = _score(ctx, held, rate, metric)
                if mi not in scores or sc < scores[mi]:
                    scores[mi], states[mi] = sc, held
            if states:
                best[R] = states
    return best


def _connected_sets(query: SpjQuery) -> dict[int, list[frozenset[str]]]:
    aliases = query.aliases
    adj: dict[str, set[str]] = {a: set() for a in aliases}
    for j in query.joins:
        x, y = j.left.alias, j.right.alias
        adj[x].add(y)
        adj[y].add(x)
    found: set[frozenset[str]] = {frozenset({a}) for a in aliases}
    frontier = set(found)
    while frontier:
        nxt = set()
        for s in frontier:
            for a in s:
                for b in adj[a] - s:
                    t = s | {b}
                    if t not in found:
                        found.add(t)
                        nxt.add(t)
        frontier = nxt
    out: dict[int, list[frozenset[str]]] = {}
    for s in sorted(found, key=sorted):
        out.setdefault(len(s), []).append(s)
    return out


@dataclass(frozen=True)
class Planned:
    plan: Plan
    metrics: Metrics
    dp_cp_s: float
    """The critical path as the DP's arithmetic saw it (equal to `metrics.cp_s`)."""
    dp_resource_cost: float
    usage: dict[str, tuple[float, float, float]]
    """machine → (cores, GB, MB/s) what D keeps of the plan adds (`reaching`): what `fits`
    held against the room left."""
    added_cost: float | None = None
    """With `Reuse`: COST of what the plan adds to D (its edges into D's vertices are D's)."""


def optimize(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing, model: TimeModel,
             metric: Metric, prices: Prices | None = None,
             kept: frozenset[Vertex] = frozenset(),
             reuse: Reuse | None = None) -> Planned | None:
    """DPT (`metric='time'`) or DPD (`'dollar'`); None when no plan fits the capacity left.
    `kept`: the shadow copies R̂ the global plan keeps already (its vertices) — their
    upkeep is on their machine's load, and a plan reading them adds none of it. `reuse`: the
    global plan's vertices, which the DP builds on (`Reuse`) and which add no load either."""
    ctx = Context(catalog, query, sharing, model, prices or Prices(), reuse)
    if reuse is not None:
        kept = kept | reuse.d.vertices
    states = _dp(ctx, metric)
    finals = states.get(ctx.all, {})
    if sharing.mv_machine is not None:
        want = ctx.index[catalog.machine(sharing.mv_machine).name]
        finals = {want: finals[want]} if want in finals else {}
    rate = ctx.est.stats(ctx.all).rate
    for mi in sorted(finals, key=lambda m: (_score(ctx, finals[m], rate, metric), m)):
        plan = Builder(ctx, states).build(mi)
        metrics = evaluate(plan, catalog, sharing, model, ctx.est, prices or Prices(), kept)
        used = reaching(plan)  # what D will keep of it: a home R̂ no step reads goes
        usage = metrics.usage if used == plan else evaluate(
            used, catalog, sharing, model, ctx.est, prices or Prices(), kept).usage
        if ctx.fits(ctx.flat(usage)):
            added = None if reuse is None else evaluate(
                plan, catalog, sharing, model, ctx.est, prices or Prices(), kept,
                reuse.d.vertices).cost
            return Planned(plan, metrics, finals[mi].cp, finals[mi].res, usage, added)
    return None


def reaching(plan: Plan) -> Plan:
    """`plan` without the edges into vertices that reach no MV (as `GlobalPlan` prunes it):
    the DP prices every base relation's R̂ at home, read or not."""
    into = {e.dst: e for e in plan.edges}
    seen: set[Vertex] = set()
    todo = [plan.mv]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            if v in into:
                todo.extend(into[v].sources)
    return replace(plan, edges=tuple(e for e in plan.edges if e.dst in seen))


def evaluate(plan: Plan, catalog: CatalogSnapshot, sharing: Sharing, model: TimeModel,
             est: Estimates, prices: Prices,
             kept: frozenset[Vertex] = frozenset(),
             free: frozenset[Vertex] = frozenset()) -> Metrics:
    """Every figure of a plan recomputed from its DAG (the reference for the DP's arithmetic),
    charged through the same ledger — with each kind's line, as the DP charges it: the
    executor's per-edge scales are D's assessment's to apply (`load.assess`). The usage
    leaves out the upkeep of the R̂ in `kept` (the global plan's already); the edges into
    `free` (D's vertices, `Reuse`) are not charged at all: what the plan adds to D."""
    model = replace(model, scales={})
    names = [m.name for m in catalog.machines]
    index = {m: i for i, m in enumerate(names)}
    ledger = Ledger([prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)
                     for m in catalog.machines], prices.network_per_byte(),
                    prices.storage_per_byte_second(), usage=[0.0] * (3 * len(names)))
    period = sharing_period(sharing)
    for e in plan.edges:
        if e.dst in free:
            continue
        line = model.edge_line(edge_kind(e), e.dst.label)
        dst = index[e.dst.machine]
        before = list(ledger.usage)
        ledger.work(dst, edge_seconds(e, model),
                    edge_load(line.a, line.b, edge_tuples(e), 1.0 / period))
        if isinstance(e, CopyDelta):
            ledger.move(index[e.src.machine], dst, e.tuples_per_s * e.bytes_per_tuple)
        if isinstance(e, DeltaToRel):
            ledger.store(dst, e.stored_bytes)
        if e.dst in kept:
            ledger.usage = before
    cp = plan.critical_path(model)
    rate = est.stats(frozenset(est.query.aliases)).rate
    pen = late_penalty_per_s(rate, ledger.rho, sharing.staleness_s, sharing.penalty_per_tuple)
    cost = plan_cost(ledger.res, cp, sharing.staleness_s, pen) if math.isfinite(pen) \
        else math.inf
    usage = {m: (ledger.usage[3 * i], ledger.usage[3 * i + 1], ledger.usage[3 * i + 2])
             for i, m in enumerate(names)}
    return Metrics(cp, ledger.res, ledger.rho, cost,
                   {m: u for m, u in usage.items() if any(u)})


def build_plan(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing, model: TimeModel,
               order: tuple[str, ...], machines: tuple[str, ...], cases: tuple[str, ...],
               prices: Prices | None = None) -> Plan:
    """The plan of one point of the DP's space: join `order` left-deep, result i on
    `machines[i]` by way `cases[i]` ('a' in place, 'b' copy the left side, 'c' copy the right,
    'd' both); for one relation, its MV on `machines[0]`."""
    ctx = Context(catalog, query, sharing, model, prices or Prices())
    if len(order) == 1:
        return Builder(ctx).build(ctx.index[machines[0]])
    states: dict[frozenset[str], dict[int, State]] = {}
    prev = ctx.index[ctx.est.alias[order[0]].home]
    for i in range(1, len(order)):
        left = frozenset(order[:i])
        mi = ctx.index[machines[i - 1]]
        states[left | {order[i]}] = {mi: State(0.0, 0.0, 0.0, 0.0, (), (
            left, prev, order[i], cases[i - 1]))}
        prev = mi
    return Builder(ctx, states).build(prev)


class Builder:
    """Rebuild a plan as vertices and edges, following the DP's back-pointers and the same
    steps the DP priced. Every vertex is named by its contents (`Expr`), never by the sharing,
    so identical computations of different sharings come out as equal vertices."""

    def __init__(self, ctx: Context,
                 states: dict[frozenset[str], dict[int, State]] | None = None) -> None:
        self.ctx = ctx
        self.edges: dict[Edge, None] = {}
        self.s = ctx.sharing.name
        self._states = states or {}

    def add(self, e: Edge) -> None:
        self.edges[e] = None

    def build(self, mi: int) -> Plan:
        ctx = self.ctx
        aliases = ctx.query.aliases
        if len(aliases) == 1:
            mv = self._single(aliases[0], ctx.machines[mi])
        else:
            _, _, mv = self._set(ctx.all, mi)
        sources = tuple(sorted({Vertex("delta", Expr.base(ctx.est.alias[a].relation.name),
                                       ctx.est.alias[a].home) for a in aliases}))
        outputs = tuple((p.name, p.sql) for p in ctx.query.projections)
        return Plan(self.s, tuple(self.edges), mv, sources, outputs)

    def content(self, aliases: frozenset[str] | list[str] | tuple[str, ...]) -> Expr:
        return self.ctx.content(aliases)

    def _base(self, a: str) -> tuple[Vertex, Vertex]:
        st = self.ctx.est.alias[a]
        rel = st.relation
        d = Vertex("delta", Expr.base(rel.name), rel.machine)
        r = Vertex("relation", Expr.base(rel.name), rel.machine)
        self.add(DeltaToRel(d, r, rel.update_rate, rel.rows * rel.width))
        return d, r

    def _single(self, a: str, machine: str) -> Vertex:
        st = self.ctx.est.alias[a]
        dmv, _ = self._base_copy(a, machine, "delta")
        mv = Vertex("relation", dmv.expr, machine)
        self.add(DeltaToRel(dmv, mv, st.rate, st.rows * st.width))
        return mv

    def _filters(self, a: str) -> tuple[str, ...]:
        return tuple(s.sql for s in self.ctx.query.selections_of(a))

    def _base_copy(self, a: str, machine: str, need: str) -> tuple[Vertex, Vertex | None]:
        """Base alias `a`'s delta (and, for a 'relation' need, a relation kept from it) at
        `machine`: filtered and projected on the way from the base delta."""
        st = self.ctx.est.alias[a]
        d, _ = self._base(a)
        dc = Vertex("delta", self.content([a]), machine)
        self.add(CopyDelta(d, dc, st.rate, st.width, self._filters(a), st.needed))
        if need == "delta":
            return dc, None
        rc = Vertex("relation", dc.expr, machine)
        self.add(DeltaToRel(dc, rc, st.rate, st.rows * st.width))
        return dc, rc

    def _set(self, R: frozenset[str], m: int) -> tuple[list[str], Vertex, Vertex]:
        """Build <R, m> of a join sequence; returns (join order, ΔR vertex, R vertex)."""
        ctx = self.ctx
        if len(R) == 1:  # where a sequence starts: the base relation at home, as captured
            (a,) = R
            return [a], *self._base(a)
        if R not in self._states or m not in self._states[R]:
            raise AssertionError("unreachable: the DP keeps every state it points back to")
        if self._states[R][m].reused:  # D's own vertices, by D's own route
            assert ctx.reuse is not None
            d, r = ctx.result(R, m)
            for e in ctx.reuse.d.feeding((d, r)):
                self.add(e)
            return sorted(R), d, r
        back = self._states[R][m].back
        assert back is not None
        left, mj, a, case = back
        order, dL, rL = self._set(left, mj)
        s = step(mj, ctx.index[ctx.est.alias[a].home], m, case)
        assert s is not None, "the DP only points back to real steps"
        return self._join(order, left, dL, rL, a, s)

    def _join(self, order: list[str], left: frozenset[str], dL: Vertex, rL: Vertex, a: str,
              s: Step) -> tuple[list[str], Vertex, Vertex]:
        ctx, est = self.ctx, self.ctx.est
        M = ctx.machines
        ls = est.stats(left)
        out = est.stats(left | {a})
        p1_rate, p2_rate = est.driving_left(left, a), est.driving_right(left, a)
        L_expr = self.content(order)
        J_expr = self.content([*order, a])
        base_left = len(order) == 1
        # each side where the step needs it: (delta, relation or None, still raw?)
        lefts: dict[int, tuple[Vertex, Vertex | None, bool]] = {s.mj: (dL, rL, base_left)}
        for m, need in s.left_needs().items():
            if base_left:
                dc, rc = self._base_copy(order[0], M[m], need)
            else:
                dc = Vertex("delta", L_expr, M[m])
                self.add(CopyDelta(dL, dc, ls.rate, ls.width))
                rc = None
                if need == "relation":
                    rc = Vertex("relation", L_expr, M[m])
                    self.add(DeltaToRel(dc, rc, ls.rate, ls.rows * ls.width))
            lefts[m] = (dc, rc, False)
        da, ra = self._base(a)
        rights: dict[int, tuple[Vertex, Vertex | None, bool]] = {s.mk: (da, ra, True)}
        for m, need in s.right_needs().items():
            dc, rc = self._base_copy(a, M[m], need)
            rights[m] = (dc, rc, False)
        preds = tuple(
            (j.left.sql(), j.right.sql()) if j.left.alias in left else (j.right.sql(), j.left.sql())
            for j in ctx.query.joins_between(left, a))
        lhs = tuple(sorted(order))
        left_filters = tuple(f for x in order for f in self._filters(x))
        a_filters = self._filters(a)
        partials = []
        sides: tuple[tuple[int, Literal["left", "right"], float, float], ...] = (
            (s.j1, "left", p1_rate, ls.rate), (s.j2, "right", p2_rate, est.alias[a].rate))
        for where, driving, rate, rows_in in sides:
            engine = ctx.model.join(join_tuples(rate, rows_in))[1]
            p = Vertex("partial", replace(J_expr, left=lhs, driving=driving), M[where])
            (dl, rl, raw_l), (dr, rr, raw_r) = lefts[where], rights[where]
            if driving == "left":  # ΔL drives; a (and Δa) compensate
                assert rr is not None
                self.add(Join(dl, rr, dr, p, driving, preds,
                              (left_filters if raw_l else ()) + (a_filters if raw_r else ()),
                              rate, engine, rows_in))  # type: ignore[arg-type]
            else:  # Δa drives; L (and ΔL) compensate
                assert rl is not None
                self.add(Join(dr, rl, dl, p, driving, preds,
                              (a_filters if raw_r else ()) + (left_filters if raw_l else ()),
                              rate, engine, rows_in))  # type: ignore[arg-type]
            if where != s.mi:
                moved = p.at(M[s.mi])
                self.add(CopyDelta(p, moved, rate, out.width))
                p = moved
            partials.append(p)
        dJ = Vertex("delta", J_expr, M[s.mi])
        self.add(Union(partials[0], partials[1], dJ, out.rate))
        J = Vertex("relation", J_expr, M[s.mi])  # the MV itself when R is the whole join
        self.add(DeltaToRel(dJ, J, out.rate, out.rows * out.width))
        return [*order, a], dJ, J
