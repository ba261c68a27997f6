"""The Spark side of an agent: which joins run on Spark, and a new vertex's first contents
computed by Spark when the plan says its joins are large.

`fill_on_spark` reads each base relation as of t0 (its shadow rolled with its delta, the same
query PostgreSQL would stream) over JDBC, joins on Spark, writes into an unlogged stage table on
the vertex's machine and moves the rows into the vertex in one transaction.

Must not: choose the engine (the plan's edges do) or start Spark before a job needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.db import jdbc_target
from smile.operators.join_spark import drop_stage, load_through_stage, new_stage

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import psycopg

    from smile.deploy.physical import Col


@dataclass(frozen=True)
class SparkJoins:
    """How to run the joins a plan puts on Spark: each machine's DSN (Spark reads and writes
    over JDBC) and the session, started on first use."""

    dsns: Mapping[str, str]
    session: Callable[[], Any]
    every_join: bool = False
    """Run PostgreSQL-planned joins on Spark too (to test that both paths agree)."""


def fill_on_spark(conn: psycopg.Connection[Any], spark: SparkJoins, machine: str,
                  table: tuple[str, str], reads: Mapping[str, tuple[str, str]],
                  equalities: list[tuple[str, str]], columns: list[tuple[Col, str]]) -> int:
    """Fill `table` on `machine` (its connection `conn`, in no transaction): `reads` maps each
    alias to (home machine, SQL of its rows as of t0, columns named as the vertex names
    them), `equalities` are pairs of those column names, `columns` the vertex's columns."""
    session = spark.session()
    frames = []
    for i, (alias, (home, query)) in enumerate(reads.items()):
        url, props = jdbc_target(spark.dsns[home])  # the subquery's own name: any identifier
        frames.append((alias, session.read.jdbc(url, f"({query}) __r{i}", properties=props)))
    joined = frames[0][1]
    have = {c for c in joined.columns}
    for _, frame in frames[1:]:
        cond = None
        for lhs, rhs in equalities:
            if (lhs in have and rhs in frame.columns) or (rhs in have and lhs in frame.columns):
                left, right = (lhs, rhs) if lhs in have else (rhs, lhs)
                eq = joined[left] == frame[right]
                cond = eq if cond is None else cond & eq
        joined = joined.join(frame, on=cond, how="inner") if cond is not None \
            else joined.crossJoin(frame)
        have |= set(frame.columns)
    out = joined.select(*[joined[p] for _, p in columns])
    stage = new_stage()
    try:
        with conn.transaction():
            return load_through_stage(conn, spark.dsns[machine], out, stage, table,
                                      [p for _, p in columns])
    finally:
        drop_stage(spark.dsns[machine], stage)
