"""Admission (paper §6.2 and §7): plan a sharing with DPT and DPD, decide, and fit it into the
global plan.

`plan_sharing` decides one sharing on its own. Rejected iff no plan fits the capacity left, or
the fastest plan's critical path (DPT) exceeds the staleness SLA, or even that plan cannot keep
up with the update rate (its busiest operator needs more than a second per second of updates:
λ ≥ µ, infinite COST). Otherwise admitted with the cheaper (by COST) of the admissible plans
among DPD and DPT — DPD when it is admissible and not dearer. The decision says why in words
and carries both plans' CP and cost. `PlannerOptions` can make it prefer one algorithm whenever
that one is admissible, and turn hill-climbing or merging off (the live Figs. 12–13 run
separate plans, a merged D and a hill-climbed one, planned by DPT or by DPD).

`admit` decides it against everything already admitted: the DP sees the load D already puts
on each machine; the chosen plan is merged into D (vertices D has are shared), D is
hill-climbed (`hill_climb.py`), and the result must keep every machine within its bound — as
predicted, and as measured plus what the sharing adds; on one box, the machines' total within
the sum of their shares instead (`load.box_over`) — and every sharing's critical path within its
SLA — else the other admissible plan is tried, else
the sharing is rejected with the machine, its load and its bound named.

Must not: touch a database; the catalog snapshot is handed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from smile.costmodel.prices import Prices
from smile.costmodel.time_model import TimeModel
from smile.errors import PlanError
from smile.optimizer import groups
from smile.optimizer.beyond import plan_query
from smile.optimizer.catalog import Usage
from smile.optimizer.dp import Planned, optimize
from smile.optimizer.dp_context import Context as DpContext
from smile.optimizer.dp_context import Reuse
from smile.optimizer.estimate import Estimates
from smile.optimizer.global_plan import GlobalPlan, SharingEntry
from smile.optimizer.hill_climb import hill_climb
from smile.optimizer.load import (
    BOX,
    RESOURCES,
    Assessment,
    Overload,
    assess,
    box_over,
    measured_over,
    raised,
)
from smile.optimizer.parse_spj import parse_query
from smile.optimizer.plan import owned
from smile.optimizer.plumbing import Context

if TYPE_CHECKING:
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.plan import Plan, Vertex
    from smile.optimizer.sharing import Sharing, SpjQuery


Algorithm = Literal["cheapest", "DPD", "DPT"]
ALGORITHMS: tuple[Algorithm, ...] = ("cheapest", "DPD", "DPT")


@dataclass(frozen=True)
class PlannerOptions:
    """How admission plans: which algorithm's plan it takes, whether D is merged and
    hill-climbed; and whether the executor pushes sharings that share vertices together."""

    plumbing: bool = True
    """Hill-climb D (§7.2) at each admission and withdrawal; off, D is only merged."""
    merge: bool = True
    """Merge each new plan into D, its vertices D has already shared; off, every sharing runs
    its own vertices but the base relations' (`plan.owned`: Fig. 12's separate plans, to
    measure what merging saves)."""
    algorithm: Algorithm = "cheapest"
    """`cheapest`: DPD when admissible and not dearer than DPT, else DPT (§6.2). `DPD` or
    `DPT`: that algorithm's plan whenever its critical path is within the SLA, else the
    other's."""

    share_pushes: bool = True
    """How D runs (the executor reads it, and admission charges the push periods it makes,
    `load.ride_split` — on, never fewer pushes of a sharing than
    off, a vertex charged a push of the group once): a sharing due is pushed
    together with the sharings that share most of their vertices with it and are past
    `formulas.SHARE_FROM` of their SLA, to one timestamp, so the vertices they share do their
    fixed work once per push of the group, not once per push of each. Off: every sharing is
    pushed on its own (the paper's §8)."""
    fast: bool = True
    """Plan with the bounded DP on cached spaces (`dp.optimize`'s `fast`) and hill-climb with
    bounds and partial re-assessment (`plumbing.Context.fast`): the same decisions and plans
    as with it off (the reference, for tests and `smile bench admission-scale`). Not kept by
    `to_json`: it is how admission computes, not what it decides."""

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise PlanError(f"algorithm {self.algorithm!r}: one of {', '.join(ALGORITHMS)}")

    def to_json(self) -> dict[str, Any]:
        return {"plumbing": self.plumbing, "merge": self.merge, "algorithm": self.algorithm,
                "share_pushes": self.share_pushes}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PlannerOptions:
        """Options kept as `to_json` wrote them; what is missing keeps its default."""
        d = cls()
        return cls(bool(doc.get("plumbing", d.plumbing)), bool(doc.get("merge", d.merge)),
                   doc.get("algorithm", d.algorithm),
                   bool(doc.get("share_pushes", d.share_pushes)))


@dataclass(frozen=True)
class PlanSummary:
    algorithm: str
    plan: Plan
    cp_s: float
    cost_per_s: float
    resource_cost_per_s: float
    utilization: float
    added_cost_per_s: float | None = None
    """Planned on D (`dp_context.Reuse`): COST of what the plan adds to D, which DPT and DPD are
    compared by; else the plan's own `cost_per_s`."""

    @property
    def marginal_cost_per_s(self) -> float:
        return self.cost_per_s if self.added_cost_per_s is None else self.added_cost_per_s

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
    mv_rate: float = 0.0
    """Tuples per second the MV is expected to receive (λ)."""

    @property
    def plan(self) -> Plan | None:
        return self.chosen.plan if self.chosen else None

    def entry(self, summary: PlanSummary | None = None) -> SharingEntry:
        """What the global plan keeps of this sharing, with the chosen plan (or `summary`'s)."""
        chosen = summary or self.chosen
        if chosen is None:
            raise PlanError(f"sharing {self.sharing.name} was not admitted: {self.reason}")
        p = chosen.plan
        return SharingEntry(self.sharing.name, p.mv, p.sources, self.sharing.staleness_s,
                            self.sharing.penalty_per_tuple, p.outputs, self.mv_rate,
                            chosen.algorithm, p.where, self.sharing.group)

    def global_plan(self) -> GlobalPlan:
        """The chosen plan as a global plan of this sharing alone."""
        entry = self.entry()
        assert self.chosen is not None
        return GlobalPlan().add(self.chosen.plan, entry)

    def usage(self) -> dict[str, Usage]:
        """Capacity the chosen plan takes (to add to the catalog once admitted)."""
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
    return PlanSummary(name, planned.plan, m.cp_s, m.cost, m.resource_cost, m.utilization,
                       planned.added_cost)


def plan_sharing(
    catalog: CatalogSnapshot,
    sharing: Sharing,
    model: TimeModel | None = None,
    prices: Prices | None = None,
    prefer: Algorithm = "cheapest",
    kept: frozenset[Vertex] = frozenset(),
    reuse: Reuse | None = None,
    fast: bool = True,
) -> Decision:
    """Parse, plan with DPT and DPD, and decide (`prefer`: `PlannerOptions.algorithm`; `kept`:
    the shadow copies R̂ a global plan keeps already, whose upkeep takes no more room; `fast`:
    `PlannerOptions.fast`). Bad SQL raises PlanError."""
    model = model or TimeModel.from_json(catalog.time_model)
    prices = prices or Prices()
    parsed = parse_query(sharing.sql, catalog)
    query = parsed.core
    s = sharing.staleness_s
    rate = Estimates(catalog, query).stats(frozenset(query.aliases)).rate

    def best(metric: Literal["time", "dollar"]) -> Planned | None:
        if parsed.spj:
            return optimize(catalog, query, sharing, model, metric, prices, kept, reuse, fast)
        return plan_query(catalog, parsed, sharing, model, metric, prices, kept, reuse, fast)

    dpt = best("time")

    def _decide(admitted: bool, reason: str, chosen: PlanSummary | None,
                dpt: PlanSummary | None, dpd: PlanSummary | None,
                planned: Planned | None = None) -> Decision:
        usage = tuple(sorted(planned.metrics.usage.items())) if planned and admitted else ()
        return Decision(sharing, query, admitted, reason, chosen, dpt, dpd, usage, rate)

    if dpt is None:
        where = f" on {sharing.mv_machine}" if sharing.mv_machine else ""
        return _decide(False, "no plan fits the capacity left on the machines"
                       f"{where} (CPU, disk or network)" + shortfall(
                           catalog, query, sharing, model, prices, kept, reuse, fast),
                       None, None, None)
    t = _summary("DPT", dpt)
    if t.cp_s > s:
        return _decide(False, f"even the fastest plan (DPT) needs {t.cp_s:.3f} s to push an update "
                       f"through (critical path), more than the staleness SLA of {s:g} s",
                       None, t, None, dpt)
    if not math.isfinite(t.cost_per_s):
        return _decide(False, f"even the fastest plan cannot keep up: its busiest operator needs "
                       f"{t.utilization:.2f} s of work per second of updates (λ ≥ µ)",
                       None, t, None, dpt)
    dpd = best("dollar")
    d = _summary("DPD", dpd) if dpd else None
    if d is not None and d.cp_s <= s and prefer != "DPT" and (
            prefer == "DPD" or d.marginal_cost_per_s <= t.marginal_cost_per_s):
        reason = (f"admitted with DPD{' (preferred)' if prefer == 'DPD' else ''}: critical path "
                  f"{d.cp_s:.3f} s within the SLA of {s:g} s, ${d.cost_per_s * 3600:.4f}/hour"
                  + built_on(d, reuse))
        return _decide(True, reason, d, t, d, dpd)
    why = ("DPT is preferred" if prefer == "DPT" else "DPD found no plan" if d is None else
           f"DPD's critical path {d.cp_s:.3f} s exceeds the SLA" if d.cp_s > s else
           "DPT is cheaper than DPD here")
    reason = (f"admitted with DPT ({why}): critical path {t.cp_s:.3f} s within the SLA of "
              f"{s:g} s, ${t.cost_per_s * 3600:.4f}/hour" + built_on(t, reuse))
    return _decide(True, reason, t, t, d, dpt)


def built_on(summary: PlanSummary, reuse: Reuse | None) -> str:
    """What of D a plan reads instead of computing it ('' when nothing joined): the largest
    join result, how many more, and the dollars the plan adds to D's."""
    if reuse is None:
        return ""
    joined = sorted((v for v in summary.plan.vertices() if v in reuse.d.incoming
                     and len(v.expr.parts) > 1 and not v.is_delta),
                    key=lambda v: (-len(v.expr.parts), v.label))
    if not joined:
        return ""
    more = f" and {len(joined) - 1} more of its join results" if len(joined) > 1 else ""
    return (f"; built on D's {joined[0].label}{more}, adding "
            f"${summary.marginal_cost_per_s * 3600:.4f}/hour to it")


def unbounded(catalog: CatalogSnapshot) -> CatalogSnapshot:
    """`catalog` with no bound on any machine and nothing used on it: the DP on it says what a
    plan needs, never that it does not fit.

    >>> from smile.optimizer.catalog import CatalogSnapshot, Machine
    >>> busy = CatalogSnapshot((Machine("m1"),), ()).with_usage({"m1": Usage(1.4)})
    >>> free = unbounded(busy)
    >>> free.usage, free.machines[0].cpu_bound, free.machines[0].cpu_cores
    ((), inf, 2.0)
    """
    return replace(catalog, usage=(), machines=tuple(
        replace(m, max_load=math.inf, disk_gb=math.inf, network_mb_s=math.inf)
        for m in catalog.machines))


def shortfall(catalog: CatalogSnapshot, query: SpjQuery, sharing: Sharing, model: TimeModel,
              prices: Prices, kept: frozenset[Vertex] = frozenset(),
              reuse: Reuse | None = None, fast: bool = True) -> str:
    """Why no plan of `sharing` fits `catalog`, in figures: what its fastest plan would add
    where it does not fit (`dp_context.Context.overflows`), against the room left there ('' if even
    that cannot be said). On one box a machine's operator work is told within the box's."""
    need = optimize(unbounded(catalog), query, sharing, model, "time", prices, kept, reuse,
                    fast)
    if need is None:
        return ""
    ctx = DpContext(catalog, query, sharing, model, prices)
    parts = []
    for o in ctx.overflows(ctx.flat(need.usage)):
        left = max(0.0, o.room)
        what, unit = RESOURCES[o.resource]
        if o.machine is None:
            each = ", ".join(f"{m} {u[0]:.3f}" for m, u in sorted(need.usage.items())
                             if u[0] > 1e-12)
            parts.append(f"{o.added:.3f} {unit} of {what} ({each}) where the box has "
                         f"{left:.3f} left")
        elif o.resource or ctx.box_room is None:
            parts.append(f"{o.added:.3f} {unit} of {what} on {o.machine} where {left:.3f} is "
                         "left")
    return ("; its fastest plan would add " + " and ".join(parts)) if parts else ""


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



@dataclass(frozen=True)
class Admission:
    """A sharing's decision against the global plan."""

    decision: Decision
    """Its own DPT/DPD decision."""
    admitted: bool
    reason: str
    plan: GlobalPlan
    """D after admission (the D handed in, when rejected)."""
    assessment: Assessment
    plumbings: tuple[str, ...] = ()
    """The plumbings hill-climbing applied on the way."""

    @property
    def chosen(self) -> PlanSummary | None:
        return self.decision.chosen if self.admitted else None

    def to_json(self) -> dict[str, Any]:
        name = self.decision.sharing.name
        doc = self.decision.to_json() | {"status": "admitted" if self.admitted else "rejected",
                                         "reason": self.reason,
                                         "plumbings": list(self.plumbings)}
        if self.admitted:
            doc["cp_s"] = round(self.assessment.cps[name], 6)
            doc["period_s"] = round(self.assessment.periods[name], 3)
        # what each machine was predicted to carry with it (or, rejected, without it); on
        # one box, of its share, and all of them of the box's
        a = self.assessment
        doc["machines"] = {m: {"load": round(a.machine_load.get(m, 0.0), 4),
                               "bound": round(a.shares.get(m, cpu), 4)}
                           for m, (cpu, _, _) in sorted(a.bounds.items())}
        if a.box is not None:
            doc["box"] = {"load": round(sum(a.machine_load.values()), 4),
                          "bound": round(a.box, 4)}
        return doc


def admit(plan: GlobalPlan, catalog: CatalogSnapshot, sharing: Sharing,
          model: TimeModel | None = None, prices: Prices | None = None,
          options: PlannerOptions | None = None) -> Admission:
    """Decide `sharing` against the global plan `plan` (see the module's docstring)."""
    options = options or PlannerOptions()
    climb = options.plumbing
    model = model or TimeModel.from_json(catalog.time_model)
    prices = prices or Prices()
    before = assess(plan, catalog, model, prices)
    busy = catalog.with_usage({m: Usage(before.machine_load.get(m, 0.0),
                                        before.machine_disk_gb.get(m, 0.0),
                                        before.machine_net_mb_s.get(m, 0.0))
                               for m in before.bounds})
    kept = frozenset(v for v in plan.vertices if v.base and v.kind == "relation")
    on_d = Reuse.of(plan, model) if options.merge else None
    decision = plan_sharing(busy, sharing, model, prices, options.algorithm, kept, on_d,
                            options.fast)
    if not decision.admitted or decision.chosen is None:
        reason = decision.reason
        if decision.dpt is None:  # no plan fits: say what the machines carry already
            reason += "; " + carried(before)
        return Admission(decision, False, reason, plan, before)
    tries = [decision.chosen] + [s for s in (decision.dpt, decision.dpd)
                                 if s is not None and s is not decision.chosen
                                 and s.cp_s <= sharing.staleness_s]
    # a group's MV is the group's own: never D's (its pushes would move it apart)
    reuse = plan.computing(decision.chosen.plan) if options.merge and not sharing.group \
        else None
    if reuse is not None and (sharing.mv_machine is None
                              or reuse.mv.machine == sharing.mv_machine):
        # D computes this MV already: sharing it adds nothing to any machine, wherever the
        # DP, which sees D's load but not D's vertices, would have put a plan of its own
        tries.insert(0, replace(decision.chosen, plan=reuse,
                                cp_s=reuse.critical_path(model)))
    ctx = Context(catalog, model, prices, options.fast)
    why = ""
    for summary in tries:
        if options.merge:
            mine = groups.own_mv(summary.plan, sharing.group) if sharing.group \
                else summary.plan
            merged = plan.add(mine, replace(decision.entry(summary), mv=mine.mv))
        else:
            own = owned(summary.plan)
            if sharing.group:
                own = groups.own_mv(own, sharing.group)
            merged = plan.add(own, replace(decision.entry(summary), mv=own.mv))
        climbed = hill_climb(merged, ctx, since=plan) if climb else None
        after = climbed.plan if climbed else merged
        a = assess(after, catalog, model, prices)
        over = raised(before, a) or measured_over(before, a, catalog) or box_over(
            before, a, catalog)
        late = a.late()
        if not over and not late:
            name = sharing.name
            reason = (f"admitted with {summary.algorithm}: critical path {a.cps[name]:.3f} s "
                      f"within the SLA of {sharing.staleness_s:g} s, pushed every "
                      f"{a.periods[name]:.1f} s, ${summary.cost_per_s * 3600:.4f}/hour on its "
                      f"own; the global plan goes from {len(plan.vertices)} to "
                      f"{len(after.vertices)} vertices")
            if reuse is not None and summary.plan is reuse:
                reason += f" (its MV's contents are computed by D already, at {reuse.mv.label})"
            else:
                reason += built_on(summary, on_d)
            done = tuple(p.describe() for p in climbed.applied) if climbed else ()
            return Admission(Decision(decision.sharing, decision.query, True, reason,
                                      summary, decision.dpt, decision.dpd,
                                      decision.chosen_usage, decision.mv_rate),
                             True, reason, after, a, done)
        why = _why_not(over, late, a, catalog)
    return Admission(decision, False, f"no room in the global plan: {why}", plan, before)


def carried(a: Assessment) -> str:
    """What each machine carries of its bound of operator work, in words; on one box, of its
    share, and the machines together of the box's.

    >>> from smile.optimizer.load import assess
    >>> from smile.optimizer.catalog import CatalogSnapshot, Machine
    >>> two = (Machine("m1", cpu_cores=1.0), Machine("m2", cpu_cores=1.0))
    >>> carried(assess(GlobalPlan(), CatalogSnapshot(two, ()), TimeModel()))
    'm1 carries 0.000 of its bound 0.700 core-s/s, m2 carries 0.000 of its bound 0.700 core-s/s'
    >>> carried(assess(GlobalPlan(), CatalogSnapshot(two, (), one_box=True), TimeModel()))
    'm1 carries 0.000 of its share 0.700, m2 carries 0.000 of its share 0.700: together 0.000 \
of the 1.400 core-s/s the box leaves operators'
    """
    if a.box is None:
        return ", ".join(f"{m} carries {a.machine_load.get(m, 0.0):.3f} of its bound "
                         f"{cpu:.3f} core-s/s" for m, (cpu, _, _) in sorted(a.bounds.items()))
    return ", ".join(f"{m} carries {a.machine_load.get(m, 0.0):.3f} of its share {share:.3f}"
                     for m, share in sorted(a.shares.items())) + (
        f": together {sum(a.machine_load.values()):.3f} of the {a.box:.3f} core-s/s the box "
        "leaves operators")


def _why_not(over: list[Overload], late: list[str], a: Assessment,
             catalog: CatalogSnapshot) -> str:
    """Why D with the sharing was refused: the first overload, with what its bound is made
    of; else the first sharing it would make late."""
    if not over:
        return (f"with the vertices it would share, the critical path of {late[0]} would be "
                f"{a.cps[late[0]]:.3f} s, over its SLA of {a.slas[late[0]]:g} s")
    first = over[0]
    if first.machine == BOX:
        return f"{first} (they share this box's cores)"
    if first.resource.startswith("operator work") and not catalog.one_box:
        m = catalog.machine(first.machine)
        return f"{first} ({m.max_load:.0%} of its {m.cpu_cores:g} cores)"
    return str(first)


def withdraw(plan: GlobalPlan, catalog: CatalogSnapshot, name: str,
             model: TimeModel | None = None, prices: Prices | None = None,
             climb: bool = True) -> tuple[GlobalPlan, tuple[str, ...]]:
    """D without a sharing (what only it needed goes), hill-climbed again."""
    model = model or TimeModel.from_json(catalog.time_model)
    left = plan.without(name)
    if not climb or not left.sharings:
        return left, ()
    climbed = hill_climb(left, Context(catalog, model, prices or Prices()))
    return climbed.plan, tuple(p.describe() for p in climbed.applied)
