"""Algorithm 1 (paper §6): dynamic programming over join sequences × machines.

A state is a set of aliases `R` joined on machine `m`; it keeps the best way found to produce
R's relation and delta there, judged by COSTCALC — the critical path (DPT) or COST (DPD) — with
the capacity it uses. `R` grows left-deep: `<R−a, mj>` is joined with base relation `a` (at its
home `mk`) into `<R, mi>` in one of the four ways of Fig. 3:
(a) in place — Δ(ΔL⋈a) where a is, Δ(L⋈Δa) where L is, the deltas they need copied there;
(b) L copied to a's machine; (c) a copied to L's machine; (d) both copied to `mi`.
The partial deltas are copied to `mi`, united into ΔR and applied to R (the MV at the end).

Candidates are scored by straight-line arithmetic over per-step edge times (fast enough for a
5-way join over 6 machines in milliseconds); the winner is rebuilt as a real DAG by `_Builder`,
and `evaluate` recomputes every figure from that DAG — the tests check the two agree.

Must not: parse SQL or touch a database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from smile.costmodel.formulas import edge_load, late_penalty_per_s, plan_cost, push_period
from smile.costmodel.prices import Prices
from smile.optimizer.estimate import Estimates
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
)

if TYPE_CHECKING:
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.sharing import Sharing, SpjQuery

Metric = Literal["time", "dollar"]
CASES = ("a", "b", "c", "d")


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
class _State:
    dl: float  # critical path to ΔR at the state's machine
    rl: float  # ... to R itself
    res: float
    rho: float
    usage: tuple[float, ...]  # 3 per machine: cores, GB, MB/s
    back: tuple[frozenset[str], int, str, str] | None  # (R−a, mj, a, case)
    hang: float = 0.0  # the longest path ending anywhere else in the plan (e.g. at R̂)

    @property
    def cp(self) -> float:
        return max(self.rl, self.hang)


class _Context:
    def __init__(self, catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing,
                 model: TimeModel, prices: Prices) -> None:
        self.catalog, self.query, self.sharing, self.model = catalog, query, sharing, model
        self.prices = prices
        self.est = Estimates(catalog, query)
        self.machines = [m.name for m in catalog.machines]
        self.index = {m: i for i, m in enumerate(self.machines)}
        self.cpu_price = [prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)
                          for m in catalog.machines]
        self.net_price = prices.network_per_byte()
        self.store_price = prices.storage_per_byte_second()
        self.room = []
        for m in catalog.machines:
            u = catalog.used(m.name)
            self.room.append((m.cpu_bound - u.cpu_cores, m.disk_gb - u.disk_gb,
                              m.network_mb_s - u.network_mb_s))
        self.all = frozenset(query.aliases)
        self.period = sharing_period(sharing)

    def seconds(self, kind: str, tuples: float) -> float:
        return self.model.seconds(kind, tuples)  # type: ignore[arg-type]

    def load(self, kind: str, tuples: float) -> float:
        """The edge's work per second on its machine when pushed once per period."""
        line = self.model.line(kind)  # type: ignore[arg-type]
        return edge_load(line.a, line.b, tuples, 1.0 / self.period)


def sharing_period(sharing: Sharing) -> float:
    """The push period the DP charges fixed costs by: the lazy executor's, before the plan's
    own critical path is known (the global plan's assessment refines it)."""
    return push_period(sharing.staleness_s, 0.0, 0.0)


def _fits(ctx: _Context, usage: tuple[float, ...]) -> bool:
    for i, (cpu, disk, net) in enumerate(ctx.room):
        if usage[3 * i] > cpu + 1e-12 or usage[3 * i + 1] > disk + 1e-12 \
                or usage[3 * i + 2] > net + 1e-12:
            return False
    return True


def _score_of(ctx: _Context, cp: float, res: float, rho: float, rate: float,
              metric: Metric) -> tuple[float, float]:
    """COSTCALC: (CP, resCost) for DPT, (COST, CP) for DPD."""
    if metric == "time":
        return (cp, res)
    staleness = ctx.sharing.staleness_s
    pen = late_penalty_per_s(rate, rho, staleness, ctx.sharing.penalty_per_tuple)
    return (plan_cost(res, cp, staleness, pen), cp)


def _score(ctx: _Context, s: _State, rate: float, metric: Metric) -> tuple[float, float]:
    return _score_of(ctx, s.cp, s.res, s.rho, rate, metric)


def _base_state(ctx: _Context, alias: str) -> tuple[int, _State]:
    st = ctx.est.alias[alias]
    rel = st.relation
    mk = ctx.index[st.home]
    t = ctx.seconds("delta_to_rel", rel.update_rate)  # the shadow R̂'s upkeep
    w = ctx.load("delta_to_rel", rel.update_rate)
    usage = [0.0] * (3 * len(ctx.machines))
    usage[3 * mk] += w
    stored = rel.rows * rel.width
    usage[3 * mk + 1] += stored / 1e9
    res = w * ctx.cpu_price[mk] + stored * ctx.store_price
    return mk, _State(0.0, t, res, t, tuple(usage), None)


def _join_kind(ctx: _Context, tuples: float) -> str:
    return "join_spark" if ctx.model.join(tuples)[1] == "spark" else "join_pg"


def _step_times(ctx: _Context, left: frozenset[str], a: str
                ) -> tuple[dict[str, float], dict[str, float]]:
    """Edge times (x = 1 s), sizes, and loads of joining `left` with base alias `a`: the
    times go into critical paths and ρ, the loads (same keys) into capacity and resCost."""
    est = ctx.est
    ls, aa = est.stats(left), est.alias[a]
    sel = est.join_selectivity(left, a)
    out = est.stats(left | {a})
    p1 = ls.rate * aa.rows * sel  # Δ(ΔL ⋈ a)
    p2 = aa.rate * ls.rows * sel  # Δ(L ⋈ Δa)
    kinds = {"cL": ("copy_delta", ls.rate), "dL": ("delta_to_rel", ls.rate),
             "ca": ("copy_delta", aa.rate), "da": ("delta_to_rel", aa.rate),
             "j1": (_join_kind(ctx, p1), p1), "j2": (_join_kind(ctx, p2), p2),
             "c1": ("copy_delta", p1), "c2": ("copy_delta", p2),
             "u": ("union", out.rate), "dJ": ("delta_to_rel", out.rate)}
    times = {k: ctx.seconds(kind, n) for k, (kind, n) in kinds.items()} | {
        "bL": ls.rate * ls.width, "sL": ls.rows * ls.width,
        "ba": aa.rate * aa.width, "sa": aa.rows * aa.width,
        "b1": p1 * out.width, "b2": p2 * out.width, "sJ": out.rows * out.width}
    loads = {k: ctx.load(kind, n) for k, (kind, n) in kinds.items()}
    return times, loads


def _extend(ctx: _Context, L: _State, mj: int, A: _State, a_new: bool, mk: int, mi: int,
            case: str, t: dict[str, float], w: dict[str, float],
            with_usage: bool = True) -> _State | None:
    """<R−a, mj> ⋈ <a, mk> → <R, mi> by `case`, as arithmetic over the step's edges.
    `A` is base alias a's own state (its R̂'s upkeep), counted unless `left` already holds the
    same relation (a self-join shares ΔR and R̂). Without `with_usage` the capacity figures
    are skipped (the DP asks for them only for candidates that would win)."""
    ra = A.rl
    if a_new:
        usage = ([x + y for x, y in zip(L.usage, A.usage, strict=True)] if with_usage else [])
        res, rho = L.res + A.res, max(L.rho, A.rho)
    else:
        usage = list(L.usage) if with_usage else []
        res, rho = L.res, L.rho
    cpu = ctx.cpu_price

    def work(m: int, key: str) -> None:
        nonlocal res, rho
        if with_usage:
            usage[3 * m] += w[key]
        res += w[key] * cpu[m]
        rho = max(rho, t[key])

    def copy(src: int, dst: int, key: str, nbytes: float) -> None:
        nonlocal res
        work(dst, key)
        if src != dst:
            if with_usage:
                usage[3 * src + 2] += nbytes / 1e6
                usage[3 * dst + 2] += nbytes / 1e6
            res += nbytes * ctx.net_price

    def store(m: int, nbytes: float) -> None:
        nonlocal res
        if with_usage:
            usage[3 * m + 1] += nbytes / 1e9
        res += nbytes * ctx.store_price

    dl, rl = L.dl, L.rl
    if case == "a":
        jl, ja = mk, mj  # where Δ(ΔL⋈a) and Δ(L⋈Δa) run
        dL_at = dl
        if mj != mk:
            copy(mj, mk, "cL", t["bL"])
            dL_at = dl + t["cL"]
        da_at = 0.0
        if mk != mj:
            copy(mk, mj, "ca", t["ba"])
            da_at = t["ca"]
        s1 = max(dL_at, ra, 0.0)
        s2 = max(da_at, rl, dl)
    elif case == "b":
        if mj == mk:
            return None  # the same as (a)
        jl = ja = mk
        copy(mj, mk, "cL", t["bL"])
        dL_at = dl + t["cL"]
        work(mk, "dL")
        store(mk, t["sL"])
        rL_at = dL_at + t["dL"]
        s1 = max(dL_at, ra, 0.0)
        s2 = max(0.0, rL_at, dL_at)
    elif case == "c":
        if mj == mk:
            return None
        jl = ja = mj
        copy(mk, mj, "ca", t["ba"])
        da_at = t["ca"]
        work(mj, "da")
        store(mj, t["sa"])
        ra_at = da_at + t["da"]
        s1 = max(dl, ra_at, da_at)
        s2 = max(da_at, rl, dl)
    else:
        if mj == mi and mk == mi:
            return None  # the same as (a)
        jl = ja = mi
        if mj != mi:
            copy(mj, mi, "cL", t["bL"])
            work(mi, "dL")
            store(mi, t["sL"])
            dL_at = dl + t["cL"]
            rL_at = dL_at + t["dL"]
        else:
            dL_at, rL_at = dl, rl
        if mk != mi:
            copy(mk, mi, "ca", t["ba"])
            work(mi, "da")
            store(mi, t["sa"])
            da_at = t["ca"]
            ra_at = da_at + t["da"]
        else:
            da_at, ra_at = 0.0, ra
        s1 = max(dL_at, ra_at, da_at)
        s2 = max(da_at, rL_at, dL_at)
    work(jl, "j1")
    work(ja, "j2")
    e1, e2 = s1 + t["j1"], s2 + t["j2"]
    if jl != mi:
        copy(jl, mi, "c1", t["b1"])
        e1 += t["c1"]
    if ja != mi:
        copy(ja, mi, "c2", t["b2"])
        e2 += t["c2"]
    work(mi, "u")
    work(mi, "dJ")
    store(mi, t["sJ"])
    d_new = max(e1, e2) + t["u"]
    return _State(d_new, d_new + t["dJ"], res, rho, tuple(usage), None,
                  max(L.hang, L.rl, A.rl))


def _quick(ctx: _Context, L: _State, mj: int, A: _State, a_new: bool, mk: int, mi: int,
           case: str, t: dict[str, float], w: dict[str, float]
           ) -> tuple[float, float, float] | None:
    """(critical path, resource cost, ρ) of `_extend`'s candidate, without the capacity figures
    and without closures: the DP's inner loop. `_extend` is the reference; the DP checks the
    two agree on every candidate it keeps."""
    cpu = ctx.cpu_price
    net, sto = ctx.net_price, ctx.store_price
    ra = A.rl
    res = L.res + (A.res if a_new else 0.0)
    rho = max(L.rho, A.rho) if a_new else L.rho
    dl, rl = L.dl, L.rl
    tj1, tj2 = t["j1"], t["j2"]
    if case == "a":
        jl, ja = mk, mj
        dL_at, da_at = dl, 0.0
        if mj != mk:
            dL_at = dl + t["cL"]
            da_at = t["ca"]
            res += w["cL"] * cpu[mk] + t["bL"] * net + w["ca"] * cpu[mj] + t["ba"] * net
            rho = max(rho, t["cL"], t["ca"])
        s1 = max(dL_at, ra)
        s2 = max(da_at, rl, dl)
    elif case == "b":
        if mj == mk:
            return None
        jl = ja = mk
        dL_at = dl + t["cL"]
        rL_at = dL_at + t["dL"]
        res += (w["cL"] + w["dL"]) * cpu[mk] + t["bL"] * net + t["sL"] * sto
        rho = max(rho, t["cL"], t["dL"])
        s1 = max(dL_at, ra)
        s2 = max(rL_at, dL_at)
    elif case == "c":
        if mj == mk:
            return None
        jl = ja = mj
        da_at = t["ca"]
        ra_at = da_at + t["da"]
        res += (w["ca"] + w["da"]) * cpu[mj] + t["ba"] * net + t["sa"] * sto
        rho = max(rho, t["ca"], t["da"])
        s1 = max(dl, ra_at, da_at)
        s2 = max(da_at, rl, dl)
    else:
        if mj == mi and mk == mi:
            return None
        jl = ja = mi
        if mj != mi:
            dL_at = dl + t["cL"]
            rL_at = dL_at + t["dL"]
            res += (w["cL"] + w["dL"]) * cpu[mi] + t["bL"] * net + t["sL"] * sto
            rho = max(rho, t["cL"], t["dL"])
        else:
            dL_at, rL_at = dl, rl
        if mk != mi:
            da_at = t["ca"]
            ra_at = da_at + t["da"]
            res += (w["ca"] + w["da"]) * cpu[mi] + t["ba"] * net + t["sa"] * sto
            rho = max(rho, t["ca"], t["da"])
        else:
            da_at, ra_at = 0.0, ra
        s1 = max(dL_at, ra_at, da_at)
        s2 = max(da_at, rL_at, dL_at)
    res += w["j1"] * cpu[jl] + w["j2"] * cpu[ja]
    e1, e2 = s1 + tj1, s2 + tj2
    rho = max(rho, tj1, tj2, t["u"], t["dJ"])
    if jl != mi:
        e1 += t["c1"]
        res += w["c1"] * cpu[mi] + t["b1"] * net
        rho = max(rho, t["c1"])
    if ja != mi:
        e2 += t["c2"]
        res += w["c2"] * cpu[mi] + t["b2"] * net
        rho = max(rho, t["c2"])
    res += (w["u"] + w["dJ"]) * cpu[mi] + t["sJ"] * sto
    rJ = max(e1, e2) + t["u"] + t["dJ"]
    return max(rJ, L.hang, L.rl, A.rl), res, rho


def _single(ctx: _Context, metric: Metric) -> dict[int, _State]:
    """A one-relation sharing: ΔR filtered and projected to the MV's machine, then applied."""
    a = ctx.query.aliases[0]
    st = ctx.est.alias[a]
    mk, base = _base_state(ctx, a)
    out: dict[int, _State] = {}
    for mi in range(len(ctx.machines)):
        usage = list(base.usage)
        c = ctx.seconds("copy_delta", st.rate)
        d = ctx.seconds("delta_to_rel", st.rate)
        work = ctx.load("copy_delta", st.rate) + ctx.load("delta_to_rel", st.rate)
        nbytes = st.rate * st.width
        usage[3 * mi] += work
        res = base.res + work * ctx.cpu_price[mi]
        if mi != mk:
            usage[3 * mk + 2] += nbytes / 1e6
            usage[3 * mi + 2] += nbytes / 1e6
            res += nbytes * ctx.net_price
        stored = st.rows * st.width
        usage[3 * mi + 1] += stored / 1e9
        res += stored * ctx.store_price
        s = _State(c, c + d, res, max(base.rho, c, d), tuple(usage), None, base.rl)
        if _fits(ctx, s.usage):
            out[mi] = s
    return out


def _dp(ctx: _Context, metric: Metric) -> dict[frozenset[str], dict[int, _State]]:
    """Every state the DP keeps: alias set → machine → best state."""
    aliases = ctx.query.aliases
    if len(aliases) == 1:
        return {ctx.all: _single(ctx, metric)}
    base: dict[str, tuple[int, _State]] = {a: _base_state(ctx, a) for a in aliases}
    best: dict[frozenset[str], dict[int, _State]] = {
        frozenset({a}): {mk: s} for a, (mk, s) in base.items()}
    connected = _connected_sets(ctx.query)
    machines = range(len(ctx.machines))
    for size in range(2, len(aliases) + 1):
        for R in connected[size]:
            states: dict[int, _State] = {}
            rate = ctx.est.stats(R).rate
            scores: dict[int, tuple[float, float]] = {}
            for a in sorted(R):
                left = R - {a}
                if left not in best or not ctx.query.joins_between(left, a):
                    continue
                mk, astate = base[a]
                rel = ctx.est.alias[a].relation.name
                a_new = all(ctx.est.alias[x].relation.name != rel for x in left)
                t, w = _step_times(ctx, left, a)
                for mj, L in best[left].items():
                    for mi in machines:
                        for case in CASES:
                            q = _quick(ctx, L, mj, astate, a_new, mk, mi, case, t, w)
                            if q is None:
                                continue
                            cp, res, rho = q
                            sc = _score_of(ctx, cp, res, rho, rate, metric)
                            if mi in scores and not sc < scores[mi]:
                                continue
                            full = _extend(ctx, L, mj, astate, a_new, mk, mi, case, t, w)
                            assert full is not None
                            assert abs(full.cp - cp) <= 1e-9 * max(1.0, cp) and abs(
                                full.res - res) <= 1e-9 * max(1e-12, res), "DP arithmetic"
                            if not _fits(ctx, full.usage):
                                continue
                            scores[mi] = sc
                            states[mi] = _State(full.dl, full.rl, full.res, full.rho,
                                                full.usage, (left, mj, a, case), full.hang)
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


def optimize(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing, model: TimeModel,
             metric: Metric, prices: Prices | None = None) -> Planned | None:
    """DPT (`metric='time'`) or DPD (`'dollar'`); None when no plan fits the capacity left."""
    ctx = _Context(catalog, query, sharing, model, prices or Prices())
    states = _dp(ctx, metric)
    finals = states.get(ctx.all, {})
    if sharing.mv_machine is not None:
        want = ctx.index[catalog.machine(sharing.mv_machine).name]
        finals = {want: finals[want]} if want in finals else {}
    if not finals:
        return None
    rate = ctx.est.stats(ctx.all).rate
    mi = min(finals, key=lambda m: (_score(ctx, finals[m], rate, metric), m))
    plan = _Builder(ctx, states).build(finals, mi)
    return Planned(plan, evaluate(plan, catalog, sharing, model, ctx.est, prices or Prices()),
                   finals[mi].cp, finals[mi].res)


def evaluate(plan: Plan, catalog: CatalogSnapshot, sharing: Sharing, model: TimeModel,
             est: Estimates, prices: Prices) -> Metrics:
    """Every figure of a plan recomputed from its DAG (the reference for the DP's arithmetic)."""
    machines = {m.name: m for m in catalog.machines}
    usage: dict[str, list[float]] = {m: [0.0, 0.0, 0.0] for m in machines}
    res = 0.0
    rho = 0.0
    period = sharing_period(sharing)
    for e in plan.edges:
        t = edge_seconds(e, model)
        line = model.line(edge_kind(e))
        w = edge_load(line.a, line.b, e.tuples_per_s, 1.0 / period)
        m = machines[e.dst.machine]
        usage[m.name][0] += w
        res += w * prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)
        rho = max(rho, t)
        if isinstance(e, CopyDelta) and e.crosses_machines:
            nbytes = e.tuples_per_s * e.bytes_per_tuple
            usage[e.src.machine][2] += nbytes / 1e6
            usage[e.dst.machine][2] += nbytes / 1e6
            res += nbytes * prices.network_per_byte()
        if isinstance(e, DeltaToRel):
            usage[e.dst.machine][1] += e.stored_bytes / 1e9
            res += e.stored_bytes * prices.storage_per_byte_second()
    cp = plan.critical_path(model)
    rate = est.stats(frozenset(est.query.aliases)).rate
    pen = late_penalty_per_s(rate, rho, sharing.staleness_s, sharing.penalty_per_tuple)
    cost = plan_cost(res, cp, sharing.staleness_s, pen) if math.isfinite(pen) else math.inf
    return Metrics(cp, res, rho, cost,
                   {m: (u[0], u[1], u[2]) for m, u in usage.items() if any(u)})


class _Builder:
    """Rebuild the chosen plan as vertices and edges, following the DP's back-pointers. Every
    vertex is named by its contents (`Expr`), never by the sharing, so identical computations
    of different sharings come out as equal vertices."""

    def __init__(self, ctx: _Context,
                 states: dict[frozenset[str], dict[int, _State]] | None = None) -> None:
        self.ctx = ctx
        self.edges: dict[Edge, None] = {}
        self.s = ctx.sharing.name
        self._states = states or {}

    def add(self, e: Edge) -> None:
        self.edges[e] = None

    def build(self, finals: dict[int, _State], mi: int) -> Plan:
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
        """What σπ(⋈ aliases) holds: each alias's needed columns after its selections."""
        est, q = self.ctx.est, self.ctx.query
        chosen = set(aliases)
        parts = tuple(sorted(
            Part(a, est.alias[a].relation.name, est.alias[a].needed,
                 tuple(sorted(s.sql for s in q.selections_of(a)))) for a in chosen))
        joins = tuple(sorted((j.left.sql(), j.right.sql()) for j in q.joins
                             if j.aliases() <= chosen))
        return Expr(parts, joins)

    def _mv(self, machine: str) -> Vertex:
        """The MV: the relation of the whole join, a vertex like any other."""
        return Vertex("relation", self.content(self.ctx.all), machine)

    def _base(self, a: str) -> tuple[Vertex, Vertex]:
        st = self.ctx.est.alias[a]
        rel = st.relation
        d = Vertex("delta", Expr.base(rel.name), rel.machine)
        r = Vertex("relation", Expr.base(rel.name), rel.machine)
        self.add(DeltaToRel(d, r, rel.update_rate, rel.rows * rel.width))
        return d, r

    def _single(self, a: str, machine: str) -> Vertex:
        st = self.ctx.est.alias[a]
        d, _ = self._base(a)
        dmv = Vertex("delta", self.content([a]), machine)
        mv = self._mv(machine)
        self.add(CopyDelta(d, dmv, st.rate, st.width, self._filters(a), st.needed))
        self.add(DeltaToRel(dmv, mv, st.rate, st.rows * st.width))
        return mv

    def _filters(self, a: str) -> tuple[str, ...]:
        return tuple(s.sql for s in self.ctx.query.selections_of(a))

    def _copy_base(self, a: str, machine: str) -> tuple[Vertex, Vertex, bool]:
        """Base alias `a` at `machine`: its own ΔR and R̂ at home (raw: filters still due), or
        a filtered, projected copy."""
        dc, _, raw = self._copy_base_delta(a, machine)
        if raw:
            return dc, self._base(a)[1], True
        st = self.ctx.est.alias[a]
        rc = Vertex("relation", dc.expr, machine)
        self.add(DeltaToRel(dc, rc, st.rate, st.rows * st.width))
        return dc, rc, False

    def _set(self, R: frozenset[str], m: int) -> tuple[list[str], Vertex, Vertex]:
        """Build <R, m>; returns (join order, ΔR vertex, R vertex)."""
        ctx = self.ctx
        if len(R) == 1:
            (a,) = R
            d, r, _ = self._copy_base(a, ctx.machines[m])
            return [a], d, r
        state = self._lookup(R, m)
        assert state.back is not None
        left, mj, a, case = state.back
        order, dL, rL = self._set(left, mj)
        return self._join(order, left, dL, rL, mj, a, m, case)

    def _lookup(self, R: frozenset[str], m: int) -> _State:
        if R in self._states:
            return self._states[R][m]
        raise AssertionError("unreachable: the DP keeps every state it points back to")

    def _join(self, order: list[str], left: frozenset[str], dL: Vertex, rL: Vertex, mj: int,
              a: str, mi: int, case: str) -> tuple[list[str], Vertex, Vertex]:
        ctx, est = self.ctx, self.ctx.est
        M = ctx.machines
        mk = ctx.index[est.alias[a].home]
        ls, aa = est.stats(left), est.alias[a]
        sel = est.join_selectivity(left, a)
        out = est.stats(left | {a})
        p1_rate, p2_rate = ls.rate * aa.rows * sel, aa.rate * ls.rows * sel
        L_expr = self.content(order)
        new_order = [*order, a]
        J_expr = self.content(new_order)
        raw_left = len(order) == 1 and M[mj] == est.alias[order[0]].home

        def copy_left(machine: str) -> tuple[Vertex, Vertex, bool]:
            if machine == M[mj]:
                return dL, rL, raw_left
            if len(order) == 1:
                return self._copy_base(order[0], machine)
            dc, rc = Vertex("delta", L_expr, machine), Vertex("relation", L_expr, machine)
            self.add(CopyDelta(dL, dc, ls.rate, ls.width))
            self.add(DeltaToRel(dc, rc, ls.rate, ls.rows * ls.width))
            return dc, rc, False

        def delta_left_at(machine: str) -> tuple[Vertex, bool]:
            if machine == M[mj]:
                return dL, raw_left
            if len(order) == 1:
                d, _, raw = self._copy_base_delta(order[0], machine)
                return d, raw
            dc = Vertex("delta", L_expr, machine)
            self.add(CopyDelta(dL, dc, ls.rate, ls.width))
            return dc, False

        if case == "a":
            j1m, j2m = M[mk], M[mj]
            dL1, raw_dL1 = delta_left_at(j1m)
            da_home, ra_home, _ = self._copy_base(a, M[mk])
            da2, raw_da2 = self._copy_base_delta(a, j2m)[0::2]
            j1 = (dL1, raw_dL1, ra_home, da_home, True)
            j2 = (da2, raw_da2, rL, dL, raw_left)
        elif case == "b":
            j1m = j2m = M[mk]
            dLc, rLc, rawc = copy_left(M[mk])
            da_home, ra_home, _ = self._copy_base(a, M[mk])
            j1 = (dLc, rawc, ra_home, da_home, True)
            j2 = (da_home, True, rLc, dLc, rawc)
        elif case == "c":
            j1m = j2m = M[mj]
            dac, rac, rawa = self._copy_base(a, M[mj])
            j1 = (dL, raw_left, rac, dac, rawa)
            j2 = (dac, rawa, rL, dL, raw_left)
        else:
            j1m = j2m = M[mi]
            dLc, rLc, rawc = copy_left(M[mi])
            dac, rac, rawa = self._copy_base(a, M[mi])
            j1 = (dLc, rawc, rac, dac, rawa)
            j2 = (dac, rawa, rLc, dLc, rawc)
        preds = tuple(
            (j.left.sql(), j.right.sql()) if j.left.alias in left else (j.right.sql(), j.left.sql())
            for j in ctx.query.joins_between(left, a))
        lhs = tuple(sorted(order))
        p1 = Vertex("partial", replace(J_expr, left=lhs, driving="left"), j1m)
        p2 = Vertex("partial", replace(J_expr, left=lhs, driving="right"), j2m)
        left_filters = tuple(f for x in order for f in self._filters(x))
        a_filters = self._filters(a)
        d1, raw_d1, other1, od1, raw_o1 = j1
        self.add(Join(d1, other1, od1, p1, "left", preds,
                      (left_filters if raw_d1 else ()) + (a_filters if raw_o1 else ()),
                      p1_rate, ctx.model.join(p1_rate)[1]))  # type: ignore[arg-type]
        d2, raw_d2, other2, od2, raw_o2 = j2
        self.add(Join(d2, other2, od2, p2, "right", preds,
                      (a_filters if raw_d2 else ()) + (left_filters if raw_o2 else ()),
                      p2_rate, ctx.model.join(p2_rate)[1]))  # type: ignore[arg-type]
        p1m, p2m = p1, p2
        if j1m != M[mi]:
            p1m = p1.at(M[mi])
            self.add(CopyDelta(p1, p1m, p1_rate, out.width))
        if j2m != M[mi]:
            p2m = p2.at(M[mi])
            self.add(CopyDelta(p2, p2m, p2_rate, out.width))
        dJ = Vertex("delta", J_expr, M[mi])
        self.add(Union(p1m, p2m, dJ, out.rate))
        J = Vertex("relation", J_expr, M[mi])  # the MV itself when `final`
        self.add(DeltaToRel(dJ, J, out.rate, out.rows * out.width))
        return new_order, dJ, J

    def _copy_base_delta(self, a: str, machine: str) -> tuple[Vertex, None, bool]:
        """Only the delta of base alias `a` at `machine` (for an in-place join's driving side)."""
        st = self.ctx.est.alias[a]
        d, _ = self._base(a)
        if machine == st.home:
            return d, None, True
        dc = Vertex("delta", self.content([a]), machine)
        self.add(CopyDelta(d, dc, st.rate, st.width, self._filters(a), st.needed))
        return dc, None, False
