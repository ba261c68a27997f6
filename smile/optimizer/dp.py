"""Algorithm 1 (paper §6): dynamic programming over join sequences × machines.

A state is a set of aliases `R` joined on machine `m` (`dp_state.State`); it keeps the best way
found to produce R's relation and delta there, judged by COSTCALC — the critical path (DPT) or
COST (DPD) — with the capacity it uses. `R` grows left-deep: `<R−a, mj>` is joined with base
relation `a` (at its home `mk`) into `<R, mi>` in one of the four ways of Fig. 3, each a
`join_step.Step`: where the two partial deltas are computed, and so what is copied where. The
partial deltas are copied to `mi`, united into ΔR and applied to R (the MV at the end).

This module holds the search's frame: the states by size, the one-relation case, D's states
(`dp_context.Reuse`: a state D holds already is free and its plan is D's own route there),
the choice of the final state, and the reference way of trying the joins into a state — every
candidate scored (`dp_state.quick`), the ones that would win charged again with their
capacity (`dp_state.extend`). `dp_bounded` keeps the same states trying the candidates best
bound first and skipping those a bound shows cannot win (`optimize(..., fast=True)`, the
default). The winner is rebuilt as a DAG (`dp_build`) and
every figure recomputed from it (`dp_evaluate`) — the tests check the two agree.

Must not: parse SQL or touch a database.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from smile.costmodel.ledger import Ledger
from smile.costmodel.prices import Prices
from smile.optimizer.dp_bounded import bounded_into, joinable
from smile.optimizer.dp_build import Builder
from smile.optimizer.dp_context import Context
from smile.optimizer.dp_evaluate import Metrics, evaluate, reaching
from smile.optimizer.dp_state import (
    Metric,
    Scores,
    State,
    States,
    extend,
    quick,
    score,
    score_of,
)
from smile.optimizer.join_step import CASES, step

if TYPE_CHECKING:
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.dp_context import Reuse
    from smile.optimizer.plan import Plan, Vertex
    from smile.optimizer.sharing import Sharing, SpjQuery


class Into(Protocol):
    """How the states of one alias set `R` are found from the states of its subsets
    (`best`): machine → the best state there, and its score (`dp_state.score_of`)."""

    def __call__(self, ctx: Context, R: frozenset[str], best: States, rate: float,
                 metric: Metric) -> tuple[dict[int, State], Scores]: ...


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
             reuse: Reuse | None = None, fast: bool = True) -> Planned | None:
    """DPT (`metric='time'`) or DPD (`'dollar'`); None when no plan fits the capacity left.
    `kept`: the shadow copies R̂ the global plan keeps already (its vertices) — their
    upkeep is on their machine's load, and a plan reading them adds none of it. `reuse`: the
    global plan's vertices, which the DP builds on (`Reuse`) and which add no load either.
    `fast`: the bounded search on the query's cached space (`dp_bounded`, `dp_space`), which
    keeps the same states; off, every candidate is scored on a space built afresh."""
    prices = prices or Prices()
    ctx = Context(catalog, query, sharing, model, prices, reuse, cached=fast)
    if reuse is not None:
        kept = kept | reuse.d.vertices
    states = search(ctx, metric, bounded_into if fast else reference_into)
    finals = states.get(ctx.all, {})
    if sharing.mv_machine is not None:
        want = ctx.index[catalog.machine(sharing.mv_machine).name]
        finals = {want: finals[want]} if want in finals else {}
    rate = ctx.est.stats(ctx.all).rate
    for mi in sorted(finals, key=lambda m: (score(ctx, finals[m], rate, metric), m)):
        plan = Builder(ctx, states).build(mi)
        metrics = evaluate(plan, catalog, sharing, model, ctx.est, prices, kept)
        used = reaching(plan)  # what D will keep of it: a home R̂ no step reads goes
        usage = metrics.usage if used == plan else evaluate(
            used, catalog, sharing, model, ctx.est, prices, kept).usage
        if ctx.fits(ctx.flat(usage)):
            added = None if reuse is None else evaluate(
                plan, catalog, sharing, model, ctx.est, prices, kept, reuse.d.vertices).cost
            return Planned(plan, metrics, finals[mi].cp, finals[mi].res, usage, added)
    return None


def search(ctx: Context, metric: Metric, into: Into) -> States:
    """Every state the DP keeps, those of each alias set found by `into`."""
    aliases = ctx.query.aliases
    if len(aliases) == 1:
        return {ctx.all: single(ctx)}
    best: States = {}
    for a in aliases:
        mk, s = ctx.space.base(a)
        best[frozenset({a})] = {mk: s}
    connected = connected_sets(ctx.query)
    for size in range(2, len(aliases) + 1):
        for R in connected[size]:
            rate = ctx.est.stats(R).rate
            states, scores = into(ctx, R, best, rate, metric)
            if size < len(aliases):  # the MV: `computing`'s
                held_by_d(ctx, R, rate, metric, states, scores)
            if states:
                best[R] = states
    return best


def held_by_d(ctx: Context, R: frozenset[str], rate: float, metric: Metric,
              states: dict[int, State], scores: Scores) -> None:
    """`<R, mi>` as D holds it (`Context.reused`), where it scores better than the joins."""
    for mi in range(len(ctx.machines)):
        held = ctx.reused(R, mi)
        if held is None:
            continue
        sc = score(ctx, held, rate, metric)
        if mi not in scores or sc < scores[mi]:
            scores[mi], states[mi] = sc, held


def reference_into(ctx: Context, R: frozenset[str], best: States, rate: float,
                   metric: Metric) -> tuple[dict[int, State], Scores]:
    """The states of `R`: every join into it tried in turn (`reference_joins`)."""
    states: dict[int, State] = {}
    scores: Scores = {}
    for a, left in joinable(ctx, R, best):
        reference_joins(ctx, left, a, best[left], rate, metric, states, scores)
    return states, scores


def reference_joins(ctx: Context, left: frozenset[str], a: str, lefts: dict[int, State],
                    rate: float, metric: Metric, states: dict[int, State],
                    scores: Scores) -> None:
    """Every step `<left, mj> ⋈ a → <R, mi>` scored (`quick`); one that scores better than
    the best so far at `mi` is charged again with its capacity and kept if it fits."""
    mk, astate = ctx.space.base(a)
    a_new = ctx.space.new_relation(left, a)
    figures = ctx.space.figures(left, a)
    machines = range(len(ctx.machines))
    for mj, L in lefts.items():
        for mi in machines:
            for case in CASES:
                s = step(mj, mk, mi, case)
                if s is None:
                    continue
                cp, res, rho = quick(ctx, L, astate, a_new, s, figures)
                sc = score_of(ctx, cp, res, rho, rate, metric)
                if mi in scores and not sc < scores[mi]:
                    continue
                full = extend(ctx, L, astate, a_new, s, figures)
                if not ctx.fits(full.usage):
                    continue
                scores[mi] = sc
                states[mi] = replace(full, back=(left, mj, a, case))


def single(ctx: Context) -> dict[int, State]:
    """A one-relation sharing: ΔR filtered and projected to the MV's machine, then applied."""
    a = ctx.query.aliases[0]
    st = ctx.est.alias[a]
    mk, base = ctx.space.base(a)
    out: dict[int, State] = {}
    for mi in range(len(ctx.machines)):
        ledger = Ledger(ctx.cpu_price, ctx.net_price, ctx.store_price,
                        res=base.res, rho=base.rho, usage=list(base.usage))
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


def connected_sets(query: SpjQuery) -> dict[int, list[frozenset[str]]]:
    """The sets of aliases the query's joins connect, by size (each sorted)."""
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
