"""Submitting, inspecting and withdrawing sharings, and publishing base relations: the domain
behind the REST API.

Submit = parse and plan against a live catalog snapshot of the *published* relations, with the
capacity that admitted sharings already take and the executor's current time model; a rejected
sharing is recorded with its reason; an admitted one is installed (its MV exists and holds the
query's result at one exact timestamp before `submit` returns), its plan stored in the catalog,
and handed to the executor. Withdraw = stop pushing it, drop its vertices, keep its record.

Must not: speak HTTP (the API maps these results and errors), or push (the executor does).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from smile.agent.install import MV_SCHEMA, install_plan, uninstall_plan
from smile.agent.physical import physical_plan
from smile.agent.plan_store import delete_plan, load_plan, store_plan
from smile.catalog_live import snapshot_live
from smile.db import connect_all
from smile.delta_capture.publish import publish_relation
from smile.errors import ConfigError, SmileError
from smile.optimizer.admission import Decision, plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, Usage
from smile.optimizer.sharing import Sharing

if TYPE_CHECKING:
    from smile.agent.spark_jobs import SparkJoins
    from smile.executor.scheduler import Executor
    from smile.executor.store import CatalogStore, SharingRow
    from smile.topology import Topology

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_TABLE = re.compile(r"^(?:(public)\.)?([A-Za-z_][A-Za-z0-9_$]{0,62})$")


class NotFound(SmileError):
    """No such sharing or machine."""


class Conflict(SmileError):
    """The name is taken by a live sharing."""


@dataclass(frozen=True)
class Submitted:
    row: SharingRow
    decision: Decision


class SharingService:
    """One per process; serializes changes to the set of sharings."""

    def __init__(self, topology: Topology, store: CatalogStore, executor: Executor,
                 spark: SparkJoins | None = None, sample_s: float = 0.5,
                 lock: threading.Lock | None = None) -> None:
        self.topology = topology
        self.store = store
        self.executor = executor
        self.spark = spark
        self.sample_s = sample_s
        self.lock = lock or threading.Lock()
        """Held while the set of sharings changes; share one among services of a process."""

    # -- relations -------------------------------------------------------------------------
    def publish(self, machine: str, table: str) -> tuple[str, str]:
        m = _TABLE.match(table.strip())
        if m is None:
            raise ConfigError(f"{table!r} is not a table name of schema public "
                              "(e.g. public.users)")
        endpoint = next((x for x in self.topology.machines if x.name == machine), None)
        if endpoint is None:
            raise NotFound(f"no machine {machine!r}; the machines are "
                           f"{[x.name for x in self.topology.machines]}")
        qualified = f"public.{m.group(2)}"
        with self.lock:
            publish_relation(endpoint.dsn, qualified)
            self.store.add_relation(machine, qualified)
        return machine, qualified

    # -- sharings --------------------------------------------------------------------------
    def catalog(self, admitted: list[SharingRow]) -> CatalogSnapshot:
        """Live statistics of the published relations, less what `admitted` sharings take."""
        published = {(m, t.split(".", 1)[1]) for m, t in self.store.relations()}
        live = snapshot_live(self.topology, self.sample_s)
        snap = replace(live, relations=tuple(r for r in live.relations
                                            if (r.machine, r.name) in published),
                       time_model=self.executor.model.to_json())
        used: dict[str, Usage] = {}
        for row in admitted:
            for machine, u in row.decision.get("usage", {}).items():
                used[machine] = used.get(machine, Usage()) + Usage(*u)
        return snap.with_usage(used)

    def submit(self, name: str, sql: str, staleness_s: float, penalty: float) -> Submitted:
        if not _NAME.match(name):
            raise ConfigError(f"sharing name {name!r}: letters, digits and _ only, not starting "
                              "with a digit, at most 63 characters")
        if not staleness_s > 0:
            raise ConfigError("staleness_s must be a positive number of seconds")
        if penalty < 0:
            raise ConfigError("penalty_per_tuple must not be negative")
        with self.lock:
            admitted = self.store.sharings("admitted")
            if any(r.name == name for r in admitted):
                raise Conflict(f"a sharing named {name!r} is already admitted")
            catalog = self.catalog(admitted)
            decision = plan_sharing(catalog, Sharing(name, sql, staleness_s, penalty))
            doc = decision.to_json() | {"usage": {m: list(u) for m, u in decision.chosen_usage}}
            if not decision.admitted or decision.chosen is None or decision.plan is None:
                sid = self.store.add_sharing(name, sql, staleness_s, penalty, "rejected",
                                             decision.reason, doc)
                return Submitted(self.get(sid), decision)
            chosen = decision.chosen
            cols = {r.name: tuple(c.name for c in r.columns) for r in catalog.relations}
            types = {(ref.alias, c.name): c.type for ref in decision.query.relations
                     for c in catalog.relation(ref.relation).columns}
            phys = physical_plan(decision.plan, decision.query, cols, types)
            with connect_all(self.topology.machines) as conns:
                try:
                    install_plan(conns, phys, self.spark)
                except Exception:
                    uninstall_plan(conns, phys)
                    raise
            store_plan(self.topology.catalog_dsn, phys)
            sid = self.store.add_sharing(
                name, sql, staleness_s, penalty, "admitted", decision.reason, doc, chosen.cp_s,
                chosen.cost_per_s, chosen.resource_cost_per_s, chosen.mv_machine)
            self.executor.track(name, phys, staleness_s)
            return Submitted(self.get(sid), decision)

    def withdraw(self, sharing_id: int) -> SharingRow:
        with self.lock:
            row = self.get(sharing_id)
            if row.status != "admitted":
                return row
            phys = self.executor.untrack(row.name) or load_plan(self.topology.catalog_dsn,
                                                                row.name)
            with connect_all(self.topology.machines) as conns:
                uninstall_plan(conns, phys)
            delete_plan(self.topology.catalog_dsn, row.name)
            self.store.set_status(sharing_id, "withdrawn")
            return self.get(sharing_id)

    def get(self, sharing_id: int) -> SharingRow:
        row = self.store.sharing(sharing_id)
        if row is None:
            raise NotFound(f"no sharing with id {sharing_id}")
        return row

    def mv_location(self, row: SharingRow) -> dict[str, Any]:
        machine = row.mv_machine or ""
        dsn = next((m.dsn for m in self.topology.machines if m.name == machine), "")
        return {"machine": machine, "dsn": dsn, "table": f'{MV_SCHEMA}."{row.name}"'}
