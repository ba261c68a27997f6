"""What the routes depend on (`Depends`): one `Services` per process — topology, executor,
the lock serializing changes to sharings — and per-request catalog stores and sharing services.

Must not: define routes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request  # noqa: TC002 (FastAPI reads the annotation at runtime)

from smile.executor.sharings import SharingService
from smile.executor.store import CatalogStore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from smile.agent.spark_jobs import SparkJoins
    from smile.executor.scheduler import Executor
    from smile.topology import Topology


@dataclass
class Services:
    topology: Topology
    executor: Executor
    spark: SparkJoins | None = None
    sample_s: float = 0.5
    lock: threading.Lock = field(default_factory=threading.Lock)


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def get_store(request: Request) -> Iterator[CatalogStore]:
    store = CatalogStore(get_services(request).topology.catalog_dsn)
    try:
        yield store
    finally:
        store.close()


def sharing_service(services: Services, store: CatalogStore) -> SharingService:
    return SharingService(services.topology, store, services.executor, services.spark,
                          services.sample_s, services.lock)
