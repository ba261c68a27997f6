"""`smile bench join-plan`: one Join push over delta tables whose statistics were taken while
they were empty — as autoanalyze often catches them, between a push's retention and the next
rows — planned as joins are (hash joins, X̂ probed only where that pays) against planned
freely (`free_plan=True`: the planner chooses), in the same run.

The shape is a push of Table 1's `Δusers ⋈ socnet` at 1000 tweets/s: `slice` driving rows and
`compensating` rows of X's delta over the same interval (X̂ a push behind), X with `x_rows`
rows, a few per key, so that probing X once per driving row does not pay. Each push runs in a
transaction rolled back afterwards, `repeat` times per rule; figures are medians. Both rules
must write the same rows (checked). `fresh`: ANALYZE the deltas after their rows arrive
instead — what a hash join costs where the planner would have chosen right.

Must not: leave its schema or vertex timestamps behind.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.bench.rolled_back import compare_rules, drop_schema, stamp
from smile.db import connect
from smile.delta_capture.registry import ensure_capture_schema
from smile.operators.join import JoinSpec, Side, join_delta

if TYPE_CHECKING:
    from smile.topology import Topology

SCHEMA = "smile_bench_join"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(seconds=5)


def spec() -> JoinSpec:
    """Δ(Δl ⋈ x) on uid, the driving delta on the left."""
    ls = {("l", "uid"): "uid", ("l", "v"): "v"}
    xs = {("x", "uid"): "uid", ("x", "w"): "w"}
    return JoinSpec(Side((SCHEMA, "ld"), f"{SCHEMA}:ld", ls),
                    Side((SCHEMA, "x"), f"{SCHEMA}:x", xs),
                    Side((SCHEMA, "xd"), f"{SCHEMA}:xd", xs), (SCHEMA, "out"), f"{SCHEMA}:out",
                    ((("l", "uid"), ("x", "uid")),),
                    ((("l", "uid"), "uid"), (("l", "v"), "v"), (("x", "w"), "w")), "left")


def setup_tables(conn: Any, slice_rows: int, compensating: int, x_rows: int, keys: int,
                 fresh: bool) -> None:
    """The schema: X, the two deltas with the statistics of a push before (or, `fresh`, of
    their rows), the destination, and the vertices' timestamps (X̂ a push behind)."""
    s = sql.Identifier(SCHEMA)
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(s))
    conn.execute(sql.SQL("CREATE TABLE {}.x (uid int, w text)").format(s))
    conn.execute(sql.SQL("INSERT INTO {}.x SELECT i %% %s, 'w' || i FROM generate_series(1, %s) i")
                 .format(s), (keys, x_rows))
    conn.execute(sql.SQL("CREATE INDEX ON {}.x (uid)").format(s))
    conn.execute(sql.SQL("ANALYZE {}.x").format(s))
    spread = "%s::timestamptz + (i %% 5000) * interval '1 millisecond'"
    for t, col, rows, text in (("ld", "v", slice_rows, "v"), ("xd", "w", compensating, "n")):
        table = sql.Identifier(t)
        conn.execute(sql.SQL("CREATE TABLE {}.{} (uid int, {} text, __sign smallint NOT NULL, "
                             "__ts timestamptz NOT NULL)").format(s, table, sql.Identifier(col)))
        conn.execute(sql.SQL("CREATE INDEX ON {}.{} (__ts)").format(s, table))
        conn.execute(sql.SQL("ALTER TABLE {}.{} SET (autovacuum_enabled = false)").format(
            s, table))  # the statistics stay those taken here
        fill = sql.SQL("INSERT INTO {}.{} SELECT i %% %s, %s || i, 1, " + spread +
                       " FROM generate_series(1, %s) i").format(s, table)
        # statistics of a push before, since taken by retention: the slice to come lies past
        # their histogram, which the planner reads as a few rows
        conn.execute(fill, (keys, "o", T0 - timedelta(seconds=60),
                            max(slice_rows, compensating)))
        conn.execute(sql.SQL("ANALYZE {}.{}").format(s, table))
        conn.execute(sql.SQL("DELETE FROM {}.{}").format(s, table))
        conn.execute(fill, (keys, text, T0 + timedelta(milliseconds=1), rows))
        if fresh:  # statistics of these very rows instead
            conn.execute(sql.SQL("ANALYZE {}.{}").format(s, table))
    conn.execute(sql.SQL("CREATE TABLE {}.out (uid int, v text, w text, __sign smallint NOT NULL,"
                         " __ts timestamptz NOT NULL)").format(s))
    stamp(conn, SCHEMA, {"ld": T1, "xd": T1, "x": T0, "out": T0})


def drop_tables(conn: Any) -> None:
    drop_schema(conn, SCHEMA)


def bench_join_plan(topology: Topology, slice_rows: int = 2500, compensating: int = 2500,
                    x_rows: int = 20_000, keys: int = 5000, repeat: int = 5,
                    fresh: bool = False) -> dict[str, Any]:
    dsn = topology.machines[0].dsn
    with connect(dsn, autocommit=True, what="bench") as conn:
        ensure_capture_schema(conn)
        setup_tables(conn, slice_rows, compensating, x_rows, keys, fresh)
    written = sql.SQL("SELECT uid, v, w, __sign, count(*) FROM {}.out GROUP BY 1, 2, 3, 4 "
                      "ORDER BY 1, 2, 3, 4").format(sql.Identifier(SCHEMA))
    try:
        medians, wrote = compare_rules(dsn, {
            "freely": lambda conn: join_delta(conn, spec(), T1, free_plan=True),
            "hashed": lambda conn: join_delta(conn, spec(), T1, free_plan=False)},
            written, repeat)
    finally:
        with connect(dsn, autocommit=True, what="bench") as conn:
            drop_tables(conn)
    free, hashed = medians["freely"], medians["hashed"]
    return {"slice_rows": slice_rows, "compensating_rows": compensating, "x_rows": x_rows,
            "keys": keys, "repeat": repeat, "statistics": "fresh" if fresh else "stale",
            "rows_written": sum(int(r[4]) for r in wrote),
            "planned_freely_ms": round(free * 1000, 1), "hashed_ms": round(hashed * 1000, 1),
            "ratio": round(hashed / free, 3) if free > 0 else None}
