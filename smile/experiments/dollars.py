"""What a run cost in dollars, measured rather than echoed from the model: the operator
seconds each machine's agent reported (push log) × its price per core-second (their wall
seconds; their CPU seconds beside them, `Dollars.cpu_busy`), the bytes CopyDelta moved
between machines (push log) × the network price, the storage every vertex of the running
plan takes (`pg_total_relation_size`, base relations excluded) × the storage price over the
window, and the late tuples the auditor counted × each sharing's penalty. The pushes are
those logged in the window or, for a cost per hour of data (`spans`), those that advanced
each sharing over its span of data. A vertex pushed once for several sharings (a shared
push) is split among them (`store.share_of`), so one sharing's dollars are its part, and a
run's add up to what its machines did. The cost model's prediction for the same window (the
auditor's resource cost, the plan's $/s since admission, plus the same penalties) is given
beside it.

Must not: price anything from the cost model into the measured figure (`work`, the measured
pushes priced by the time model's lines, is a figure of its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.costmodel.prices import Prices
from smile.db import connect
from smile.deploy.plan_store import load_active
from smile.executor.catalog_live import core_share
from smile.executor.store import BUSY_S, in_spans, with_parts
from smile.optimizer.catalog import Machine

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from smile.costmodel.time_model import TimeModel
    from smile.topology import Topology


_THEIRS = with_parts("%(names)s::text[]", "AND at >= %(since)s AND at <= %(until)s")
"""The window's push-log rows of the sharings measured, each with their `part` of it: all of
it unless the vertex was pushed once for them and others too (a shared push)."""
_SPANNED = in_spans("%(names)s::text[]", "%(los)s::timestamptz[]", "%(his)s::timestamptz[]")
"""The same, of the pushes that advanced each sharing measured inside its span of data."""

_FIRST_AUDIT = ("SELECT resource_cost, late_tuples FROM smile_catalog.audit WHERE sharing = %s "
                "AND at >= %s AND at <= %s ORDER BY at ASC LIMIT 1")
_LAST_AUDIT = ("SELECT resource_cost, late_tuples FROM smile_catalog.audit WHERE sharing = %s "
               "AND at >= %s AND at <= %s ORDER BY at DESC LIMIT 1")


@dataclass(frozen=True)
class Dollars:
    cpu: float
    network: float
    storage: float
    penalty: float
    model: float
    """What the auditor charged: each sharing's own plan's resource $/s over the window, plus
    the same penalties. A vertex k sharings share is in k of those plans: charged k times."""
    seconds: float
    sharings: int
    model_cpu: float | None = None
    """The global plan's predicted operator load on each machine (shared vertices once) ×
    its price per core-second over the window: what `cpu` measured, as the model says it."""
    work: float | None = None
    """The same pushes (how many, of which operator, over how many tuples, from the push log)
    priced by the time model's lines instead of the seconds they took: what `cpu` measured,
    without the noise of a box whose speed varies from one minute to the next."""
    cpu_busy: float | None = None
    """The same pushes' CPU seconds (the agent's thread and the backends it used, its
    sources' included, `agent/cpu_time.py`; the wall time of a push where none was
    measured) × the price: `cpu` without the waits for a core or a lock that wall seconds
    hold on this shared box."""

    @property
    def busy_measured(self) -> float | None:
        """`measured` with the operators' CPU seconds in place of their wall seconds."""
        return None if self.cpu_busy is None else self.cpu_busy + self._besides_cpu

    @property
    def measured(self) -> float:
        return self.cpu + self._besides_cpu

    @property
    def _besides_cpu(self) -> float:
        return self.network + self.storage + self.penalty

    def per_sharing_hour(self, amount: float) -> float:
        hours = self.sharings * self.seconds / 3600.0
        return amount / hours if hours > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"measured": round(self.measured, 6), "cpu": round(self.cpu, 6),
                "network": round(self.network, 6), "storage": round(self.storage, 8),
                "penalty": round(self.penalty, 6), "model": round(self.model, 6),
                "measured_per_sharing_hour": round(self.per_sharing_hour(self.measured), 6),
                "model_per_sharing_hour": round(self.per_sharing_hour(self.model), 6),
                "model_over_measured": round(self.model / self.measured, 3)
                if self.measured > 0 else None,
                "model_cpu": round(self.model_cpu, 6) if self.model_cpu is not None else None,
                "model_cpu_over_cpu": round(self.model_cpu / self.cpu, 3)
                if self.model_cpu is not None and self.cpu > 0 else None,
                "work": round(self.work, 6) if self.work is not None else None,
                "cpu_busy": round(self.cpu_busy, 6) if self.cpu_busy is not None else None,
                "seconds": round(self.seconds, 1), "sharings": self.sharings}


def measure(topology: Topology, sharings: list[str], since: datetime, until: datetime,
            prices: Prices | None = None,
            predicted_load: dict[str, float] | None = None,
            model: TimeModel | None = None,
            spans: Mapping[str, tuple[datetime, datetime]] | None = None) -> Dollars:
    """The dollars `sharings` cost between `since` and `until` (see the module's docstring),
    with `predicted_load` (machine → core-s/s, `GET /machines`) the model's CPU dollars, and
    with `model` their pushes' work priced by its lines (`Dollars.work`). With `spans`
    (sharing → the MV's timestamps (lo, hi], `Audited.pushed_span`) a sharing's pushes are
    those that advanced it over its span, not those logged in the window, so that a cost
    per hour of data divides what moved that data (`store.in_spans`); one without a span
    then has none, and the model's CPU dollars are over the spans' mean length. Run it while
    they are still admitted: storage is read from the running plan."""
    prices = prices or Prices()
    seconds = (until - since).total_seconds()
    args: dict[str, Any]
    if spans is None:
        pushes, args = _THEIRS, {"since": since, "until": until, "names": sharings}
        modelled_s = seconds
    else:
        spanned = [n for n in sharings if n in spans]
        pushes, args = _SPANNED, {"names": spanned, "los": [spans[n][0] for n in spanned],
                                  "his": [spans[n][1] for n in spanned]}
        # the model's load over as long as the mean span: the data the pushes moved
        modelled_s = sum((hi - lo).total_seconds() for lo, hi in zip(
            args["los"], args["his"], strict=True)) / max(1, len(spanned))

    def per_core_s(machine: str | None) -> float:
        m = priced(topology, machine)
        return prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)

    model_cpu = None if predicted_load is None else sum(
        load * modelled_s * per_core_s(m) for m, load in predicted_load.items())
    with connect(topology.catalog_dsn, autocommit=True, what="catalog") as cat:
        cpu, cpu_busy, nbytes = 0.0, 0.0, 0
        for machine, wall_s, busy_s, moved in cat.execute(
                "SELECT machine, coalesce(sum(seconds * part), 0), "
                f"coalesce(sum({BUSY_S} * part), 0), coalesce(sum(bytes * part), 0) "
                f"FROM {pushes} GROUP BY machine", args).fetchall():
            cpu += float(wall_s) * per_core_s(machine)
            cpu_busy += float(busy_s) * per_core_s(machine)
            nbytes += round(float(moved))
        work = None if model is None else sum(
            float(part) * model.logged_line(kind).seconds(float(tuples)) * per_core_s(machine)
            for machine, kind, tuples, part in cat.execute(
                "SELECT machine, kind, CASE WHEN kind = 'delta_to_rel' THEN coalesce(rows_in, "
                f"rows) ELSE rows END AS tuples, sum(part) FROM {pushes} GROUP BY 1, 2, 3",
                args).fetchall())
        penalty = charged = 0.0
        for name in sharings:
            first, last = (cat.execute(query, (name, since, until)).fetchone()
                           for query in (_FIRST_AUDIT, _LAST_AUDIT))
            pen = cat.execute("SELECT penalty_per_tuple FROM smile_catalog.sharings WHERE "
                              "name = %s ORDER BY id DESC LIMIT 1", (name,)).fetchone()
            if first is None or last is None:
                continue
            late = float(last[1] - first[1]) * float(pen[0] if pen else 0.0)
            penalty += late
            charged += float(last[0] - first[0]) + late
    return Dollars(cpu, nbytes * prices.network_per_byte(),
                   _stored_bytes(topology) * seconds * prices.storage_per_byte_second(),
                   penalty, charged, seconds, len(sharings), model_cpu, work, cpu_busy)


def priced(topology: Topology, machine: str | None) -> Machine:
    """A machine as the live catalog prices it (`catalog_live`): the paper's EC2 'large' price
    for its share of this box's cores, so a measured core-second costs what the model's
    does."""
    return Machine(machine or "?", cpu_cores=core_share(topology))


def _stored_bytes(topology: Topology) -> int:
    """Bytes every non-base vertex of the running plan takes on its machine."""
    active = load_active(topology.catalog_dsn)
    if active is None:
        return 0
    tables: dict[str, set[tuple[str, str]]] = {}
    for v, pv in active[1].vertices.items():
        if not pv.base:
            tables.setdefault(v.machine, set()).add(pv.table)
    total = 0
    for machine, names in tables.items():
        with connect(topology.machine(machine).dsn, autocommit=True, what=machine) as conn:
            for schema, name in sorted(names):
                row = conn.execute(
                    "SELECT coalesce(pg_total_relation_size(to_regclass("
                    "quote_ident(%s) || '.' || quote_ident(%s))), 0)", (schema, name)).fetchone()
                total += int(row[0]) if row else 0
    return total
