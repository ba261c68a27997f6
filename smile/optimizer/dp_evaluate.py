"""Every figure of a plan recomputed from its DAG: the reference the DP's arithmetic is checked
against, and what admission reports (critical path, resCost, ρ, COST, the capacity used).

Charged through the same ledger as the DP (`costmodel.ledger.Ledger`), with each kind's line
as the DP charges it: the executor's per-edge scales are D's assessment's to apply
(`load.assess`).

Must not: choose or build plans; touch a database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from smile.costmodel.formulas import edge_load, late_penalty_per_s, plan_cost
from smile.costmodel.ledger import Ledger
from smile.optimizer.dp_context import sharing_period
from smile.optimizer.plan import (
    Aggregate,
    CopyDelta,
    DeltaToRel,
    Plan,
    edge_kind,
    edge_seconds,
    edge_tuples,
)

if TYPE_CHECKING:
    from smile.costmodel.prices import Prices
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.estimate import Estimates
    from smile.optimizer.plan import Vertex
    from smile.optimizer.sharing import Sharing


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
    charged through the same ledger — with each kind's line, as the DP charges it. The usage
    leaves out the upkeep of the R̂ in `kept` (the global plan's already); the edges into
    `free` (D's vertices, `dp_context.Reuse`) are not charged at all: what the plan adds to
    D."""
    model = replace(model, scales={})
    names = [m.name for m in catalog.machines]
    index = {m: i for i, m in enumerate(names)}
    ledger = Ledger([prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)
                     for m in catalog.machines], prices.network_per_byte(),
                    prices.storage_per_byte_second())
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
        if isinstance(e, (DeltaToRel, Aggregate)):
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
