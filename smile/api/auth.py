"""Who is calling: the bearer token of every request (`Authorization: Bearer <token>`) resolved
to a consumer, as `Depends`. A missing or unknown token is 401; an admin-only route called by a
consumer is 403.

Must not: decide what a consumer may see beyond admin or not (the sharing service does).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from smile.api.services import StoreDep  # noqa: TC001 (FastAPI reads it at runtime)
from smile.executor.consumers import Consumer, authenticate

bearer = HTTPBearer(auto_error=False, description="a consumer's token (`smile consumer create`)")


def current_consumer(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    store: StoreDep,
) -> Consumer:
    challenge = {"WWW-Authenticate": "Bearer"}
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(401, "an Authorization: Bearer <token> header is required",
                            headers=challenge)
    consumer = authenticate(store, credentials.credentials.strip())
    if consumer is None:
        raise HTTPException(401, "unknown token", headers=challenge)
    return consumer


def admin_only(consumer: Annotated[Consumer, Depends(current_consumer)]) -> Consumer:
    if not consumer.admin:
        raise HTTPException(403, f"{consumer.name} is not an admin: only admins may do this")
    return consumer


ConsumerDep = Annotated[Consumer, Depends(current_consumer)]
AdminDep = Annotated[Consumer, Depends(admin_only)]
