"""The REST routes that attach and detach machines (admins only): `POST /machines` answers
201 with the machine, 422 listing every unmet prerequisite of the database with its fix, 409
for a name or database taken; `DELETE /machines/{name}` answers 204, 409 naming the sharings
on the machine (`?withdraw=true` withdraws them first), 404 for an unknown one, and 200 for
one that could not be reached, saying why and what of SMILE's stays on it. `GET
/machines` is in `routes.py`.

Must not: check, prepare or clear a database itself (`executor/machines.py` does).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse, Response

from smile.api.auth import AdminDep  # noqa: TC001 (FastAPI reads them)
from smile.api.models import LEFT_ON_A_LOST_MACHINE, LostOut, MachineIn, ProblemOut, UnmetOut
from smile.api.services import MachinesDep  # noqa: TC001 (FastAPI reads them)
from smile.executor.machines import Unmet

router = APIRouter()
MachineName = Annotated[str, Path(pattern=r"^[a-z][a-z0-9_]{0,30}$")]


@router.post("/machines", status_code=201, responses={422: {"model": UnmetOut}})
def attach(body: MachineIn, _: AdminDep, machines: MachinesDep) -> Any:
    """Attach an app's database: checked, prepared, supervised; nothing of it is published."""
    try:
        m = machines.attach(body.name, body.dsn, body.cores, body.price_per_hour)
    except Unmet as exc:
        problems = [ProblemOut(**p.to_json()) for p in exc.problems]
        return JSONResponse(status_code=422,
                            content=UnmetOut(detail=str(exc), problems=problems).model_dump())
    return {"name": m.name, "origin": m.origin, "cores": m.cores,
            "price_per_hour": m.price_per_hour}


@router.delete("/machines/{name}", status_code=204, response_model=None,
               responses={200: {"model": LostOut}})
def detach(name: MachineName, _: AdminDep, machines: MachinesDep,
           withdraw: Annotated[bool, Query()] = False) -> Any:
    """Detach a machine: its daemons stop and SMILE's objects on it go; the app's stay. One
    that cannot be reached is forgotten all the same: 200, saying why and what stays on it."""
    done = machines.detach(name, withdraw)
    if done.unreachable is not None:
        return JSONResponse(status_code=200, content=LostOut(
            name=done.name, withdrawn=list(done.withdrawn), unreachable=done.unreachable,
            left=LEFT_ON_A_LOST_MACHINE).model_dump())
    return Response(status_code=204)
