"""The REST routes: thin — validate, call the sharing service or the store, shape the answer.
Every route but `/healthz` and the dashboard's page (which holds no data and asks for a token)
needs a consumer's bearer token (`auth`); publishing, consumers, `/plan` (and its planner
options) and `/metrics` are for admins; a consumer sees only its own sharings.

Must not: plan, install or push; errors are mapped to HTTP in `app.py`.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from psycopg.conninfo import conninfo_to_dict

from smile.api import dashboard
from smile.api.auth import AdminDep, ConsumerDep  # noqa: TC001 (FastAPI reads them)
from smile.api.models import (
    AdmittedOut,
    ConsumerIn,
    ConsumerOut,
    EdgeLoadOut,
    MachineOut,
    MvOut,
    PlannerOptionsIO,
    RejectedOut,
    RelationIn,
    RelationOut,
    SharingIn,
    SharingOut,
)
from smile.api.services import Services, get_services, get_store, sharing_service
from smile.costmodel.time_model import EDGE_KINDS
from smile.executor import consumers
from smile.executor.machine_load import TOP_EDGES
from smile.executor.scheduler import SUSTAINED_S
from smile.executor.sharings import visible
from smile.executor.store import CatalogStore, SharingRow
from smile.optimizer.admission import PlannerOptions

router = APIRouter()
ServicesDep = Annotated[Services, Depends(get_services)]
StoreDep = Annotated[CatalogStore, Depends(get_store)]
SharingId = Annotated[int, Path(ge=1, le=2**31 - 1)]


@router.get("/healthz")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/consumers", status_code=201, response_model=ConsumerOut)
def create_consumer(body: ConsumerIn, _: AdminDep, store: StoreDep) -> ConsumerOut:
    """A new consumer; its token is in this answer and nowhere else."""
    created = consumers.create(store, body.name, body.admin)
    return ConsumerOut(name=body.name, admin=body.admin, token=created.token)


@router.get("/me", response_model=ConsumerOut)
def me(consumer: ConsumerDep) -> ConsumerOut:
    return ConsumerOut(name=consumer.name, admin=consumer.admin)


@router.post("/relations", status_code=201, response_model=RelationOut)
def publish(body: RelationIn, _: AdminDep, services: ServicesDep,
            store: StoreDep) -> RelationOut:
    machine, table = sharing_service(services, store).publish(body.machine, body.table)
    return RelationOut(machine=machine, table=table)


@router.delete("/relations/{machine}/{table}", status_code=204)
def unpublish(machine: str, table: str, _: AdminDep, services: ServicesDep,
              store: StoreDep) -> Response:
    sharing_service(services, store).unpublish(machine, table)
    return Response(status_code=204)


@router.get("/relations", response_model=list[RelationOut])
def relations(_: ConsumerDep, store: StoreDep) -> list[RelationOut]:
    return [RelationOut(machine=m, table=t) for m, t in store.relations()]


@router.post("/sharings", status_code=201, response_model=AdmittedOut,
             responses={422: {"model": RejectedOut}})
def submit(body: SharingIn, consumer: ConsumerDep, services: ServicesDep,
           store: StoreDep) -> Any:
    svc = sharing_service(services, store)
    done = svc.submit(body.name, body.sql, body.staleness_s, body.penalty_per_tuple, consumer,
                      mv_machine=body.mv_machine)
    row, admission = done.row, done.admission
    if row.status != "admitted" or admission.chosen is None:
        return JSONResponse(status_code=422, content=RejectedOut(
            id=row.id, name=row.name, reason=row.reason).model_dump())
    return AdmittedOut(id=row.id, name=row.name, status=row.status, reason=row.reason,
                       plan=admission.plan.plan_of(row.name).to_json(),
                       cp_s=admission.assessment.cps[row.name],
                       period_s=admission.assessment.periods[row.name],
                       cost_per_s=float(admission.chosen.cost_per_s),
                       algorithm=admission.chosen.algorithm,
                       plumbings=list(admission.plumbings), mv=MvOut(**svc.mv_location(row)))


def _out(services: Services, store: CatalogStore, row: SharingRow) -> SharingOut:
    out = SharingOut(id=row.id, name=row.name, sql=row.sql, status=row.status,
                     reason=row.reason, sla_s=row.staleness_s,
                     penalty_per_tuple=row.penalty_per_tuple, cp_s=row.cp_s,
                     cost_per_s=row.cost_per_s, created_at=row.created_at,
                     withdrawn_at=row.withdrawn_at)
    if row.status != "admitted":
        return out
    out.mv = MvOut(**sharing_service(services, store).mv_location(row))
    audit = store.last_audit(row.name, row.created_at, row.withdrawn_at)
    if audit:
        out.violations = int(audit["violations"])
        out.resource_cost = float(audit["resource_cost"])
        out.penalty_cost = float(audit["penalty_cost"])
        out.cost_so_far = out.resource_cost + out.penalty_cost
    out.work_s, out.tuples_moved = store.work(row.name, row.created_at, row.withdrawn_at)
    gone = services.executor.unreachable(row.name)
    if gone:
        out.degraded = "; ".join(f"machine {m} unreachable since {t.isoformat()}"
                                 for m, t in gone.items())
    st = services.executor.timestamps(row.name)
    if st is not None:  # staleness now: the timestamps the executor read ≤ 0.1 s ago
        out.staleness_s, out.mv_ts = st.seconds, st.mv_ts
        out.sla_ok = st.seconds <= row.staleness_s
    return out


@router.get("/sharings", response_model=list[SharingOut])
def list_sharings(consumer: ConsumerDep, services: ServicesDep,
                  store: StoreDep) -> list[SharingOut]:
    return [_out(services, store, r) for r in store.sharings() if visible(r, consumer)]


@router.get("/sharings/{sharing_id}", response_model=SharingOut)
def get_sharing(sharing_id: SharingId, consumer: ConsumerDep, services: ServicesDep,
                store: StoreDep) -> SharingOut:
    return _out(services, store, sharing_service(services, store).get(sharing_id, consumer))


@router.get("/sharings/{sharing_id}/history")
def history(sharing_id: SharingId, consumer: ConsumerDep, services: ServicesDep,
            store: StoreDep,
            limit: Annotated[int, Query(ge=1, le=10_000)] = 720) -> dict[str, Any]:
    """The auditor's last `limit` snapshots (720: an hour of 5-s snapshots)."""
    row = sharing_service(services, store).get(sharing_id, consumer)
    points = store.audit_series(row.name, limit, row.created_at, row.withdrawn_at)
    return {"id": row.id, "name": row.name, "sla_s": row.staleness_s,
            "points": [{k: (v.isoformat() if isinstance(v, datetime) else v)
                        for k, v in p.items()} for p in points]}


@router.delete("/sharings/{sharing_id}", response_model=SharingOut)
def withdraw(sharing_id: SharingId, consumer: ConsumerDep, services: ServicesDep,
             store: StoreDep) -> SharingOut:
    return _out(services, store,
                sharing_service(services, store).withdraw(sharing_id, consumer))


@router.get("/machines", response_model=list[MachineOut])
def machines(_: ConsumerDep, services: ServicesDep, store: StoreDep,
             edges: Annotated[int, Query(ge=0, le=100_000)] = TOP_EDGES) -> list[MachineOut]:
    """Each machine's health and loads, with its `edges` largest edges."""
    reports = services.machine_loads(store, edges)
    now = time.time()  # after the prediction: a heartbeat may arrive meanwhile
    out = []
    for m in services.topology.machines:
        state = services.executor.machines.get(m.name)
        ago = now - state.last_beat if state and state.last_beat else None
        d = conninfo_to_dict(m.dsn)  # host and port only: the DSN carries SMILE's password
        host = f"{d.get('host', '')}:{d.get('port', 5432)}"
        r = reports[m.name]
        out.append(MachineOut(
            name=m.name, dsn_host=host, healthy=ago is not None and ago < 5,
            last_heartbeat_s_ago=ago, load=state.load if state else 0.0,
            predicted_load=r.predicted, measured_load=r.measured, bound=r.bound,
            sustained_load=r.sustained, over_bound=r.over_bound, at_risk=list(r.at_risk),
            warning=r.warning(SUSTAINED_S),
            edges=[EdgeLoadOut(vertex=e.vertex, kind=e.kind, sharings=list(e.sharings),
                               predicted=e.predicted, measured=e.measured,
                               pushes_per_s=e.pushes_per_s, tuples_per_s=e.tuples_per_s,
                               fixed_s=e.fixed_s, per_tuple_s=e.per_tuple_s, scale=e.scale)
                   for e in r.edges]))
    return out


@router.get("/plan", response_model=None)
def plan(_: AdminDep, services: ServicesDep,
         format: Annotated[str, Query(pattern="^(json|svg)$")] = "json") -> Any:
    """The global plan D: every vertex and edge once, with the sharings it serves (SHR)."""
    phys = services.executor.plan
    if phys is None:
        from smile.optimizer.global_plan import GlobalPlan

        current = GlobalPlan()
    else:
        current = phys.plan
    if format == "svg":
        from smile.optimizer.plan_svg import plan_svg

        return Response(plan_svg(current), media_type="image/svg+xml")
    return {"version": services.executor.version} | current.to_json()


@router.get("/plan/options", response_model=PlannerOptionsIO)
def planner_options(_: AdminDep, services: ServicesDep, store: StoreDep) -> PlannerOptionsIO:
    """How the admissions and withdrawals to come plan."""
    return PlannerOptionsIO(**sharing_service(services, store).options().to_json())


@router.put("/plan/options", response_model=PlannerOptionsIO)
def set_planner_options(body: PlannerOptionsIO, _: AdminDep, services: ServicesDep,
                        store: StoreDep) -> PlannerOptionsIO:
    """Change them; the running plan stays as it is until the next admission or withdrawal."""
    options = PlannerOptions(body.plumbing, body.merge, body.algorithm, body.share_pushes)
    return PlannerOptionsIO(**sharing_service(services, store).set_options(options).to_json())


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(_: AdminDep, services: ServicesDep, store: StoreDep) -> str:
    lines = [
        "# HELP smile_sharing_staleness_seconds Staleness at the last audit snapshot.",
        "# TYPE smile_sharing_staleness_seconds gauge",
    ]
    everything = store.sharings()
    rows = [r for r in everything if r.status == "admitted"]
    audits = {r.name: store.last_audit(r.name, r.created_at) for r in rows}
    gauges = [("staleness_seconds", "staleness_s"), ("sla_seconds", "sla_s")]
    counters = [("violations_total", "violations"), ("tuples_moved_total", "tuples_moved"),
                ("late_tuples_total", "late_tuples"), ("work_seconds_total", "work_s")]
    for metric, key in gauges + counters:
        if metric != "staleness_seconds":
            kind = "counter" if (metric, key) in counters else "gauge"
            lines += [f"# HELP smile_sharing_{metric} {key} from the auditor.",
                      f"# TYPE smile_sharing_{metric} {kind}"]
        for name, audit in audits.items():
            if audit is not None:
                lines.append(f'smile_sharing_{metric}{{sharing="{name}"}} {float(audit[key])}')
    lines += ["# HELP smile_sharing_cost_dollars Resources and penalties so far.",
              "# TYPE smile_sharing_cost_dollars counter"]
    for name, audit in audits.items():
        if audit is not None:
            for part in ("resource_cost", "penalty_cost"):
                lines.append(f'smile_sharing_cost_dollars{{sharing="{name}",part="{part}"}} '
                             f"{float(audit[part])}")
    ex = services.executor
    lines += ["# HELP smile_executor_pushes_total Pushes completed.",
              "# TYPE smile_executor_pushes_total counter"]
    lines += [f'smile_executor_pushes_total{{sharing="{t.name}"}} {t.pushes}'
              for t in ex.tracked.values()]
    lines += ["# HELP smile_machine_load Operator core-seconds per second (predicted: the "
              "global plan at the current rates; measured: PUSH_DONEs of the last minute; "
              "sustained: of the last five; bound: what admission holds it to, on one box "
              "its share).",
              "# TYPE smile_machine_load gauge"]
    reports = sorted(services.machine_loads(store).items())
    for kind in ("predicted", "measured", "sustained", "bound"):
        lines += [f'smile_machine_load{{machine="{m}",kind="{kind}"}} {v}'
                  for m, r in reports if (v := getattr(r, kind)) is not None]
    lines += ["# HELP smile_machine_over_bound 1 while the sustained load is over the bound "
              "(the sharings on the machine are at risk).", "# TYPE smile_machine_over_bound gauge"]
    lines += [f'smile_machine_over_bound{{machine="{m}"}} {int(r.over_bound)}' for m, r in reports]
    lines += ["# HELP smile_time_model_refits_total Online re-fits of the time model.",
              "# TYPE smile_time_model_refits_total counter", f"smile_time_model_refits_total "
              f"{ex.refits}",
              "# HELP smile_time_model_seconds Each edge kind's current line, seconds = a + b "
              "* tuples (coef a: per push, b: per tuple), and the dispatch overhead per edge; "
              "the calibrated ones beside them (model=\"calibrated\").",
              "# TYPE smile_time_model_seconds gauge"]
    for which, model in (("current", ex.model), ("calibrated", ex.calibrated)):
        for kind in EDGE_KINDS:
            line = model.line(kind)
            lines += [f'smile_time_model_seconds{{model="{which}",kind="{kind}",coef="{c}"}} '
                      f"{v}" for c, v in (("a", line.a), ("b", line.b))]
        lines.append(f'smile_time_model_seconds{{model="{which}",kind="dispatch",coef="a"}} '
                     f"{model.dispatch_s}")
    lines += ["# HELP smile_sharings Sharings by status.",
              "# TYPE smile_sharings gauge"]
    counts: dict[str, int] = {}
    for r in everything:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines += [f'smile_sharings{{status="{k}"}} {v}' for k, v in sorted(counts.items())]
    return "\n".join(lines) + "\n"


@router.get("/dashboard", response_class=HTMLResponse)
def show_dashboard() -> str:
    return dashboard.PAGE
