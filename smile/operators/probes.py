"""Whether finding rows of a relation vertex through its index, once per input row, beats one
pass over the whole relation — asked by the join (probing X̂) and by DeltaToRel (finding the
rows it replaces or deletes), from planner statistics only: the relation's size (pg_class) and,
for a key column, how many rows share a value (pg_stats). A relation vertex is analyzed when
installed and by autovacuum.

Must not: count rows (that would cost what it is meant to save).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import sql

if TYPE_CHECKING:
    import psycopg

PROBE_RATIO = 16
"""A row found through an index costs about as much as this many rows of the relation read by
a sequential scan into a hash (both cached)."""


def probes_pay(conn: psycopg.Connection[Any], table: tuple[str, str], inputs: int,
               key: str | None = None) -> bool | None:
    """True if `inputs` index probes (each reading every row that shares its `key` value)
    cost less than a pass over `table`; None while the statistics are unknown."""
    row = conn.execute(
        "SELECT c.reltuples, s.n_distinct FROM pg_class c LEFT JOIN pg_stats s"
        " ON s.schemaname = %s AND s.tablename = %s AND s.attname = %s"
        " WHERE c.oid = %s::regclass",
        (table[0], table[1], key, sql.Identifier(*table).as_string(conn))).fetchone()
    if row is None or row[0] is None or float(row[0]) <= 0:
        return None
    size, distinct = float(row[0]), row[1]
    per_key = 1.0  # unknown spread: a key as selective as can be
    if distinct is not None and float(distinct) != 0:
        d = float(distinct)
        per_key = 1.0 / -d if d < 0 else max(1.0, size / d)
    return inputs * per_key * PROBE_RATIO < size
