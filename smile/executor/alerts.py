"""Breach alerts: every `period_s` (0.5 s) the sharings this executor pushes are read off the
executor — staleness and backlog from its mirror of the vertex timestamps, critical path and
learnt delay from its scheduler, the push under way, the machines' heartbeats, the machines
over their bound — and handed to `breach.predict`. A predicted breach within the SLA from now
raises the sharing's alert; `breach.CLEAR_S` without one clears it. Each change is sent:

- `NOTIFY smile_sla` on the MV's machine (`deploy.sla_notify`), which the consumer hears with
  its own DSN;
- the consumer's webhook, if it registered one (`PUT /sharings/{id}/webhook`), signed and
  retried (`webhooks.py`);
- and kept here for the API: `GET /alerts`, the dashboard, `smile_sla_breach_predicted` in
  `/metrics` (`prometheus`).

The payload: `{"sharing", "id", "consumer", "state": "raised"|"cleared", "at",
"breach_at", "breach_in_s", "staleness_s", "sla_s", "reason"}` (times ISO 8601, UTC).

Must not: push, decide pushes, or open a machine itself (NOTIFY goes through `smile/deploy`);
deliveries run on their own threads so that a slow webhook delays nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from smile.deploy import sla_notify
from smile.executor import webhooks
from smile.executor.breach import SILENT_NEAR_S, Alarm, Prediction, Signals, predict
from smile.executor.store import CatalogStore
from smile.executor.worker import Worker

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.executor.runtime import Executor
    from smile.executor.store import SharingRow
    from smile.topology import Topology

log = logging.getLogger("smile.alerts")
ROWS_EVERY_S = 2.0
BOUNDS_EVERY_S = 5.0
RECENT = 100
"""Alert changes kept for the dashboard."""


@dataclass(frozen=True)
class Alert:
    sharing: str
    id: int
    consumer: str | None
    state: str
    at: datetime
    breach_at: datetime | None
    breach_in_s: float | None
    staleness_s: float
    sla_s: float
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"sharing": self.sharing, "id": self.id, "consumer": self.consumer,
                "state": self.state, "at": self.at.isoformat(),
                "breach_at": self.breach_at.isoformat() if self.breach_at else None,
                "breach_in_s": None if self.breach_in_s is None else round(self.breach_in_s, 3),
                "staleness_s": round(self.staleness_s, 3), "sla_s": self.sla_s,
                "reason": self.reason}


class Alerter(Worker):
    name = "alerts"

    def __init__(self, topology: Topology, executor: Executor, period_s: float = 0.5,
                 over_bound: Callable[[], dict[str, float]] | None = None) -> None:
        super().__init__()
        self.topology = topology
        self.ex = executor
        self.period_s = period_s
        self.over_bound = over_bound
        """machine → sustained load ÷ bound of the machines over their bound (`serve`
        hands in the API's reading of them)."""
        self.lock = threading.Lock()
        self.alarms: dict[str, Alarm] = {}
        self.active: dict[str, Alert] = {}
        """The raised alerts, by sharing (under `lock`)."""
        self.recent: list[Alert] = []
        """The last `RECENT` changes, oldest first (under `lock`)."""
        self.raised_total = 0
        self._rows: dict[str, SharingRow] = {}
        self._rows_at = 0.0
        self._bounds: dict[str, float] = {}
        self._bounds_at = 0.0
        self._pushing_since: dict[str, float] = {}

    def run(self) -> None:
        store: CatalogStore | None = None
        while not self.stop.wait(self.period_s):
            try:
                store = store or CatalogStore(self.topology.catalog_dsn)
                self.evaluate(store)
            except Exception as exc:  # the catalog is away: the next round tries again
                log.warning("breach prediction skipped: %s", exc)
                if store is not None:
                    store.close()
                store = None
        if store is not None:
            store.close()

    # -- one round -------------------------------------------------------------------------
    def evaluate(self, store: CatalogStore) -> list[Alert]:
        """Predict every tracked sharing's breach, raise and clear alerts; the changes."""
        now = time.monotonic()
        if now - self._rows_at >= ROWS_EVERY_S:
            self._rows = {r.name: r for r in store.sharings("admitted")}
            self._rows_at = now
        if self.over_bound is not None and now - self._bounds_at >= BOUNDS_EVERY_S:
            self._bounds_at = now  # read beside: it may take seconds
            threading.Thread(target=self._read_bounds, args=(self.over_bound,), daemon=True,
                             name="alerts-bounds").start()
        with self.ex.lock:
            tracked = {n: (tr.delay_s, tr.pushing) for n, tr in self.ex.tracked.items()}
        changes = []
        for name, (delay, pushing) in tracked.items():
            row = self._rows.get(name)
            if row is None:
                continue
            if pushing:
                self._pushing_since.setdefault(name, now)
            else:
                self._pushing_since.pop(name, None)
            signals = self.signals(name, row.staleness_s, delay, now)
            if signals is None:
                continue
            p = predict(signals)
            alarm = self.alarms.setdefault(name, Alarm())
            change = alarm.step(p, row.staleness_s, now)
            if change is not None:
                changes.append(self._changed(store, row, change, alarm.raised or p, signals))
        for gone in set(self.alarms) - set(tracked):
            self.alarms.pop(gone)
            with self.lock:
                self.active.pop(gone, None)
        return changes

    def _read_bounds(self, over_bound: Callable[[], dict[str, float]]) -> None:
        try:
            self._bounds = over_bound()
        except Exception as exc:  # the loads are an input among others
            log.info("machine loads unknown: %s", exc)

    def signals(self, name: str, sla_s: float, delay_s: float, now: float) -> Signals | None:
        """What the executor knows of `name` now (None: its timestamps not heard yet)."""
        ex = self.ex
        marks = ex.timestamps(name)
        with ex.lock:
            phys = ex.plan
            if marks is None or phys is None or name not in phys.plan.names():
                return None
            entry = phys.plan.sharing(name)
            sources = {s.machine for s in entry.sources}
            machines = {v.machine for v in phys.plan.of_sharing(name)}
        age, clocks = ex.clock.source_clocks(sources)
        newest = max([marks.max_src + timedelta(seconds=age), *clocks])
        wall = time.time()
        with ex.clock.lock:
            silent = tuple(sorted(
                (m, wall - max(b.last_beat, ex.clock.started_at))
                for m, b in ex.clock.beats.items() if m in machines
                and wall - max(b.last_beat, ex.clock.started_at) >= SILENT_NEAR_S))
        cp0, slope = ex.scheduler.cp_line(name)
        since = self._pushing_since.get(name)
        return Signals(
            sla_s=sla_s, staleness_s=max(0.0, (newest - marks.mv_ts).total_seconds()),
            backlog_s=max(0.0, (marks.min_src - marks.mv_ts).total_seconds()),
            cp0_s=cp0, cp_slope=slope, delay_s=delay_s,
            pushing_s=None if since is None else now - since, silent=silent,
            over_bound=tuple(sorted((m, r) for m, r in self._bounds.items() if m in machines)))

    def _changed(self, store: CatalogStore, row: SharingRow, change: str, p: Prediction,
                 s: Signals) -> Alert:
        at = datetime.now(UTC)
        breach_in = p.breach_in_s if change == "raised" else None
        alert = Alert(row.name, row.id, row.consumer, change, at,
                      None if breach_in is None else at + timedelta(seconds=breach_in),
                      breach_in, s.staleness_s, row.staleness_s,
                      p.reason if change == "raised" else "the risk has passed")
        with self.lock:
            if change == "raised":
                self.active[row.name] = alert
                self.raised_total += 1
            else:
                self.active.pop(row.name, None)
            self.recent = [*self.recent[-(RECENT - 1):], alert]
        log.warning("SLA alert %s for %s: %s", change, row.name, alert.reason)
        try:
            hook = webhooks.hook(store, row.id)
        except Exception as exc:  # NOTIFY still goes
            log.warning("cannot read the webhook of %s: %s", row.name, exc)
            hook = None
        dsn = next((m.dsn for m in self.topology.machines if m.name == row.mv_machine), None)
        threading.Thread(target=_deliver, args=(alert, dsn, hook), daemon=True,
                         name=f"alert-{row.name}").start()
        return alert

    # -- what the API reads ------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, Alert], list[Alert], int]:
        """(the raised alerts, the recent changes, how many were raised since start)."""
        with self.lock:
            return dict(self.active), list(self.recent), self.raised_total


def _deliver(alert: Alert, dsn: str | None, hook: webhooks.Hook | None) -> None:
    body = json.dumps(alert.to_json())
    if dsn is not None:
        try:
            sla_notify.notify(dsn, body)
        except Exception as exc:  # the machine is away: the webhook still goes
            log.warning("NOTIFY %s for %s failed: %s", sla_notify.CHANNEL, alert.sharing, exc)
    if hook is not None:
        webhooks.call(hook, body.encode())


def prometheus(alerter: Alerter | None, names: list[str]) -> str:
    """`smile_sla_breach_predicted` (1 while a sharing's alert is raised) of each of `names`,
    the seconds to its predicted breach, and the alerts raised since start."""
    if alerter is None:
        return ""
    active, _, total = alerter.snapshot()
    lines = ["# HELP smile_sla_breach_predicted 1 while a breach of the sharing's SLA is "
             "predicted within its SLA (an alert is raised).",
             "# TYPE smile_sla_breach_predicted gauge",
             *(f'smile_sla_breach_predicted{{sharing="{n}"}} {int(n in active)}' for n in names),
             "# HELP smile_sla_breach_in_seconds Seconds from the alert to the predicted breach.",
             "# TYPE smile_sla_breach_in_seconds gauge",
             *(f'smile_sla_breach_in_seconds{{sharing="{n}"}} {a.breach_in_s}'
               for n, a in sorted(active.items()) if a.breach_in_s is not None),
             "# HELP smile_sla_alerts_total Breach alerts raised since the executor started.",
             "# TYPE smile_sla_alerts_total counter", f"smile_sla_alerts_total {total}"]
    return "\n".join(lines) + "\n"
