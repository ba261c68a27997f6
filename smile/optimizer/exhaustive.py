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
from smile.optimizer.dp_build import build_plan
from smile.optimizer.dp_context import Context
from smile.optimizer.dp_evaluate import Metrics, evaluate
from smile.optimizer.join_step import CASES, step

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


def _orders(query: SpjQuery) -> Iterator[tuple[str, ...]]:
    for order in itertools.permutations(query.aliases):
        ok = all(query.joins_between(frozenset(order[:i]), order[i]) for i in range(1, len(order)))
        if ok:
            yield order


def enumerate_plans(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing,
                    model: TimeModel, prices: Prices | None = None) -> Iterator[Enumerated]:
    prices = prices or Prices()
    ctx = Context(catalog, query, sharing, model, prices)
    machines = ctx.machines
    finals = [sharing.mv_machine] if sharing.mv_machine else machines
    n = len(query.aliases)
    if n == 1:
        for mi in finals:
            plan = build_plan(catalog, query, sharing, model, query.aliases, (mi,), (), prices)
            yield _checked(ctx, plan, catalog, sharing, model, prices)
        return
    for order in _orders(query):
        for ms in itertools.product(machines, repeat=n - 1):
            if ms[-1] not in finals:
                continue
            for cases in itertools.product(CASES, repeat=n - 1):
                if not _distinct(ctx, order, ms, cases):
                    continue
                plan = build_plan(catalog, query, sharing, model, order, ms, cases, prices)
                yield _checked(ctx, plan, catalog, sharing, model, prices)


def _distinct(ctx: Context, order: tuple[str, ...], ms: tuple[str, ...],
              cases: tuple[str, ...]) -> bool:
    """Whether every join of this point is a step of its own (not the same as case (a))."""
    prev = ctx.index[ctx.est.alias[order[0]].home]
    for a, m, case in zip(order[1:], ms, cases, strict=True):
        if step(prev, ctx.index[ctx.est.alias[a].home], ctx.index[m], case) is None:
            return False
        prev = ctx.index[m]
    return True


def _checked(ctx: Context, plan: Plan, catalog: CatalogSnapshot, sharing: Sharing,
             model: TimeModel, prices: Prices) -> Enumerated:
    m = evaluate(plan, catalog, sharing, model, ctx.est, prices)
    usage = [0.0] * (3 * len(ctx.machines))
    for name, used in m.usage.items():
        usage[3 * ctx.index[name]:3 * ctx.index[name] + 3] = used
    return Enumerated(plan, m, ctx.fits(tuple(usage)))


def best(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing, model: TimeModel
         ) -> tuple[float, float]:
    """(minimum critical path, minimum COST) over the feasible plans of the space."""
    cp, cost = math.inf, math.inf
    for e in enumerate_plans(catalog, query, sharing, model):
        if e.fits:
            cp = min(cp, e.metrics.cp_s)
            cost = min(cost, e.metrics.cost)
    return cp, cost
