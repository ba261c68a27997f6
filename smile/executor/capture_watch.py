"""Sharings over a table whose capture stopped, or over a column its table no longer has, are
`failed`, with the reason, never stale in silence: every `every_s` this worker reads each
machine's capture errors (`deploy.machine_state.capture_errors`: the table dropped, an UPDATE
without its old row) and the published columns tables lost (`capture_gone`: dropped, renamed
or retyped, captured as NULL since), and marks each admitted sharing of the running plan that
reads such a table — or, for lost columns, one of them — `failed` with what changed and what
to do; the executor stops pushing it. A sharing whose lost columns the table has again under
their names (retyped) still has its query answered: the table is captured again and the
sharings reading it planned again (`replan`, `SharingService.replan`). The other sharings go
on: a column lost that no sharing reads changes nothing for them.

Must not: open a machine itself (`deploy.machine_state.Sessions`), or change the plan other
than through `replan` (a failed sharing's consumer withdraws it).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from smile.deploy.machine_state import Sessions, capture_errors, capture_gone, table_columns
from smile.executor.store import CatalogStore
from smile.executor.worker import Worker

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.executor.runtime import Executor
    from smile.optimizer.expr import Part
    from smile.optimizer.global_plan import GlobalPlan
    from smile.topology import Topology

log = logging.getLogger("smile.capture_watch")


def columns_read(plan: GlobalPlan, relation: str) -> dict[str, frozenset[str] | None]:
    """Per sharing of `plan` that reads `relation`, the columns of it that it reads: those
    its vertices keep or select on (None: every column, a sharing that keeps it whole).

    >>> from smile.optimizer.expr import Part
    >>> sorted(_selected(Part("i", "items", ("uid",), ("i.qty > 0", 'i."Label" = 1'))))
    ['Label', 'qty']
    """
    kept: dict[str, set[str]] = {}
    whole: set[str] = set()
    for v, names in plan.shr.items():
        for p in v.expr.parts:
            if p.relation != relation:
                continue
            for name in names:
                if p.raw:
                    whole.add(name)
                else:
                    kept.setdefault(name, set()).update(p.columns, _selected(p))
    return {n: frozenset(kept[n]) if n in kept else None for n in kept.keys() | whole}


def _selected(p: Part) -> set[str]:
    """The columns of part `p` its selections read."""
    ref = re.compile(rf'(?<![\w"]){re.escape(p.alias)}\.(?:"((?:[^"]|"")+)"|(\w+))')
    return {(q.replace('""', '"') if q else c) for s in p.selections
            for q, c in ref.findall(s)}


def gone_reason(machine: str, qualified: str, columns: list[str], sharing_id: int) -> str:
    """What a sharing that read a column its table lost reads in `GET /sharings/{id}`."""
    return (f"the columns {columns} of {qualified} (on {machine}) were dropped, renamed or "
            f"retyped, and this sharing reads them: withdraw it (DELETE /sharings/"
            f"{sharing_id}) and submit it again over the table's columns now (an admin "
            "publishes it again to capture columns renamed, retyped or added)")


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

    def __init__(self, topology: Topology, executor: Executor, every_s: float = 2.0,
                 replan: Callable[[str, str, str], object] | None = None) -> None:
        super().__init__()
        self.topology = topology
        self.executor = executor
        self.every_s = every_s
        self.replan = replan
        """(machine, schema.table, why) → its table captured again and the sharings reading
        it planned again (`SharingService.replan`); None: they fail instead."""

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
        stopped, lost = self._read(sessions)
        failed = []
        for relation, (machine, qualified, error) in sorted(stopped.items()):
            names = phys.plan.readers(relation)
            for row in store.sharings("admitted"):
                if row.name in names:
                    self._fail(store, row.id, row.name,
                               reason_of(machine, qualified, error, row.id))
                    failed.append(row.name)
        for relation, (machine, qualified, columns) in sorted(lost.items()):
            reads = columns_read(phys.plan, relation)
            now = self._columns_now(sessions, machine, qualified)
            again = []
            for row in store.sharings("admitted"):
                if row.name not in reads or row.name in failed:
                    continue
                cols = reads[row.name]
                hit = sorted(set(columns) if cols is None else cols & set(columns))
                if hit and self.replan is not None and now is not None and set(hit) <= now:
                    again.append(row.name)  # retyped: the table still answers its query
                elif hit:
                    self._fail(store, row.id, row.name,
                               gone_reason(machine, qualified, hit, row.id))
                    failed.append(row.name)
            if again and self.replan is not None:
                why = (f"the columns {sorted(set(columns) & (now or set()))} of {qualified} "
                       f"(on {machine}) changed type")
                log.warning("%s: planning %s again", why, again)
                try:
                    self.replan(machine, qualified, why)
                except Exception as exc:  # each sharing is failed with why (`replan`)
                    log.error("planning %s again failed: %s", again, exc)
        return failed

    def _columns_now(self, sessions: Sessions, machine: str, qualified: str
                     ) -> set[str] | None:
        """The columns `qualified` has now on `machine`; None if it cannot be read."""
        try:
            return set(table_columns(sessions.get(machine), qualified))
        except Exception as exc:
            log.debug("cannot read the columns of %s on %s: %s", qualified, machine, exc)
            sessions.drop(machine)
            return None

    def _read(self, sessions: Sessions) -> tuple[dict[str, tuple[str, str, str]],
                                                 dict[str, tuple[str, str, list[str]]]]:
        """Per relation (bare name) whose capture stopped: (machine, schema.table, why); per
        relation that lost published columns: (machine, schema.table, those columns)."""
        stopped: dict[str, tuple[str, str, str]] = {}
        lost: dict[str, tuple[str, str, list[str]]] = {}
        for m in self.topology.machines:
            try:
                conn = sessions.get(m.name)
                errors, gone = capture_errors(conn), capture_gone(conn)
            except Exception as exc:  # unreachable: the executor's heartbeats say so
                log.debug("cannot read the capture of %s: %s", m.name, exc)
                sessions.drop(m.name)
                continue
            for qualified, error in errors.items():
                stopped[qualified.split(".", 1)[1]] = (m.name, qualified, error)
            for qualified, columns in gone.items():
                lost[qualified.split(".", 1)[1]] = (m.name, qualified, columns)
        return stopped, lost

    def _fail(self, store: CatalogStore, sharing_id: int, name: str, reason: str) -> None:
        store.set_status(sharing_id, "failed", reason)
        self.executor.untrack(name)
        log.error("sharing %s failed: %s", name, reason)
