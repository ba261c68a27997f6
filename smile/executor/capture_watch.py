"""Sharings over a table whose capture stopped are `failed`, with the reason, never stale in
silence: every `every_s` this worker reads each machine's capture errors (`deploy.
machine_state.capture_errors`: a column a published table had dropped, renamed or retyped,
the table dropped — capture follows only columns added after the published ones), and marks
each admitted sharing of the running plan that reads such a table `failed` with what changed
and what to do; the executor stops pushing it. The other sharings go on.

Must not: open a machine itself (`deploy.machine_state.Sessions`), or change the plan (the
sharing's consumer withdraws it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from smile.deploy.machine_state import Sessions, capture_errors
from smile.executor.store import CatalogStore
from smile.executor.worker import Worker

if TYPE_CHECKING:
    from smile.executor.runtime import Executor
    from smile.optimizer.global_plan import GlobalPlan
    from smile.topology import Topology

log = logging.getLogger("smile.capture_watch")


def readers(plan: GlobalPlan, relation: str) -> set[str]:
    """The sharings of `plan` that read the published `relation` (a bare table name: names
    of published tables are unique across machines)."""
    return {name for v, names in plan.shr.items() for p in v.expr.parts
            if p.relation == relation for name in names}


def reason_of(machine: str, qualified: str, error: str, sharing_id: int) -> str:
    """What a failed sharing's consumer reads in `GET /sharings/{id}`.

    >>> reason_of("m1", "public.t", "capture of public.t stopped: its columns changed "
    ...           "(removed ['v']); publish it again to restart", 3)[:60]
    "capture of public.t stopped: its columns changed (removed ['"
    """
    return (f"{error} (on {machine}); this sharing reads {qualified}: withdraw it "
            f"(DELETE /sharings/{sharing_id}), have an admin publish {qualified} again "
            "(POST /relations) and submit the sharing again")


class CaptureWatch(Worker):
    name = "capture-watch"

    def __init__(self, topology: Topology, executor: Executor, every_s: float = 2.0) -> None:
        super().__init__()
        self.topology = topology
        self.executor = executor
        self.every_s = every_s

    def run(self) -> None:
        store: CatalogStore | None = None
        with Sessions(self.topology, "smile-capture-watch") as sessions:
            while not self.stop.wait(self.every_s):
                try:
                    store = store or CatalogStore(self.topology.catalog_dsn)
                    self.check(sessions, store)
                except Exception as exc:  # the catalog away: the next round tries again
                    log.warning("cannot check capture: %s", exc)
                    if store is not None:
                        store.close()
                    store = None
        if store is not None:
            store.close()

    def check(self, sessions: Sessions, store: CatalogStore) -> list[str]:
        """One round; returns the sharings it marked failed."""
        phys = self.executor.plan
        if phys is None:
            return []
        stopped: dict[str, tuple[str, str, str]] = {}
        for m in self.topology.machines:
            try:
                errors = capture_errors(sessions.get(m.name))
            except Exception as exc:  # unreachable: the executor's heartbeats say so
                log.debug("cannot read the capture of %s: %s", m.name, exc)
                sessions.drop(m.name)
                continue
            for qualified, error in errors.items():
                stopped[qualified.split(".", 1)[1]] = (m.name, qualified, error)
        failed = []
        for relation, (machine, qualified, error) in sorted(stopped.items()):
            names = readers(phys.plan, relation)
            for row in store.sharings("admitted"):
                if row.name in names:
                    store.set_status(row.id, "failed", reason_of(machine, qualified, error,
                                                                 row.id))
                    with self.executor.lock:
                        self.executor.tracked.pop(row.name, None)
                    log.error("sharing %s failed: capture of %s on %s stopped", row.name,
                              qualified, machine)
                    failed.append(row.name)
        return failed
