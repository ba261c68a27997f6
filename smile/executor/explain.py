"""A dry run's answer (`POST /sharings?dry_run=true`, `smile plan --live`): what admitting a
sharing would decide and do, told from the admission `SharingService._decide` made — the one
a real submission makes — and D as it runs.

It says: admitted or rejected and why; the algorithm and plumbings; the sharing's part of D
with each vertex marked new or shared with the sharings D already has; its critical path, push
period and predicted dollars (its own plan's $/s, and what D's cost grows by); and per machine
the operator load D puts on it now, with the sharing, and the difference.

Must not: decide (the admission handed in is the decision), or read anything: it is pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.optimizer.load import assess

if TYPE_CHECKING:
    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.admission import Admission
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.global_plan import GlobalPlan


@dataclass(frozen=True)
class MachineDelta:
    machine: str
    load_now: float
    """Core-seconds per second D's operators take on it under the current rates."""
    load_with: float
    """The same with the sharing admitted (the same as `load_now` when rejected)."""
    bound: float
    """What admission holds it to (on one box: its share of what the box leaves)."""

    @property
    def added(self) -> float:
        return self.load_with - self.load_now

    def to_json(self) -> dict[str, float]:
        return {"load_now": round(self.load_now, 6), "load_with": round(self.load_with, 6),
                "added": round(self.added, 6), "bound": round(self.bound, 6)}


@dataclass(frozen=True)
class Explanation:
    name: str
    admitted: bool
    reason: str
    decision: dict[str, Any]
    """What `submit` records as the sharing's decision (`Admission.to_json`)."""
    plan: dict[str, Any] | None
    """The sharing's part of D (`Plan.to_json`), as it would run."""
    vertices: tuple[tuple[str, tuple[str, ...]], ...]
    """Each vertex of that part, with the sharings of D it already serves (none: new)."""
    cp_s: float | None
    period_s: float | None
    cost_per_s: float | None
    """Its own plan's COST ($/s), as `submit` records it."""
    added_cost_per_s: float
    """What COST(D) grows by with it."""
    machines: tuple[MachineDelta, ...]
    algorithm: str | None
    plumbings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": True, "name": self.name,
            "status": "admitted" if self.admitted else "rejected", "reason": self.reason,
            "algorithm": self.algorithm, "plumbings": list(self.plumbings),
            "cp_s": self.cp_s, "period_s": self.period_s, "cost_per_s": self.cost_per_s,
            "added_cost_per_s": self.added_cost_per_s, "plan": self.plan,
            "vertices": [{"vertex": v, "shared_with": list(names), "new": not names}
                         for v, names in self.vertices],
            "machines": {m.machine: m.to_json() for m in self.machines},
            "decision": self.decision,
        }


def explanation(before: GlobalPlan, admission: Admission, catalog: CatalogSnapshot,
                model: TimeModel) -> Explanation:
    """The dry run's answer for `admission`, decided on D = `before` (re-rated by `catalog`,
    the snapshot admission charged) under `model`.

    >>> from smile.costmodel.time_model import TimeModel
    >>> from smile.optimizer.admission import admit
    >>> from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
    >>> from smile.optimizer.global_plan import GlobalPlan
    >>> from smile.optimizer.sharing import Sharing
    >>> t = RelationStats("t", "m1", 1000, 5.0, (ColumnStats("k", "int8", 1000),))
    >>> cat = CatalogSnapshot((Machine("m1"), Machine("m2")), (t,))
    >>> a = admit(GlobalPlan(), cat, Sharing("s", "SELECT t.k FROM t", 10.0, 0.0, "m2"))
    >>> e = explanation(GlobalPlan(), a, cat, TimeModel())
    >>> e.admitted, sum(m.added for m in e.machines) > 0, all(not n for _, n in e.vertices)
    (True, True, True)
    """
    name = admission.decision.sharing.name
    now = assess(before, catalog, model)
    after = admission.assessment
    bounds = after.bounds or now.bounds
    machines = tuple(MachineDelta(m, now.machine_load.get(m, 0.0),
                                  after.machine_load.get(m, 0.0) if admission.admitted
                                  else now.machine_load.get(m, 0.0),
                                  (after.shares or now.shares).get(m, cpu))
                     for m, (cpu, _, _) in sorted(bounds.items()))
    chosen = admission.chosen
    if not admission.admitted or chosen is None:
        return Explanation(name, False, admission.reason, admission.to_json(), None, (), None,
                           None, None, 0.0, machines, None, admission.plumbings)
    part = admission.plan.plan_of(name)
    shr = before.shr
    vertices = tuple((v.label, tuple(sorted(shr.get(v, frozenset()))))
                     for v in sorted(part.vertices(), key=lambda v: v.label))
    return Explanation(name, True, admission.reason, admission.to_json(), part.to_json(),
                       vertices, after.cps[name], after.periods[name], float(chosen.cost_per_s),
                       after.total - now.total, machines, chosen.algorithm,
                       admission.plumbings)
