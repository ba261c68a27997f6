"""What the benchmarks of one operator push share: their scratch schema's vertex timestamps,
set and dropped afterwards with the schema, and two rules timed on the same push, each run in a
transaction rolled back after it, checked to write the same rows.

Must not: build a benchmark's tables, or keep anything after `drop_schema`.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import connect
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

    import psycopg


def drop_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """The benchmark's schema and the timestamps of its vertices (`schema:…`)."""
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    vertex_ts.delete_like(conn, f"{schema}:%")


def stamp(conn: psycopg.Connection[Any], schema: str, stamps: dict[str, datetime]) -> None:
    """Set the timestamps of the benchmark's vertices (`schema:name` → ts)."""
    vertex_ts.put(conn, {f"{schema}:{name}": ts for name, ts in stamps.items()})


def timed_push(dsn: str, push: Callable[[psycopg.Connection[Any]], object],
               written: sql.Composed) -> tuple[float, list[Any]]:
    """One push, rolled back: (its seconds, what `written` reads of what it wrote)."""
    with connect(dsn, what="bench") as conn:
        conn.execute("SELECT 1")  # the push's own transaction becomes a savepoint in this one
        start = time.perf_counter()
        push(conn)
        seconds = time.perf_counter() - start
        rows = conn.execute(written).fetchall()
        conn.rollback()
    return seconds, rows


def compare_rules(dsn: str, rules: dict[str, Callable[[psycopg.Connection[Any]], object]],
                  written: sql.Composed | Mapping[str, sql.Composed], repeat: int
                  ) -> tuple[dict[str, float], list[Any]]:
    """Each rule's median seconds over `repeat` rounds (the rules in turn within a round), and
    the rows they all wrote (`written`: the query that reads them, or each rule's); raises if
    two rules wrote different rows."""
    times: dict[str, list[float]] = {name: [] for name in rules}
    wrote: dict[str, list[Any]] = {}
    for _ in range(repeat):
        for name, push in rules.items():
            query = written if isinstance(written, sql.Composed) else written[name]
            seconds, wrote[name] = timed_push(dsn, push, query)
            times[name].append(seconds)
    first, *others = wrote.values()
    if any(rows != first for rows in others):
        raise AssertionError("the rules wrote different rows for the same push")
    return {name: statistics.median(t) for name, t in times.items()}, first
