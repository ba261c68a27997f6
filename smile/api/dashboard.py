"""The dashboard: its page at `/dashboard` and its CSS and JavaScript under `/static/`, files
shipped in the package (`smile/api/static/`, package data) and read from wherever it is
installed. They hold no data and are served without a token; the page asks for one.

Must not: serve anything but those files, or build the page in Python.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

router = APIRouter()


@router.get("/dashboard", response_class=HTMLResponse)
def show_dashboard() -> str:
    return (files("smile.api") / "static" / "dashboard.html").read_text(encoding="utf-8")


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", StaticFiles(packages=[("smile.api", "static")]), name="static")
