"""The FastAPI application: routes, OpenAPI, and SMILE's errors mapped to HTTP statuses with
their message (never a traceback).

Must not: start services; `smile serve` builds the `Services` and hands them in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from smile.api.routes import router
from smile.errors import (
    AgentError,
    CaptureError,
    ConfigError,
    PlanError,
    SmileError,
)
from smile.executor.sharings import Conflict, NotFound

if TYPE_CHECKING:
    from smile.api.services import Services

_STATUS: list[tuple[type[SmileError], int]] = [
    (NotFound, 404), (Conflict, 409), (PlanError, 400), (ConfigError, 400),
    (CaptureError, 400), (AgentError, 502),
]


def create_app(services: Services) -> FastAPI:
    app = FastAPI(title="SMILE", version="0.1",
                  description="Sharing middleware: submit SPJ sharings with staleness SLAs.")
    app.state.services = services
    app.include_router(router)

    @app.exception_handler(SmileError)
    async def smile_error(_: Request, exc: SmileError) -> JSONResponse:
        status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 503)
        body: dict[str, str] = {"detail": str(exc)}
        if exc.sqlstate:
            body["sqlstate"] = exc.sqlstate
        return JSONResponse(status_code=status, content=body)

    return app
