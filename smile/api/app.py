"""The FastAPI application: routes, the dashboard's files, OpenAPI, SMILE's errors mapped to
HTTP statuses with their message (never a traceback), and request bodies bounded (over 64 KB:
413, before anything reads them whole).

Must not: start services; `smile serve` builds the `Services` and hands them in.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from smile.api import dashboard
from smile.api.routes import router
from smile.api.routes_consumer import router as consumer_router
from smile.api.routes_machines import router as machines_router
from smile.errors import (
    AgentError,
    CaptureError,
    ConfigError,
    PlanError,
    SmileError,
)
from smile.executor.sharings import Conflict, NotFound

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    from smile.api.services import Services

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 64 * 1024
DRAIN = 8 * 1024 * 1024
"""A too-large body up to this size is read and dropped before the 413 is sent."""
_STATUS: list[tuple[type[SmileError], int]] = [
    (NotFound, 404), (Conflict, 409), (PlanError, 422), (ConfigError, 400),
    (CaptureError, 400), (AgentError, 502),
]


class BodyLimit:
    """413 for a request body over `limit` bytes: by its Content-Length at once, or, for a
    chunked body, as soon as what arrived passes the limit (the app never sees the rest)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            if length.isdigit() and int(length) <= DRAIN:
                await self._drain(receive)
            await self._too_large(send)
            return
        seen = 0
        started = False

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge
            return message

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded, tracking)
        except _TooLarge:
            if not started:
                await self._drain(receive, seen)
                await self._too_large(send)

    @staticmethod
    async def _drain(receive: Receive, seen: int = 0) -> None:
        """Read and drop the rest of a body of at most DRAIN bytes, so that a client still
        sending it reads the 413 instead of a broken pipe; past DRAIN the connection closes."""
        while seen <= DRAIN:
            message = await receive()
            seen += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body"):
                return

    async def _too_large(self, send: Send) -> None:
        body = json.dumps({"detail": f"request body over {self.limit} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


def create_app(services: Services) -> FastAPI:
    app = FastAPI(title="SMILE", version="0.1",
                  description="Sharing middleware: submit SPJ sharings with staleness SLAs.")
    app.state.services = services
    app.include_router(router)
    app.include_router(consumer_router)
    app.include_router(machines_router)
    dashboard.mount(app)
    app.add_middleware(BodyLimit)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own answer echoes the input, which may not be JSON (Infinity, NaN): a 500
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")),
                   "type": str(e.get("type", ""))} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": errors})

    @app.exception_handler(SmileError)
    async def smile_error(_: Request, exc: SmileError) -> JSONResponse:
        status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 503)
        body: dict[str, str] = {"detail": str(exc)}
        if exc.sqlstate:
            body["sqlstate"] = exc.sqlstate
        return JSONResponse(status_code=status, content=body)

    return app
