"""Build a catalog snapshot from the live machines: each public table's placement, row count,
column statistics from `pg_stats` (ANALYZE of those tables first), and its update rate in
delta rows per second sampled from `pg_stat_user_tables` (inserts + deletes + 2 x updates)
over `sample_s`.

A local cloud's machines share this box's cores, so each gets cores / N of them (N: the local
machines); an attached machine has the cores and price it was attached with (`machine_spec`).
Operators may keep `max_load` of a machine's cores busy. A machine that cannot be read keeps
the statistics it last had, so that one app's database away does not stop the others' plans.

Must not: plan; it only reads.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from smile.deploy import table_stats
from smile.deploy.machine_state import Sessions, capture_gone
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats

if TYPE_CHECKING:
    from smile.topology import MachineEndpoint, Topology

log = logging.getLogger("smile.catalog")


class LastStats:
    """The last live catalog read in a process, shared by its requests: a machine that cannot
    be read keeps the statistics it had there (`snapshot_live`'s `fallback`)."""

    def __init__(self) -> None:
        self.catalog: CatalogSnapshot | None = None


def core_share(topology: Topology) -> float:
    """Cores each local machine has: its share of this box's."""
    local = sum(1 for m in topology.machines if m.origin == "local")
    return (os.cpu_count() or 2) / max(1, local)


def machine_spec(topology: Topology, m: MachineEndpoint, max_load: float | None = None
                 ) -> Machine:
    """The optimizer's view of machine `m`: its own cores and price where it has them, else
    a local one's share of the box (an attached one the default machine's cores) and the
    default price."""
    spec = Machine(m.name)
    if m.cores is not None or m.origin == "local":
        spec = replace(spec, cpu_cores=core_share(topology) if m.cores is None else m.cores)
    if m.price_per_hour is not None:
        spec = replace(spec, price_per_hour=m.price_per_hour)
    return spec if max_load is None else replace(spec, max_load=max_load)


def snapshot_live(topology: Topology, sample_s: float = 2.0,
                  rates: dict[tuple[str, str], float] | None = None,
                  max_load: float | None = None, analyze: bool = True,
                  growth: dict[tuple[str, str], float] | None = None,
                  fallback: CatalogSnapshot | None = None) -> CatalogSnapshot:
    """The live catalog; with `rates` ((machine, table) → delta rows/s, e.g. a RateMonitor's),
    those instead of a sample of `sample_s` taken now; with `growth` (rows/s each table grows
    by, the same monitor's), each relation's `growth_rate`; without `analyze`, the statistics
    PostgreSQL has (autovacuum keeps them) instead of fresh ones. A machine that cannot be
    read keeps its relations as `fallback` (the last snapshot) had them, so a plan change that
    does not need it goes on; without one its relations are left out."""
    first: dict[tuple[str, str], float] = {}
    away: set[str] = set()
    with Sessions(topology, "smile") as sessions:
        for m in topology.machines:
            try:
                for name, _, changes in table_stats.tables(sessions.get(m.name), analyze):
                    first[(m.name, name)] = changes
            except Exception as exc:  # the machine away, or its session broken
                log.warning("cannot read the statistics of %s: %s", m.name, exc)
                away.add(m.name)
        started = time.monotonic()
        if rates is None:
            time.sleep(sample_s)
        elapsed = max(time.monotonic() - started, 1e-6)
        relations: list[RelationStats] = []
        for m in topology.machines:
            if m.name not in away:
                try:
                    relations.extend(_relations(sessions.get(m.name), m.name, first, elapsed,
                                                rates, growth))
                    continue
                except Exception as exc:  # the machine away, or its session broken
                    log.warning("cannot read the statistics of %s: %s", m.name, exc)
            relations.extend(r for r in (fallback.relations if fallback is not None else ())
                             if r.machine == m.name)
    machines = tuple(machine_spec(topology, m, max_load) for m in topology.machines)
    return CatalogSnapshot(machines, tuple(relations))


def _relations(conn: Any, machine: str,
               first: dict[tuple[str, str], float], elapsed: float,
               rates: dict[tuple[str, str], float] | None,
               growth: dict[tuple[str, str], float] | None) -> list[RelationStats]:
    """The statistics of one machine's public tables (`snapshot_live`)."""
    kept = table_stats.captured_columns(conn)
    lost = {q.split(".", 1)[1]: tuple(c) for q, c in capture_gone(conn).items()}
    out = []
    for name, reltuples, changes in table_stats.tables(conn):
        rows = max(float(reltuples), 0.0)
        live = {col: ColumnStats(col, typ, max(1.0, nd if nd >= 0 else -nd * rows),
                                 null_frac, width)
                for col, typ, nd, null_frac, width in table_stats.columns(conn, name)}
        # a published table's columns are those capture keeps, in ΔR's order: one added
        # since is not captured, one lost since (dropped, renamed, retyped) is NULL in ΔR
        # and R̂ and may still be in the running plan's vertices (the sharings reading it
        # fail: `capture_watch`); it is listed as `lost`, which no new query may read
        cols = [live.get(c, ColumnStats(c)) for c in kept[name]] if name in kept \
            else list(live.values())
        rate = rates.get((machine, name), 0.0) if rates is not None else max(
            0.0, changes - first.get((machine, name), changes)) / elapsed
        out.append(RelationStats(name, machine, rows, rate, tuple(cols),
                                 (growth or {}).get((machine, name), 0.0),
                                 lost.get(name, ())))
    return out
