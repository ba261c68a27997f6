"""The snapshot auditor (paper §9.1.1): every `period_s` (5 s), independently of the scheduler,
it reads each admitted sharing's source watermarks, MV timestamp and the sources' clock straight
from the machines and records in `smile_catalog.audit`: staleness as a consumer sees it (the
sources' clock against TS(MV): capture lag and a stopped capturer count), the capture lag
(clock against the newest watermark), whether the SLA holds, violations so far, cost
so far (resources at the plan's rate since admission, and penalties for late tuples), and the
tuples moved and operator seconds from the push log.

A tuple is late once it is older than the SLA and still not in the MV: at each snapshot the
source delta rows with `__ts ∈ (max(TS(MV), counted up to), MAXTS(SRC) − SLA]` are counted (each
once) and charged the sharing's penalty.

Must not: push, or trust the executor's memory; it is the ground truth for dashboards.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from smile.deploy import machine_state
from smile.deploy.plan_store import active_version, load_version
from smile.executor import sla_report
from smile.executor.store import CatalogStore
from smile.executor.worker import Worker

if TYPE_CHECKING:
    from smile.deploy.physical import PhysicalPlan
    from smile.executor.store import SharingRow
    from smile.topology import Topology

log = logging.getLogger("smile.auditor")


@dataclass(frozen=True)
class Staleness:
    mv_ts: datetime
    min_src: datetime
    """The oldest of the sources' capture watermarks (every change committed up to a source's
    watermark is captured)."""
    max_src: datetime
    """The newest of them."""
    source_now: datetime | None = None
    """The sources' own clock when read (the auditor's measure); None in the executor's."""

    @property
    def seconds(self) -> float:
        """What a consumer sees: the newest the sources are (their clock, when read) against
        TS(MV), so capture lag and a stopped capturer count; against the watermarks when the
        clock was not read."""
        newest = self.source_now if self.source_now is not None else self.max_src
        return max(0.0, (newest - self.mv_ts).total_seconds())

    @property
    def capture_lag_s(self) -> float | None:
        """How far the newest watermark is behind the sources' clock."""
        if self.source_now is None:
            return None
        return max(0.0, (self.source_now - self.max_src).total_seconds())


def measure(sessions: machine_state.Sessions, phys: PhysicalPlan, sharing: str) -> Staleness:
    """A sharing's TS(MV), its sources' watermarks and their machines' clock (the newest, if
    the machines' clocks disagree), read now from the machines."""
    entry = phys.plan.sharing(sharing)
    mv, srcs, clocks = machine_state.staleness_marks(
        sessions, (entry.mv.machine, phys.vertices[entry.mv].ts_key),
        [(s.machine, phys.vertices[s].ts_key) for s in entry.sources])
    return Staleness(mv, min(srcs), max(srcs), max(clocks))


HISTORY = timedelta(hours=24)
"""Push log and audit are kept row by row this long, then rolled up by the hour
(`CatalogStore.compact`)."""
COMPACT_EVERY_S = 600.0


class Auditor(Worker):
    name = "auditor"

    def __init__(self, topology: Topology, period_s: float = 5.0) -> None:
        super().__init__()
        self.topology = topology
        self.period_s = period_s
        self.plan: tuple[int, PhysicalPlan] | None = None
        self.counted_to: dict[str, datetime] = {}
        self.rounds = 0
        """Snapshots taken (an outage skips some)."""

    def run(self) -> None:
        store = CatalogStore(self.topology.catalog_dsn)
        compact_at = time.monotonic() + COMPACT_EVERY_S
        try:
            # a machine that restarted is found again by the sessions: `snapshot` keeps one
            # sharing's failure from stopping the others
            with machine_state.Sessions(self.topology, "smile-auditor") as sessions:
                while not self.stop.wait(self.period_s):
                    try:
                        self.snapshot(store, sessions)
                    except Exception as exc:  # the catalog or a machine is away: this
                        # snapshot is skipped, the next round heals and finds them again
                        log.warning("audit snapshot skipped: %s", exc)
                        continue
                    self.rounds += 1
                    if time.monotonic() >= compact_at:
                        compact_at = time.monotonic() + COMPACT_EVERY_S
                        self._compact(store)
        finally:
            store.close()

    def _compact(self, store: CatalogStore) -> None:
        try:
            # whole hours only: an hour's staleness readings are kept before it is thinned
            before = (datetime.now(UTC) - HISTORY).replace(minute=0, second=0, microsecond=0)
            sla_report.keep_hours(store, before)  # what the SLA report needs of what goes
            pushed, audited = store.compact(before)
        except Exception as exc:  # the history waits for the next round
            log.warning("cannot compact the history: %s", exc)
            return
        if pushed or audited:
            log.info("history compacted: %d push-log and %d audit rows", pushed, audited)

    def snapshot(self, store: CatalogStore, sessions: machine_state.Sessions) -> None:
        version = active_version(self.topology.catalog_dsn)
        if version is None:
            return
        if self.plan is None or self.plan[0] != version:
            self.plan = (version, load_version(self.topology.catalog_dsn, version))
        phys = self.plan[1]
        for row in store.sharings("admitted"):
            if row.name not in phys.plan.names():
                continue  # admitted a moment ago: its version is not active yet
            try:
                self._audit(store, sessions, phys, row)
            except Exception as exc:  # one sharing's trouble must not stop the others' audit
                log.warning("cannot audit %s: %s", row.name, exc)

    def _audit(self, store: CatalogStore, sessions: machine_state.Sessions,
               phys: PhysicalPlan, row: SharingRow) -> None:
        now = datetime.now(UTC)
        st = measure(sessions, phys, row.name)
        ok = st.seconds <= row.staleness_s
        last = store.last_audit(row.name, row.created_at)
        late_until = st.max_src - timedelta(seconds=row.staleness_s)
        since = max(st.mv_ts, self.counted_to.get(row.name, st.mv_ts))
        late = self._late_tuples(sessions, phys, row.name, since, late_until) \
            if late_until > since else 0
        self.counted_to[row.name] = max(since, late_until)
        late_total = (int(last["late_tuples"]) if last else 0) + late
        work_s, moved = store.work(row.name, row.created_at)
        store.add_audit(
            at=now, sharing=row.name, staleness_s=st.seconds, sla_s=row.staleness_s, sla_ok=ok,
            violations=(int(last["violations"]) if last else 0) + (not ok),
            resource_cost=(row.resource_cost_per_s or 0.0) * (now - row.created_at)
            .total_seconds(),
            penalty_cost=late_total * row.penalty_per_tuple, late_tuples=late_total,
            tuples_moved=moved, work_s=work_s, mv_ts=st.mv_ts,
            capture_lag_s=st.capture_lag_s)

    @staticmethod
    def _late_tuples(sessions: machine_state.Sessions, phys: PhysicalPlan, sharing: str,
                     lo: datetime, hi: datetime) -> int:
        return sum(machine_state.rows_between(sessions, s.machine, phys.vertices[s].table,
                                              lo, hi)
                   for s in phys.plan.sharing(sharing).sources)
