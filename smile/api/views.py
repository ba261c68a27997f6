"""What the routes answer, filled from the domain: a sharing with its MV, its last audit, the
work done for it and the executor's reading of its staleness; an admission's figures; a
sharing's audit history; each machine's heartbeat and loads; the global plan D as it runs.

Must not: change anything, or speak HTTP (statuses are the routes' and `app.py`'s).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from smile.api.models import (
    AdmittedOut,
    EdgeLoadOut,
    MachineOut,
    MvOut,
    RejectedOut,
    SharingOut,
)
from smile.db import host_port
from smile.executor.catalog_live import machine_spec
from smile.executor.clock import UNREACHABLE_S
from smile.executor.machine_load import SUSTAINED_S
from smile.optimizer.global_plan import GlobalPlan

if TYPE_CHECKING:
    from smile.api.services import Services
    from smile.executor.clock import Beat
    from smile.executor.machine_load import EdgeLoad, MachineLoad
    from smile.executor.runtime import Executor
    from smile.executor.sharings import SharingService, Submitted
    from smile.executor.store import CatalogStore, SharingRow


def sharing_out(row: SharingRow, sharings: SharingService) -> SharingOut:
    """The sharing as its consumer sees it; for an admitted one, where its MV is, its costs
    so far, and its staleness now: from the vertex timestamps the executor last heard of (the
    agents' heartbeats carry them every second, a push's answer at once)."""
    out = SharingOut(id=row.id, name=row.name, sql=row.sql, status=row.status,
                     reason=row.reason, sla_s=row.staleness_s,
                     penalty_per_tuple=row.penalty_per_tuple, cp_s=row.cp_s,
                     cost_per_s=row.cost_per_s, created_at=row.created_at,
                     withdrawn_at=row.withdrawn_at, group=row.decision.get("group"))
    if row.status != "admitted":
        return out
    store, executor = sharings.store, sharings.executor
    out.mv = MvOut(**sharings.mv_location(row))
    audit = store.last_audit(row.name, row.created_at, row.withdrawn_at)
    if audit:
        out.violations = int(audit["violations"])
        out.resource_cost = float(audit["resource_cost"])
        out.penalty_cost = float(audit["penalty_cost"])
        out.cost_so_far = out.resource_cost + out.penalty_cost
    out.work_s, out.tuples_moved = store.work(row.name, row.created_at, row.withdrawn_at)
    phys = executor.plan
    if phys is not None and row.name in phys.plan.names():
        out.pushes_by_path = store.pushes_by_path(
            row.name, phys.plan.sharing(row.name).mv.label, row.created_at, row.withdrawn_at)
    gone = executor.unreachable(row.name)
    if gone:
        out.degraded = "; ".join(f"machine {m} unreachable since {t.isoformat()}"
                                 for m, t in gone.items())
    st = executor.timestamps(row.name)
    if st is not None:
        out.staleness_s, out.mv_ts = st.seconds, st.mv_ts
        out.sla_ok = st.seconds <= row.staleness_s
    return out


def admitted(done: Submitted) -> bool:
    return done.row.status == "admitted" and done.admission.chosen is not None


def admitted_out(done: Submitted, sharings: SharingService) -> AdmittedOut:
    row, admission = done.row, done.admission
    assert admission.chosen is not None  # `admitted(done)`
    return AdmittedOut(id=row.id, name=row.name, status=row.status, reason=row.reason,
                       plan=admission.plan.plan_of(row.name).to_json(),
                       cp_s=admission.assessment.cps[row.name],
                       period_s=admission.assessment.periods[row.name],
                       cost_per_s=float(admission.chosen.cost_per_s),
                       algorithm=admission.chosen.algorithm,
                       plumbings=list(admission.plumbings),
                       charged_by_recompute=row.name in admission.assessment.recomputed,
                       mv=MvOut(**sharings.mv_location(row)))


def rejected_out(done: Submitted) -> RejectedOut:
    return RejectedOut(id=done.row.id, name=done.row.name, reason=done.row.reason)


def history(row: SharingRow, store: CatalogStore, limit: int) -> dict[str, Any]:
    """The auditor's last `limit` snapshots of the sharing, oldest first."""
    points = store.audit_series(row.name, limit, row.created_at, row.withdrawn_at)
    return {"id": row.id, "name": row.name, "sla_s": row.staleness_s,
            "points": [{k: (v.isoformat() if isinstance(v, datetime) else v)
                        for k, v in p.items()} for p in points]}


def machines_out(services: Services, store: CatalogStore, edges: int) -> list[MachineOut]:
    """Each machine's health and loads, with its `edges` largest edges; healthy while its
    agent's last heartbeat is under `UNREACHABLE_S` old, and when not, why its database does
    not take SMILE's connection, if it does not."""
    if not services.topology.machines:  # `smile up --machines 0`, nothing attached yet
        return []
    reports = services.machine_loads(store, edges)
    now = time.time()  # after the prediction: a heartbeat may arrive meanwhile
    out = []
    for m in services.topology.machines:
        state = services.executor.machines.get(m.name)
        ago = now - state.last_beat if state and state.last_beat else None
        spec = machine_spec(services.topology, m)
        one = _machine_out(m.name, host_port(m.dsn), state, ago, reports[m.name])
        why = None if one.healthy else services.probes.why(m)
        out.append(one.model_copy(update={
            "origin": m.origin, "cores": spec.cpu_cores, "price_per_hour": spec.price_per_hour,
            "unreachable": why.reason if why else None, "lost": why.lost if why else None}))
    return out


def _machine_out(name: str, host: str, state: Beat | None, ago: float | None,
                 r: MachineLoad) -> MachineOut:
    return MachineOut(
        name=name, dsn_host=host, healthy=ago is not None and ago < UNREACHABLE_S,
        last_heartbeat_s_ago=ago, load=state.load if state else 0.0,
        predicted_load=r.predicted, measured_load=r.measured, bound=r.bound,
        sustained_load=r.sustained, over_bound=r.over_bound, at_risk=list(r.at_risk),
        warning=r.warning(SUSTAINED_S), edges=[_edge_out(e) for e in r.edges])


def _edge_out(e: EdgeLoad) -> EdgeLoadOut:
    return EdgeLoadOut(vertex=e.vertex, kind=e.kind, sharings=list(e.sharings),
                       predicted=e.predicted, measured=e.measured,
                       pushes_per_s=e.pushes_per_s, tuples_per_s=e.tuples_per_s,
                       fixed_s=e.fixed_s, per_tuple_s=e.per_tuple_s, scale=e.scale)


def current_plan(executor: Executor) -> GlobalPlan:
    """D as the executor runs it (empty before the first admission)."""
    phys = executor.plan
    return phys.plan if phys is not None else GlobalPlan()
