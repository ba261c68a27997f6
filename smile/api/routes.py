"""The REST routes: each validates (the models and `Depends`), calls one service, and hands
back what `views` makes of the answer. Every route but `/healthz` and the dashboard's files
(`dashboard.py`: they hold no data) needs a consumer's bearer token (`auth`); publishing,
consumers, `/plan` (and its planner options) and `/metrics` are for admins; a consumer sees
only its own sharings.

Must not: plan, install, push or read the catalog itself (the services and `views` do); errors
are mapped to HTTP in `app.py`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from smile.api import metrics as prometheus
from smile.api import views
from smile.api.auth import AdminDep, ConsumerDep  # noqa: TC001 (FastAPI reads them)
from smile.api.models import (
    AdmittedOut,
    ConsumerIn,
    ConsumerOut,
    MachineOut,
    PlannerOptionsIO,
    RejectedOut,
    RelationIn,
    RelationOut,
    SharingIn,
    SharingOut,
)
from smile.api.services import (  # noqa: TC001 (FastAPI reads them)
    ServicesDep,
    SharingsDep,
    StoreDep,
)
from smile.executor import alerts, consumers
from smile.executor.machine_load import TOP_EDGES
from smile.executor.sharings import visible
from smile.optimizer.admission import PlannerOptions
from smile.optimizer.plan_svg import plan_svg

router = APIRouter()
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
def publish(body: RelationIn, _: AdminDep, sharings: SharingsDep) -> RelationOut:
    machine, table = sharings.publish(body.machine, body.table)
    return RelationOut(machine=machine, table=table)


@router.delete("/relations/{machine}/{table}", status_code=204)
def unpublish(machine: str, table: str, _: AdminDep, sharings: SharingsDep) -> Response:
    sharings.unpublish(machine, table)
    return Response(status_code=204)


@router.get("/relations", response_model=list[RelationOut])
def relations(_: ConsumerDep, store: StoreDep) -> list[RelationOut]:
    return [RelationOut(machine=m, table=t) for m, t in store.relations()]


@router.post("/sharings", status_code=201, response_model=AdmittedOut,
             responses={200: {"description": "dry_run: what a submission would decide "
                                             "(docs/api.md), nothing changed"},
                        422: {"model": RejectedOut}})
def submit(body: SharingIn, consumer: ConsumerDep, sharings: SharingsDep,
           dry_run: Annotated[bool, Query()] = False) -> Any:
    """Admit or reject a sharing; with `dry_run`, only say what that would decide (200)."""
    if dry_run:
        return JSONResponse(status_code=200, content=sharings.explain(
            body.name, body.sql, body.staleness_s, body.penalty_per_tuple,
            mv_machine=body.mv_machine, consumer=consumer, group=body.group).to_json())
    done = sharings.submit(body.name, body.sql, body.staleness_s, body.penalty_per_tuple,
                           consumer, mv_machine=body.mv_machine, group=body.group)
    if not views.admitted(done):
        return JSONResponse(status_code=422, content=views.rejected_out(done).model_dump())
    return views.admitted_out(done, sharings)


@router.get("/sharings", response_model=list[SharingOut])
def list_sharings(consumer: ConsumerDep, sharings: SharingsDep,
                  store: StoreDep) -> list[SharingOut]:
    return [views.sharing_out(r, sharings) for r in store.sharings() if visible(r, consumer)]


@router.get("/sharings/{sharing_id}", response_model=SharingOut)
def get_sharing(sharing_id: SharingId, consumer: ConsumerDep,
                sharings: SharingsDep) -> SharingOut:
    return views.sharing_out(sharings.get(sharing_id, consumer), sharings)


@router.get("/sharings/{sharing_id}/history")
def history(sharing_id: SharingId, consumer: ConsumerDep, sharings: SharingsDep,
            store: StoreDep,
            limit: Annotated[int, Query(ge=1, le=10_000)] = 720) -> dict[str, Any]:
    """The auditor's last `limit` snapshots (720: an hour of 5-s snapshots)."""
    return views.history(sharings.get(sharing_id, consumer), store, limit)


@router.delete("/sharings/{sharing_id}", response_model=SharingOut)
def withdraw(sharing_id: SharingId, consumer: ConsumerDep,
             sharings: SharingsDep) -> SharingOut:
    return views.sharing_out(sharings.withdraw(sharing_id, consumer), sharings)


@router.get("/machines", response_model=list[MachineOut])
def machines(_: ConsumerDep, services: ServicesDep, store: StoreDep,
             edges: Annotated[int, Query(ge=0, le=100_000)] = TOP_EDGES) -> list[MachineOut]:
    """Each machine's health and loads, with its `edges` largest edges."""
    return views.machines_out(services, store, edges)


@router.get("/plan", response_model=None)
def plan(_: AdminDep, services: ServicesDep,
         format: Annotated[str, Query(pattern="^(json|svg)$")] = "json") -> Any:
    """The global plan D: every vertex and edge once, with the sharings it serves (SHR)."""
    current = views.current_plan(services.executor)
    if format == "svg":
        return Response(plan_svg(current), media_type="image/svg+xml")
    return {"version": services.executor.version} | current.to_json()


@router.get("/plan/options", response_model=PlannerOptionsIO)
def planner_options(_: AdminDep, sharings: SharingsDep) -> PlannerOptionsIO:
    """How the admissions and withdrawals to come plan."""
    return PlannerOptionsIO(**sharings.options().to_json())


@router.put("/plan/options", response_model=PlannerOptionsIO)
def set_planner_options(body: PlannerOptionsIO, _: AdminDep,
                        sharings: SharingsDep) -> PlannerOptionsIO:
    """Change them; the running plan stays as it is until the next admission or withdrawal."""
    options = PlannerOptions(body.plumbing, body.merge, body.algorithm, body.share_pushes)
    return PlannerOptionsIO(**sharings.set_options(options).to_json())


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(_: AdminDep, services: ServicesDep, store: StoreDep) -> str:
    """Sharings, the executor and the machines in Prometheus' text format."""
    snap = prometheus.take(services, store)
    return prometheus.render(snap) + alerts.prometheus(
        services.alerter, sorted(r.name for r in snap.sharings if r.status == "admitted"))
