"""Admission (paper §6.2): plan a sharing with DPT and DPD and decide.

Rejected iff no plan fits the capacity left, or the fastest plan's critical path (DPT) exceeds
the staleness SLA, or even that plan cannot keep up with the update rate (its busiest operator
needs more than a second per second of updates: λ ≥ µ, infinite COST). Otherwise admitted with
the cheaper (by COST) of the admissible plans among DPD and DPT — DPD when it is admissible and
not dearer. The decision says why in words and carries both plans' CP and cost.

Must not: touch a database; the catalog snapshot is handed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.costmodel.prices import Prices
from smile.costmodel.time_model import TimeModel
from smile.optimizer.dp import Planned, optimize
from smile.optimizer.parse_spj import parse_sharing_sql

if TYPE_CHECKING:
    from smile.optimizer.catalog import CatalogSnapshot, Usage
    from smile.optimizer.plan import Plan
    from smile.optimizer.sharing import Sharing, SpjQuery


@dataclass(frozen=True)
class PlanSummary:
    algorithm: str
    plan: Plan
    cp_s: float
    cost_per_s: float
    resource_cost_per_s: float
    utilization: float

    @property
    def mv_machine(self) -> str:
        return self.plan.mv.machine

    def to_json(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm, "cp_s": round(self.cp_s, 6),
            "cost_per_s": _num(self.cost_per_s),
            "resource_cost_per_s": _num(self.resource_cost_per_s),
            "utilization": round(self.utilization, 6), "mv_machine": self.mv_machine,
        }


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"


@dataclass(frozen=True)
class Decision:
    sharing: Sharing
    query: SpjQuery
    admitted: bool
    reason: str
    chosen: PlanSummary | None
    dpt: PlanSummary | None
    dpd: PlanSummary | None
    chosen_usage: tuple[tuple[str, tuple[float, float, float]], ...] = ()
    """machine → (CPU cores, disk GB, network MB/s) the chosen plan takes."""

    @property
    def plan(self) -> Plan | None:
        return self.chosen.plan if self.chosen else None

    def usage(self) -> dict[str, Usage]:
        """Capacity the chosen plan takes (to add to the catalog once admitted)."""
        from smile.optimizer.catalog import Usage

        return {m: Usage(*u) for m, u in self.chosen_usage}

    def to_json(self) -> dict[str, Any]:
        return {
            "sharing": self.sharing.name,
            "status": "admitted" if self.admitted else "rejected",
            "reason": self.reason,
            "chosen": self.chosen.algorithm if self.chosen else None,
            "mv_machine": self.chosen.mv_machine if self.chosen else None,
            "dpt": self.dpt.to_json() if self.dpt else None,
            "dpd": self.dpd.to_json() if self.dpd else None,
            "plan": self.plan.to_json() if self.plan else None,
        }


def _summary(name: str, planned: Planned) -> PlanSummary:
    m = planned.metrics
    return PlanSummary(name, planned.plan, m.cp_s, m.cost, m.resource_cost, m.utilization)


def plan_sharing(
    catalog: CatalogSnapshot,
    sharing: Sharing,
    model: TimeModel | None = None,
    prices: Prices | None = None,
) -> Decision:
    """Parse, plan with DPT and DPD, and decide. Bad SQL raises PlanError."""
    model = model or TimeModel.from_json(catalog.time_model)
    prices = prices or Prices()
    query = parse_sharing_sql(sharing.sql, catalog)
    s = sharing.staleness_s
    dpt = optimize(catalog, query, sharing, model, "time", prices)
    if dpt is None:
        where = f" on {sharing.mv_machine}" if sharing.mv_machine else ""
        return _decide(sharing, query, False, "no plan fits the capacity left on the machines"
                       f"{where} (CPU, disk or network)", None, None, None)
    t = _summary("DPT", dpt)
    if t.cp_s > s:
        return _decide(sharing, query, False,
                       f"even the fastest plan (DPT) needs {t.cp_s:.3f} s to push an update "
                       f"through (critical path), more than the staleness SLA of {s:g} s",
                       None, t, None, dpt)
    if not math.isfinite(t.cost_per_s):
        return _decide(sharing, query, False,
                       f"even the fastest plan cannot keep up: its busiest operator needs "
                       f"{t.utilization:.2f} s of work per second of updates (λ ≥ µ)",
                       None, t, None, dpt)
    dpd = optimize(catalog, query, sharing, model, "dollar", prices)
    d = _summary("DPD", dpd) if dpd else None
    if d is not None and d.cp_s <= s and d.cost_per_s <= t.cost_per_s:
        reason = (f"admitted with DPD: critical path {d.cp_s:.3f} s within the SLA of {s:g} s, "
                  f"${d.cost_per_s * 3600:.4f}/hour")
        return _decide(sharing, query, True, reason, d, t, d, dpd)
    why = ("DPD found no plan" if d is None else
           f"DPD's critical path {d.cp_s:.3f} s exceeds the SLA" if d.cp_s > s else
           "DPT is cheaper than DPD here")
    reason = (f"admitted with DPT ({why}): critical path {t.cp_s:.3f} s within the SLA of "
              f"{s:g} s, ${t.cost_per_s * 3600:.4f}/hour")
    return _decide(sharing, query, True, reason, t, t, d, dpt)


def _decide(sharing: Sharing, query: SpjQuery, admitted: bool, reason: str,
            chosen: PlanSummary | None, dpt: PlanSummary | None, dpd: PlanSummary | None,
            planned: Planned | None = None) -> Decision:
    usage = tuple(sorted(planned.metrics.usage.items())) if planned and admitted else ()
    return Decision(sharing, query, admitted, reason, chosen, dpt, dpd, usage)


def admit_all(catalog: CatalogSnapshot, sharings: list[Sharing],
              model: TimeModel | None = None) -> tuple[CatalogSnapshot, list[Decision]]:
    """Admit sharings one after the other, each seeing the capacity the earlier ones took."""
    decisions = []
    for sharing in sharings:
        decision = plan_sharing(catalog, sharing, model)
        decisions.append(decision)
        if decision.admitted:
            catalog = catalog.with_usage(decision.usage())
    return catalog, decisions

