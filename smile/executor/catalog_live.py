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
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import connect
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats

if TYPE_CHECKING:
    from smile.topology import Topology

_STATS = """
SELECT c.relname, c.reltuples::float8,
       coalesce(s.n_tup_ins + s.n_tup_del + 2 * s.n_tup_upd, 0)::float8
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = 'public' AND c.relkind = 'r'
"""
"""Every public table: what a snapshot reads (the published ones are kept), and so all it
ANALYZEs. A bare ANALYZE also took every delta table, intermediate vertex and MV of the
running plan (hundreds with Table 1) on each submission; under load that work fell into the
idle-core window admission's bound is measured over, and refusals in a row shrank the next
bound."""
_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), coalesce(st.n_distinct, -1)::float8,
       coalesce(st.null_frac, 0)::float8, coalesce(st.avg_width, 8)
FROM pg_attribute a LEFT JOIN pg_stats st
  ON st.schemaname = 'public' AND st.tablename = %s AND st.attname = a.attname
WHERE a.attrelid = ('public.' || quote_ident(%s))::regclass AND a.attnum > 0
  AND NOT a.attisdropped ORDER BY a.attnum
"""


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
    conns: dict[str, Any] = {}
    try:
        for m in topology.machines:
            conns[m.name] = connect(m.dsn, autocommit=True, what=m.name)
            stats = conns[m.name].execute(_STATS).fetchall()
            if analyze and stats:  # the tables of _STATS only, then their counters after it
                conns[m.name].execute(sql.SQL("ANALYZE {}").format(sql.SQL(", ").join(
                    sql.Identifier("public", name) for name, _, _ in stats)))
                stats = conns[m.name].execute(_STATS).fetchall()
            for name, _, changes in stats:
                first[(m.name, name)] = changes
        started = time.monotonic()
        if rates is None:
            time.sleep(sample_s)
        elapsed = max(time.monotonic() - started, 1e-6)
        relations = []
        for m in topology.machines:
            conn = conns[m.name]
            for name, reltuples, changes in conn.execute(_STATS).fetchall():
                rows = max(float(reltuples), 0.0)
                cols = []
                for col, typ, nd, null_frac, width in conn.execute(_COLUMNS, (name, name)):
                    distinct = nd if nd >= 0 else -nd * rows
                    cols.append(ColumnStats(col, typ, max(1.0, distinct), null_frac, int(width)))
                rate = rates.get((m.name, name), 0.0) if rates is not None else max(
                    0.0, changes - first.get((m.name, name), changes)) / elapsed
                relations.append(RelationStats(name, m.name, rows, rate, tuple(cols),
                                               (growth or {}).get((m.name, name), 0.0)))
    finally:
        for c in conns.values():
            c.close()
    cores = core_share(topology)
    machines = tuple(Machine(m.name, cpu_cores=cores) if max_load is None else
                     Machine(m.name, cpu_cores=cores, max_load=max_load)
                     for m in topology.machines)
    return CatalogSnapshot(machines, tuple(relations))
