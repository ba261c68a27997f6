"""Exhaustive enumeration of the DP's plan space, for small instances: every left-deep join
order whose prefixes are connected × a machine for every join result × one of the four ways
for every join. Each plan is built as a DAG and evaluated from it, independently of the DP's
arithmetic — the reference for DPT's optimality and DPD's gap.

Must not: be used for admission (it is exponential).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.costmodel.prices import Prices
from smile.optimizer.dp import CASES, Metrics, _Builder, _Context, _State, evaluate

if TYPE_CHECKING:
    from collections.abc import Iterator

    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.plan import Plan
    from smile.optimizer.sharing import Sharing, SpjQuery


@dataclass(frozen=True)
class Enumerated:
    plan: Plan
    metrics: Metrics
    fits: bool


def _plan_at(ctx: _Context, order: tuple[str, ...], machines: tuple[int, ...],
             cases: tuple[str, ...]) -> Plan:
    """The plan the DP's back-pointers would describe for this point of the space."""
    states: dict[frozenset[str], dict[int, _State]] = {}
    prev = ctx.index[ctx.est.alias[order[0]].home]
    for i in range(1, len(order)):
        left = frozenset(order[:i])
        states[left | {order[i]}] = {machines[i - 1]: _State(0.0, 0.0, 0.0, 0.0, (), (
            left, prev, order[i], cases[i - 1]))}
        prev = machines[i - 1]
    return _Builder(ctx, states).build(states[ctx.all], prev)


def build_plan(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing, model: TimeModel,
               order: tuple[str, ...], machines: tuple[str, ...], cases: tuple[str, ...]) -> Plan:
    """The plan of one point of the space: join `order` left-deep, result i on `machines[i]`
    by way `cases[i]` ('a' in place, 'b' copy the left side, 'c' copy the right, 'd' both)."""
    ctx = _Context(catalog, query, sharing, model, Prices())
    return _plan_at(ctx, order, tuple(ctx.index[m] for m in machines), cases)


def _orders(query: SpjQuery) -> Iterator[tuple[str, ...]]:
    for order in itertools.permutations(query.aliases):
        ok = all(query.joins_between(frozenset(order[:i]), order[i]) for i in range(1, len(order)))
        if ok:
            yield order


def enumerate_plans(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing,
                    model: TimeModel, prices: Prices | None = None) -> Iterator[Enumerated]:
    prices = prices or Prices()
    ctx = _Context(catalog, query, sharing, model, prices)
    n = len(query.aliases)
    machines = range(len(ctx.machines))
    finals = ([ctx.index[sharing.mv_machine]] if sharing.mv_machine else list(machines))
    dummy = _State(0.0, 0.0, 0.0, 0.0, (), None)
    if n == 1:
        for mi in finals:
            plan = _Builder(ctx).build({mi: dummy}, mi)
            yield _checked(ctx, plan, catalog, sharing, model, prices)
        return
    for order in _orders(query):
        for ms in itertools.product(machines, repeat=n - 1):
            if ms[-1] not in finals:
                continue
            for cases in itertools.product(CASES, repeat=n - 1):
                plan = _plan_at(ctx, order, ms, cases)
                yield _checked(ctx, plan, catalog, sharing, model, prices)


def _checked(ctx: _Context, plan: Plan, catalog: CatalogSnapshot, sharing: Sharing,
             model: TimeModel, prices: Prices) -> Enumerated:
    m = evaluate(plan, catalog, sharing, model, ctx.est, prices)
    fits = all(
        used[0] <= room[0] + 1e-12 and used[1] <= room[1] + 1e-12 and used[2] <= room[2] + 1e-12
        for name, used in m.usage.items()
        for room in [ctx.room[ctx.index[name]]]
    )
    return Enumerated(plan, m, fits)


def best(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing, model: TimeModel
         ) -> tuple[float, float]:
    """(minimum critical path, minimum COST) over the feasible plans of the space."""
    cp, cost = math.inf, math.inf
    for e in enumerate_plans(catalog, query, sharing, model):
        if e.fits:
            cp = min(cp, e.metrics.cp_s)
            cost = min(cost, e.metrics.cost)
    return cp, cost
