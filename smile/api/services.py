"""What the routes depend on, as `Annotated[..., Depends(...)]` aliases: one `Services` per
process — topology, executor, rate monitor, the lock serializing changes to sharings
(`ServicesDep`) — and per request a catalog store (`StoreDep`) and a sharing service on it
(`SharingsDep`). The predicted loads of D are computed at most every few seconds (they read the
machines' statistics) and shared by the requests in between.

Must not: define routes, or talk to machines except through the executor and the service.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from smile.executor.catalog_live import LastStats
from smile.executor.machine_load import SUSTAINED_S, TOP_EDGES, MachineLoad, machine_loads
from smile.executor.machines import MachineService, Probes
from smile.executor.sharings import SharingService
from smile.executor.store import CatalogStore
from smile.settings import GROWTH_HORIZON_S

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from smile.executor.alerts import Alerter
    from smile.executor.rates import RateMonitor
    from smile.executor.runtime import Executor
    from smile.optimizer.load import Assessment
    from smile.topology import Topology

PREDICTION_TTL_S = 5.0
log = logging.getLogger("smile.api")


@dataclass
class Services:
    topology: Topology
    executor: Executor
    rates: RateMonitor | None = None
    sample_s: float = 0.5
    max_load: float | None = None
    growth_horizon_s: float = GROWTH_HORIZON_S
    lock: threading.Lock = field(default_factory=threading.Lock)
    state_dir: Path | None = None
    """Where the supervisor of attached machines' capturers and agents lives."""
    _prediction: tuple[float, Assessment] | None = None
    alerter: Alerter | None = None
    """The executor's breach alerts (`executor.alerts`); None: not running."""
    probes: Probes = field(default_factory=Probes)
    """Why unreachable machines' databases refuse SMILE (`GET /machines`)."""
    last_stats: LastStats = field(default_factory=LastStats)
    """The machines' statistics as last read: one away keeps its own (`catalog_live`)."""

    _refreshing: threading.Lock = field(default_factory=threading.Lock)

    def prediction(self, store: CatalogStore) -> Assessment:
        """D's assessment under the current rates. Computed on the spot when there is none or
        it is older than three refresh periods; otherwise the last one is answered at once
        while a fresh one is computed in the background (it reads every machine's
        statistics: seconds, not milliseconds)."""
        if self._prediction is None or \
                time.monotonic() - self._prediction[0] > 3 * PREDICTION_TTL_S:  # too old
            self._prediction = (time.monotonic(), sharing_service(self, store).assessment())
        elif time.monotonic() - self._prediction[0] > PREDICTION_TTL_S and \
                self._refreshing.acquire(blocking=False):
            threading.Thread(target=self._refresh, daemon=True, name="prediction").start()
        return self._prediction[1]

    def machine_loads(self, store: CatalogStore,
                      top: int = TOP_EDGES) -> dict[str, MachineLoad]:
        """Each machine's predicted and measured loads, edge by edge, and whether it has been
        over its bound for `SUSTAINED_S` (`machine_load.py`)."""
        from smile.optimizer.global_plan import GlobalPlan

        predicted = self.prediction(store)
        phys = self.executor.plan
        return machine_loads(phys.plan if phys is not None else GlobalPlan(), predicted,
                             self.executor.measured_edges(),
                             self.executor.measured_edges(SUSTAINED_S),
                             tuple(m.name for m in self.topology.machines), top)

    def over_bound(self) -> dict[str, float]:
        """machine → sustained load ÷ bound of the machines over their bound (breach
        prediction reads it)."""
        store = CatalogStore(self.topology.catalog_dsn)
        try:
            return {m: r.sustained / r.bound for m, r in self.machine_loads(store, 0).items()
                    if r.over_bound and r.sustained is not None and r.bound}
        finally:
            store.close()

    def _refresh(self) -> None:
        try:
            store = CatalogStore(self.topology.catalog_dsn)
            try:
                self._prediction = (time.monotonic(), sharing_service(self, store).assessment())
            finally:
                store.close()
        except Exception as exc:  # the last prediction stays; the next call tries again
            log.warning("cannot predict the machines' loads: %s", exc)
        finally:
            self._refreshing.release()


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
    return SharingService(services.topology, store, services.executor, services.rates,
                          services.sample_s, services.lock, services.max_load,
                          services.growth_horizon_s, services.last_stats)


ServicesDep = Annotated[Services, Depends(get_services)]
StoreDep = Annotated[CatalogStore, Depends(get_store)]


def get_sharings(services: ServicesDep, store: StoreDep) -> SharingService:
    return sharing_service(services, store)


SharingsDep = Annotated[SharingService, Depends(get_sharings)]


def get_machines(services: ServicesDep, sharings: SharingsDep) -> MachineService:
    return MachineService(services.topology, sharings, services.executor, services.state_dir)


MachinesDep = Annotated[MachineService, Depends(get_machines)]
