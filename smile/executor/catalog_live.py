"""Build a catalog snapshot from the live machines: each public table's placement, row count,
column statistics from `pg_stats` (ANALYZE of those tables first), and its update rate in
delta rows per second sampled from `pg_stat_user_tables` (inserts + deletes + 2 x updates)
over `sample_s`.

Machine capacities are those of `Machine`'s defaults scaled to this box: the local cloud's
machines share its cores, so each gets cores / N (of which operators may keep `max_load`
busy).

Must not: plan; it only reads.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from smile.deploy import table_stats
from smile.deploy.machine_state import Sessions
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats

if TYPE_CHECKING:
    from smile.topology import Topology


def core_share(topology: Topology) -> float:
    """Cores each local machine has: its share of this box's."""
    return (os.cpu_count() or 2) / max(1, len(topology.machines))


def snapshot_live(topology: Topology, sample_s: float = 2.0,
                  rates: dict[tuple[str, str], float] | None = None,
                  max_load: float | None = None, analyze: bool = True,
                  growth: dict[tuple[str, str], float] | None = None) -> CatalogSnapshot:
    """The live catalog; with `rates` ((machine, table) → delta rows/s, e.g. a RateMonitor's),
    those instead of a sample of `sample_s` taken now; with `growth` (rows/s each table grows
    by, the same monitor's), each relation's `growth_rate`; without `analyze`, the statistics
    PostgreSQL has (autovacuum keeps them) instead of fresh ones."""
    first: dict[tuple[str, str], float] = {}
    with Sessions(topology, "smile") as sessions:
        for m in topology.machines:
            for name, _, changes in table_stats.tables(sessions.get(m.name), analyze):
                first[(m.name, name)] = changes
        started = time.monotonic()
        if rates is None:
            time.sleep(sample_s)
        elapsed = max(time.monotonic() - started, 1e-6)
        relations = []
        for m in topology.machines:
            conn = sessions.get(m.name)
            for name, reltuples, changes in table_stats.tables(conn):
                rows = max(float(reltuples), 0.0)
                cols = []
                for col, typ, nd, null_frac, width in table_stats.columns(conn, name):
                    distinct = nd if nd >= 0 else -nd * rows
                    cols.append(ColumnStats(col, typ, max(1.0, distinct), null_frac, width))
                rate = rates.get((m.name, name), 0.0) if rates is not None else max(
                    0.0, changes - first.get((m.name, name), changes)) / elapsed
                relations.append(RelationStats(name, m.name, rows, rate, tuple(cols),
                                               (growth or {}).get((m.name, name), 0.0)))
    cores = core_share(topology)
    machines = tuple(Machine(m.name, cpu_cores=cores) if max_load is None else
                     Machine(m.name, cpu_cores=cores, max_load=max_load)
                     for m in topology.machines)
    return CatalogSnapshot(machines, tuple(relations))
