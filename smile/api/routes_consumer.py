"""The routes a consumer relies on beyond its sharings themselves: the webhook its breach
alerts are sent to (`PUT/GET/DELETE /sharings/{id}/webhook`), the alerts raised now and the
recent changes (`GET /alerts`), and a sharing's SLA report (`GET /sharings/{id}/report`). Each
needs a consumer's token; a consumer sees only its own sharings' (others' are 404).

Must not: predict, deliver or compute (`executor.alerts`, `executor.webhooks`,
`executor.sla_report` do); errors are mapped to HTTP in `app.py`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from smile.api.auth import ConsumerDep  # noqa: TC001 (FastAPI reads them)
from smile.api.services import ServicesDep, SharingsDep, StoreDep  # noqa: TC001
from smile.errors import ConfigError
from smile.executor import sla_report, webhooks
from smile.executor.sharings import NotFound, visible

router = APIRouter()
SharingId = Annotated[int, Path(ge=1, le=2**31 - 1)]


class WebhookIn(BaseModel):
    url: str = Field(min_length=8, max_length=2000, pattern=r"^https?://[\x21-\x7e]+$",
                     examples=["https://app1.example.com/smile-alerts"])
    secret: str = Field(min_length=16, max_length=256, pattern=r"^[\x21-\x7e]+$",
                        description="the key the calls are signed with (HMAC-SHA256): "
                                    "printable ASCII, no spaces; never shown again")


class WebhookOut(BaseModel):
    sharing_id: int
    url: str


@router.put("/sharings/{sharing_id}/webhook", response_model=WebhookOut)
def set_webhook(sharing_id: SharingId, body: WebhookIn, consumer: ConsumerDep,
                sharings: SharingsDep, store: StoreDep) -> WebhookOut:
    """Where the sharing's breach alerts are POSTed, signed with `secret` (docs/api.md)."""
    row = sharings.get(sharing_id, consumer)
    webhooks.set_hook(store, row.id, body.url, body.secret)
    return WebhookOut(sharing_id=row.id, url=body.url)


@router.get("/sharings/{sharing_id}/webhook", response_model=WebhookOut)
def get_webhook(sharing_id: SharingId, consumer: ConsumerDep, sharings: SharingsDep,
                store: StoreDep) -> WebhookOut:
    row = sharings.get(sharing_id, consumer)
    hook = webhooks.hook(store, row.id)
    if hook is None:
        raise NotFound(f"sharing {sharing_id} has no webhook")
    return WebhookOut(sharing_id=row.id, url=hook.url)


@router.delete("/sharings/{sharing_id}/webhook", status_code=204)
def delete_webhook(sharing_id: SharingId, consumer: ConsumerDep, sharings: SharingsDep,
                   store: StoreDep) -> Response:
    row = sharings.get(sharing_id, consumer)
    if not webhooks.delete_hook(store, row.id):
        raise NotFound(f"sharing {sharing_id} has no webhook")
    return Response(status_code=204)


@router.get("/alerts")
def alerts(consumer: ConsumerDep, services: ServicesDep, store: StoreDep) -> dict[str, Any]:
    """Breach alerts raised now (`active`) and the last changes (`recent`, oldest first), of
    the sharings the caller may see."""
    if services.alerter is None:
        return {"active": [], "recent": []}
    active, recent, _ = services.alerter.snapshot()
    mine = {r.name for r in store.sharings() if visible(r, consumer)}
    return {"active": [a.to_json() for n, a in sorted(active.items()) if n in mine],
            "recent": [a.to_json() for a in recent if a.sharing in mine]}


@router.get("/sharings/{sharing_id}/report")
def report(sharing_id: SharingId, consumer: ConsumerDep, sharings: SharingsDep,
           store: StoreDep,
           start: Annotated[datetime | None, Query(alias="from")] = None,
           end: Annotated[datetime | None, Query(alias="to")] = None) -> dict[str, Any]:
    """How its SLA was kept over [from, to) (default: since it was admitted, until now), in
    all and by hour, from the auditor's snapshots."""
    row = sharings.get(sharing_id, consumer)
    start = _aware(start) if start is not None else row.created_at
    end = _aware(end) if end is not None else datetime.now(UTC)
    if end <= start:
        raise ConfigError(f"'to' ({end.isoformat()}) must be after 'from' "
                          f"({start.isoformat()})")
    return sla_report.report(store, row, start, end)


def _aware(t: datetime) -> datetime:
    """A time given without a zone is UTC."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
