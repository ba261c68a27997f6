"""Join on Spark: the same Δ(ΔL ⋈ X) with compensation as `join.join_delta`, for large inputs.

Under the locks `join.begin` takes on the destination's machine (destination exclusively, X̂
shared), Spark reads the driving slice and the compensated other side (the union of its three
parts) over JDBC — the very `input_queries` PostgreSQL runs — joins them, consolidates the signs
per (row, τ) as PostgreSQL does, and writes the result into an unlogged stage table; the
holding transaction then moves the rows into the destination and sets its TS, so the contents
and TS commit together, exactly once. A stage table left by a crash is named
`_smile.stage_*` and dropped by `drop_stale_stages`.

Must not: decide between PostgreSQL and Spark (the plan's edge says), or start Spark itself (the
caller hands a session in).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import connect, jdbc_target
from smile.operators import vertex_ts
from smile.operators.join import Joined, JoinSpec, begin, input_queries

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    import psycopg

STAGE_PREFIX = "stage_"


def join_delta_spark(conn: psycopg.Connection[Any], dsn: str, spark: Any, spec: JoinSpec,
                     to_ts: datetime) -> Joined:
    """Advance `spec.dst_vertex` to `to_ts`; `conn` and `dsn` reach the same machine."""
    from pyspark.sql import functions as F

    stage = new_stage()
    names = [n for _, n in spec.outputs]
    url, props = jdbc_target(dsn)
    try:
        with conn.transaction():
            began = begin(conn, spec, to_ts)
            have = began.have
            if have >= to_ts:
                return Joined(have, have, 0)
            assert began.other is not None
            d_q, x_parts = input_queries(conn, spec, have, to_ts, began.other)
            x_q = sql.SQL(" UNION ALL ").join(x_parts)
            d = spark.read.jdbc(url, f"({d_q.as_string(conn)}) d", properties=props).alias("d")
            x = spark.read.jdbc(url, f"({x_q.as_string(conn)}) x", properties=props).alias("x")
            on = None
            for dc, oc in spec.predicates:
                eq = (F.col(f"d.`{spec.delta.columns[dc]}`")
                      == F.col(f"x.`{spec.other.columns[oc]}`"))
                on = eq if on is None else on & eq
            back, fwd = (F.expr(f"x.{c}") for c in spec.time_conditions)
            k = F.col("x.__k")
            joined = d.join(x, on=on, how="inner").where(
                (k == 0) | ((k == 1) & back) | ((k == 2) & fwd))
            signed = joined.select(
                *[F.col(f"{side}.`{phys}`").alias(name)
                  for (side, phys), name in ((spec.out_column(c), n) for c, n in spec.outputs)],
                (F.col("d.__sign") * F.col("x.__s")).alias("__s"),
                F.col("d.__ts").alias("__ts"))
            # consolidated as join_delta does: the net per (row, τ), as |n| rows of sign(n)
            net = signed.groupBy(*[F.col(f"`{n}`") for n in names], F.col("__ts")).agg(
                F.sum("__s").alias("__n")).where(F.col("__n") != 0)
            out = net.select(
                *[F.col(f"`{n}`") for n in names],
                F.signum("__n").cast("short").alias("__sign"), F.col("__ts"),
                F.explode(F.sequence(F.lit(1), F.abs(F.col("__n")).cast("int"))).alias("__i"),
            ).drop("__i")
            rows = load_through_stage(conn, dsn, out, stage, spec.dst_table,
                                      [*names, "__sign", "__ts"])
            vertex_ts.advance(conn, spec.dst_vertex, to_ts)
            return Joined(have, to_ts, rows, began.read)
    finally:
        drop_stage(dsn, stage)


def new_stage() -> tuple[str, str]:
    """A fresh stage table name (`_smile.stage_*`, what `drop_stale_stages` recognizes)."""
    return "_smile", f"{STAGE_PREFIX}{secrets.token_hex(6)}"


def load_through_stage(conn: psycopg.Connection[Any], dsn: str, frame: Any,
                       stage: tuple[str, str], table: tuple[str, str],
                       columns: Sequence[str]) -> int:
    """Rows of the Spark DataFrame `frame` (its columns named `columns`) into `table`: the
    stage, shaped like those columns of `table`, is created on a side connection (Spark must
    see it), written over JDBC, then moved into `table` and dropped in `conn`'s transaction —
    a savepoint when the caller holds one open. `conn` and `dsn` reach the same machine.
    Returns the rows moved."""
    url, props = jdbc_target(dsn)
    props = {**props, "stringtype": "unspecified"}  # strings into json, uuid, … columns
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    with connect(dsn, autocommit=True, what="stage") as side:
        side.execute(sql.SQL("CREATE UNLOGGED TABLE {} AS SELECT {} FROM {} WITH NO DATA").format(
            sql.Identifier(*stage), cols, sql.Identifier(*table)))
    frame.write.jdbc(url, f'"{stage[0]}"."{stage[1]}"', mode="append", properties=props)
    with conn.transaction():
        rows = conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
            sql.Identifier(*table), cols, cols, sql.Identifier(*stage))).rowcount
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(*stage)))
    return rows


def drop_stage(dsn: str, stage: tuple[str, str]) -> None:
    """Drop `stage` if a failure left it (after the transaction that would have dropped it)."""
    with connect(dsn, autocommit=True, what="stage") as side:
        side.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(*stage)))


def drop_stale_stages(conn: psycopg.Connection[Any]) -> int:
    """Drop stage tables a killed Spark join left behind (an agent does this on start)."""
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = '_smile' "
                        "AND tablename LIKE %s", (f"{STAGE_PREFIX}%",)).fetchall()
    for (name,) in rows:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier("_smile", name)))
    return len(rows)
