"""`smile bench skewed-mv`: DeltaToRel into an MV of a skewed join, indexed on its join key
against indexed on its most distinct column (as MVs are), in the same run.

The MV has the shape of Table 1's `loc ⋈ tweets`: user u has ⌊tweets/u⌋ tweets and ⌊places/u⌋
places (at least one of each; 5000 and 100 by default), every tweet once per place, so a busy
user holds hundreds of rows per tweet and a large share of the MV. The push applies an edit of
one of user 1's tweets (its rows leave and come back changed), a deletion of one of user 2's,
and `inserts` new rows.
The same push runs on two copies of the MV — one indexed on `uid`, one on the column
`probes.most_distinct` picks — each in a transaction rolled back afterwards, `repeat` times;
figures are medians. On the second it also runs without splitting the slice
(`split=False`: every row of the slice grouped to net the 150 leaving, `all_rows_netted_ms`;
`split_ratio` is the push as pushes run it — split where `delta_to_rel._splits` says so, so
not under 1,000 rows — ÷ that). All must leave the same bag (checked).

Must not: leave its schema or vertex timestamps behind.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.bench.rolled_back import compare_rules, drop_schema, stamp
from smile.db import connect
from smile.delta_capture.registry import ensure_capture_schema
from smile.operators.delta_to_rel import delta_to_rel
from smile.operators.probes import most_distinct

if TYPE_CHECKING:
    import psycopg

    from smile.topology import Topology

SCHEMA = "smile_bench_skew"
COLUMNS = ["uid", "place", "tid", "text"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
_SETUP = (
    ("CREATE SCHEMA {s}", False),
    ("CREATE TABLE {s}.by_key (uid int, place text, tid bigint, text text) "
     "WITH (fillfactor = 90)", False),
    # user u: ⌊tweets/u⌋ tweets, each once per each of ⌊places/u⌋ places
    ("INSERT INTO {s}.by_key SELECT u, 'city' || l, u * 100000 + t, 'tweet ' || "
     "(u * 100000 + t) FROM generate_series(1, %(users)s) u, "
     "generate_series(1, greatest(1, %(tweets)s / u)) t, "
     "generate_series(1, greatest(1, %(places)s / u)) l", True),
    ("CREATE TABLE {s}.by_best WITH (fillfactor = 90) AS SELECT * FROM {s}.by_key", False),
    ("CREATE TABLE {s}.d (uid int, place text, tid bigint, text text, __sign smallint, "
     "__ts timestamptz)", False),
    # an edit of one of user 1's tweets, a deletion of one of user 2's, and new rows
    ("INSERT INTO {s}.d SELECT 1, 'city' || l, 100007, 'tweet 100007', -1, %(t)s"
     " FROM generate_series(1, 100) l"
     " UNION ALL SELECT 1, 'city' || l, 100007, 'edited', 1, %(t)s"
     " FROM generate_series(1, 100) l"
     " UNION ALL SELECT 2, 'city' || l, 200003, 'tweet 200003', -1, %(t)s"
     " FROM generate_series(1, 50) l"
     " UNION ALL SELECT 1 + i %% %(users)s, 'city1', 900000000 + i, 'new', 1, %(t)s"
     " FROM generate_series(1, %(inserts)s) i", True),
    ("ANALYZE {s}.by_key", False), ("ANALYZE {s}.by_best", False), ("ANALYZE {s}.d", False),
)
"""The two MVs (the same rows) and the delta, statement by statement, and whether each takes
the benchmark's figures."""


def _setup(conn: psycopg.Connection[Any], figures: dict[str, Any]) -> str:
    """The two MVs and the delta, indexed, and their vertices' timestamps; returns the column
    the second one is indexed on."""
    s = sql.Identifier(SCHEMA)
    drop_schema(conn, SCHEMA)
    for statement, takes in _SETUP:
        conn.execute(sql.SQL(statement).format(s=s), figures if takes else None)
    best = most_distinct(conn, (SCHEMA, "by_best"), COLUMNS) or "uid"
    conn.execute(sql.SQL("CREATE INDEX ON {}.by_key (uid)").format(s))
    conn.execute(sql.SQL("CREATE INDEX ON {}.by_best ({})").format(s, sql.Identifier(best)))
    stamp(conn, SCHEMA, {"by_key": T0, "by_best": T0, "d": T1})
    return best


def _push(conn: psycopg.Connection[Any], table: str, probe: str,
          split: bool | None = None) -> None:
    delta_to_rel(conn, delta=(SCHEMA, "d"), rel=(SCHEMA, table), columns=COLUMNS,
                 rel_vertex=f"{SCHEMA}:{table}", delta_vertex=f"{SCHEMA}:d", to_ts=T1,
                 probe=probe, split=split)


def _bag(table: str) -> sql.Composed:
    """What a push leaves of the rows it touched in `table`."""
    return sql.SQL(
        "SELECT uid, place, tid, text, count(*) FROM {}.{} WHERE uid <= 2 OR tid >= 900000000"
        " GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4").format(
            sql.Identifier(SCHEMA), sql.Identifier(table))


def bench_skewed_mv(topology: Topology, users: int = 3000, inserts: int = 5000,
                    repeat: int = 5, tweets: int = 5000, places: int = 100) -> dict[str, Any]:
    dsn = topology.machines[0].dsn
    with connect(dsn, autocommit=True, what="bench") as conn:
        ensure_capture_schema(conn)
        best = _setup(conn, {"users": users, "inserts": inserts, "tweets": tweets,
                             "places": places, "t": T1})
        rows = conn.execute(sql.SQL("SELECT count(*) FROM {}.by_key").format(
            sql.Identifier(SCHEMA))).fetchone()
    try:  # the same push three ways; all must leave the same bag
        times, _ = compare_rules(dsn, {
            "by_key": functools.partial(_push, table="by_key", probe="uid"),
            "by_best": functools.partial(_push, table="by_best", probe=best),
            "unsplit": functools.partial(_push, table="by_best", probe=best, split=False)},
            {"by_key": _bag("by_key"), "by_best": _bag("by_best"),
             "unsplit": _bag("by_best")}, repeat)
    finally:
        with connect(dsn, autocommit=True, what="bench") as conn:
            drop_schema(conn, SCHEMA)
    key, mine, whole = times["by_key"], times["by_best"], times["unsplit"]
    return {"mv_rows": int(rows[0]) if rows else 0, "rows_arriving": inserts + 100,
            "rows_leaving": 150, "repeat": repeat, "index_column": best,
            "join_key_index_ms": round(key * 1000, 1),
            "most_distinct_index_ms": round(mine * 1000, 1),
            "ratio": round(mine / key, 3) if key > 0 else None,
            "all_rows_netted_ms": round(whole * 1000, 1),
            "split_ratio": round(mine / whole, 3) if whole > 0 else None}
