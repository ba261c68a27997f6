"""A sharing's SLA report over a span of time, by clock hour and in all, from the auditor's
snapshots (`smile_catalog.audit`): the share of snapshots within the SLA, staleness p50, p95,
p99 and max, violations, late tuples, resource cost and penalties.

Percentiles are over the snapshots' staleness, interpolated linearly between ranks
(PostgreSQL's `percentile_cont`). The totals come from the auditor's running totals: what a
span adds is the last snapshot in it less the last one before it — exact however the history
was rolled up, since the roll-up (`CatalogStore.compact`) keeps each hour's last snapshot. The
staleness of the snapshots it removes is kept first, per sharing and hour, in
`smile_catalog.audit_hourly` (`keep_hours`: how many snapshots, how many within the SLA, every
staleness reading; the roll-up thins whole hours only), so shares and percentiles stay exact
too; a rolled-up hour is reported whole when the span cuts it.

Must not: change the audit; decide anything.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from smile.executor.store import CatalogStore, SharingRow

DDL = """
CREATE TABLE IF NOT EXISTS smile_catalog.audit_hourly (
    sharing   text NOT NULL,
    hour      timestamptz NOT NULL,
    snapshots int NOT NULL,
    within    int NOT NULL,
    staleness float8[] NOT NULL,
    PRIMARY KEY (sharing, hour)
);
"""
TOTALS = ("violations", "late_tuples", "resource_cost", "penalty_cost")
HOUR = timedelta(hours=1)


class _Ready:
    done: ClassVar[set[str]] = set()
    lock: ClassVar[threading.Lock] = threading.Lock()


def _ensure(store: CatalogStore) -> None:
    with _Ready.lock:
        if store.dsn not in _Ready.done:
            store.conn.execute(DDL)
            _Ready.done.add(store.dsn)


def keep_hours(store: CatalogStore, before: datetime) -> int:
    """Keep the staleness readings of every whole hour before `before` that the roll-up is
    about to thin out (an hour already kept, or already down to one snapshot, stays as it
    is). Call before `CatalogStore.compact(before)`; how many hours were kept."""
    _ensure(store)
    return store.conn.execute(
        "INSERT INTO smile_catalog.audit_hourly (sharing, hour, snapshots, within, staleness)"
        " SELECT sharing, date_trunc('hour', at), count(*), count(*) FILTER (WHERE sla_ok),"
        " array_agg(staleness_s ORDER BY staleness_s) FROM smile_catalog.audit"
        " WHERE at < date_trunc('hour', %s::timestamptz)"
        " GROUP BY sharing, date_trunc('hour', at) HAVING count(*) > 1"
        " ON CONFLICT (sharing, hour) DO NOTHING", (before,)).rowcount


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between ranks, as `percentile_cont(q)`.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5), percentile([1.0, 2.0, 3.0, 4.0], 0.95)
    (2.5, 3.8499999999999996)
    """
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Figures:
    start: datetime
    end: datetime
    snapshots: int
    within: int
    staleness: tuple[float, ...]
    """Sorted."""
    totals: dict[str, float]
    """What the span added to each of `TOTALS`."""
    whole_hour: bool = False
    """Rolled up: the hour's readings, whatever part of it the span covers."""

    def to_json(self) -> dict[str, Any]:
        s = self.staleness

        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {"from": self.start.isoformat(), "to": self.end.isoformat(),
                "snapshots": self.snapshots,
                "within_sla": num(self.within / self.snapshots if self.snapshots else math.nan),
                "staleness_s": {"p50": num(percentile(s, 0.5)), "p95": num(percentile(s, 0.95)),
                                "p99": num(percentile(s, 0.99)),
                                "max": num(s[-1] if s else math.nan)},
                "violations": int(self.totals["violations"]),
                "late_tuples": int(self.totals["late_tuples"]),
                "resource_cost": round(self.totals["resource_cost"], 9),
                "penalty_cost": round(self.totals["penalty_cost"], 9),
                "rolled_up": self.whole_hour}


def report(store: CatalogStore, row: SharingRow, start: datetime,
           end: datetime) -> dict[str, Any]:
    """The report of `row`'s life within [start, end): in all, and by hour."""
    _ensure(store)
    start = max(start, row.created_at)
    if row.withdrawn_at is not None:
        end = min(end, row.withdrawn_at + timedelta(seconds=1))
    raw = store.conn.execute(
        "SELECT at, staleness_s, sla_ok, violations, late_tuples, resource_cost, penalty_cost"
        " FROM smile_catalog.audit WHERE sharing = %s AND at >= %s AND at < %s ORDER BY at",
        (row.name, row.created_at, end)).fetchall()
    kept = {h: (n, w, tuple(v)) for h, n, w, v in store.conn.execute(
        "SELECT hour, snapshots, within, staleness FROM smile_catalog.audit_hourly"
        " WHERE sharing = %s AND hour >= date_trunc('hour', %s::timestamptz) AND hour < %s",
        (row.name, start, end)).fetchall()}
    hours = []
    h = start.replace(minute=0, second=0, microsecond=0)
    while h < end:
        hours.append(_span(raw, kept.get(h), max(start, h), min(end, h + HOUR)))
        h += HOUR
    snaps = sum(f.snapshots for f in hours)
    whole = Figures(start, end, snaps, sum(f.within for f in hours),
                    tuple(sorted(x for f in hours for x in f.staleness)),
                    _added(raw, start, end))
    return {"id": row.id, "name": row.name, "sla_s": row.staleness_s,
            **whole.to_json(), "hours": [f.to_json() for f in hours if f.snapshots]}


def _span(raw: Sequence[tuple[Any, ...]], kept: tuple[int, int, tuple[float, ...]] | None,
          start: datetime, end: datetime) -> Figures:
    """One hour's part of the span, [start, end)."""
    totals = _added(raw, start, end)
    hour = start.replace(minute=0, second=0, microsecond=0)
    if kept is not None and sum(1 for r in raw if hour <= r[0] < hour + HOUR) < kept[0]:
        n, within, values = kept  # thinned by the roll-up: its kept readings
        return Figures(start, end, n, within, tuple(sorted(values)), totals, True)
    inside = [r for r in raw if start <= r[0] < end]
    return Figures(start, end, len(inside), sum(1 for r in inside if r[2]),
                   tuple(sorted(float(r[1]) for r in inside)), totals)


def _added(raw: Sequence[tuple[Any, ...]], start: datetime, end: datetime) -> dict[str, float]:
    """What [start, end) added to the running totals: its last snapshot less the last one
    before it (none before: nothing)."""
    def last(until: datetime) -> tuple[Any, ...] | None:
        return next((r for r in reversed(raw) if r[0] < until), None)

    a, b = last(start), last(end)
    if b is None or (a is not None and b[0] <= a[0]):
        return dict.fromkeys(TOTALS, 0.0)
    return {k: float(b[3 + i]) - (float(a[3 + i]) if a is not None else 0.0)
            for i, k in enumerate(TOTALS)}
