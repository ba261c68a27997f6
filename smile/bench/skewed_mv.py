"""`smile bench skewed-mv`: DeltaToRel into an MV of a skewed join, indexed on its join key (as
MVs were) against indexed on its most distinct column (as they are), in the same run.

The MV has the shape of Table 1's `loc ⋈ tweets`: user u has ⌊tweets/u⌋ tweets and ⌊places/u⌋
places (at least one of each; 5000 and 100 by default), every tweet once per place, so a busy
user holds hundreds of rows per tweet and a large share of the MV. The push applies an edit of
one of user 1's tweets (its rows leave and come back changed), a deletion of one of user 2's,
and `inserts` new rows.
The same push runs on two copies of the MV — one indexed on `uid`, one on the column
`probes.most_distinct` picks — each in a transaction rolled back afterwards, `repeat` times;
figures are medians. On the second it also runs as DeltaToRel did before it split a slice
(`split=False`: every row of the slice grouped to net the 150 leaving, `all_rows_netted_ms`;
`split_ratio` is the push as pushes run it — split where `delta_to_rel._splits` says so, so
not under 1,000 rows — ÷ that). All must leave the same bag (checked).

Must not: leave its schema or vertex timestamps behind.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import connect
from smile.delta_capture.registry import ensure_capture_schema
from smile.operators.delta_to_rel import delta_to_rel
from smile.operators.probes import most_distinct

if TYPE_CHECKING:
    from smile.topology import Topology

SCHEMA = "smile_bench_skew"
COLUMNS = ["uid", "place", "tid", "text"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)


def _setup(conn: Any, users: int, inserts: int, tweets: int, places: int) -> str:
    """The two MVs and the delta; returns the column the second one is indexed on."""
    s = sql.Identifier(SCHEMA)
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(s))
    conn.execute(sql.SQL("CREATE TABLE {}.by_key (uid int, place text, tid bigint, text text) "
                         "WITH (fillfactor = 90)").format(s))
    conn.execute(sql.SQL(
        "INSERT INTO {}.by_key SELECT u, 'city' || l, u * 100000 + t, 'tweet ' || "
        "(u * 100000 + t) FROM generate_series(1, %s) u, "
        "generate_series(1, greatest(1, %s / u)) t, generate_series(1, greatest(1, %s / u)) l"
    ).format(s), (users, tweets, places))
    conn.execute(sql.SQL("CREATE TABLE {0}.by_best WITH (fillfactor = 90) AS "
                         "SELECT * FROM {0}.by_key").format(s))
    conn.execute(sql.SQL("CREATE TABLE {}.d (uid int, place text, tid bigint, text text, "
                         "__sign smallint, __ts timestamptz)").format(s))
    conn.execute(sql.SQL(
        "INSERT INTO {}.d SELECT 1, 'city' || l, 100007, 'tweet 100007', -1, %(t)s"
        " FROM generate_series(1, 100) l"
        " UNION ALL SELECT 1, 'city' || l, 100007, 'edited', 1, %(t)s"
        " FROM generate_series(1, 100) l"
        " UNION ALL SELECT 2, 'city' || l, 200003, 'tweet 200003', -1, %(t)s"
        " FROM generate_series(1, 50) l"
        " UNION ALL SELECT 1 + i %% %(users)s, 'city1', 900000000 + i, 'new', 1, %(t)s"
        " FROM generate_series(1, %(inserts)s) i").format(s),
        {"t": T1, "users": users, "inserts": inserts})
    for t in ("by_key", "by_best", "d"):
        conn.execute(sql.SQL("ANALYZE {}.{}").format(s, sql.Identifier(t)))
    best = most_distinct(conn, (SCHEMA, "by_best"), COLUMNS) or "uid"
    conn.execute(sql.SQL("CREATE INDEX ON {}.by_key (uid)").format(s))
    conn.execute(sql.SQL("CREATE INDEX ON {}.by_best ({})").format(s, sql.Identifier(best)))
    return best


def _push(dsn: str, table: str, probe: str, split: bool | None = None
          ) -> tuple[float, list[Any]]:
    """One push into `table`, rolled back; (seconds, the bag it left)."""
    with connect(dsn, what="bench") as conn:
        conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s), (%s, %s) ON CONFLICT "
                     "(vertex) DO UPDATE SET ts = excluded.ts",
                     (f"{SCHEMA}:{table}", T0, f"{SCHEMA}:d", T1))
        start = time.perf_counter()
        delta_to_rel(conn, delta=(SCHEMA, "d"), rel=(SCHEMA, table), columns=COLUMNS,
                     rel_vertex=f"{SCHEMA}:{table}", delta_vertex=f"{SCHEMA}:d", to_ts=T1,
                     probe=probe, split=split)
        seconds = time.perf_counter() - start
        bag = conn.execute(sql.SQL(
            "SELECT uid, place, tid, text, count(*) FROM {}.{} WHERE uid <= 2 OR tid >= 900000000"
            " GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4").format(
                sql.Identifier(SCHEMA), sql.Identifier(table))).fetchall()
        conn.rollback()
    return seconds, bag


def bench_skewed_mv(topology: Topology, users: int = 3000, inserts: int = 5000,
                    repeat: int = 5, tweets: int = 5000, places: int = 100) -> dict[str, Any]:
    dsn = topology.machines[0].dsn
    with connect(dsn, autocommit=True, what="bench") as conn:
        ensure_capture_schema(conn)
        best = _setup(conn, users, inserts, tweets, places)
        rows = conn.execute(sql.SQL("SELECT count(*) FROM {}.by_key").format(
            sql.Identifier(SCHEMA))).fetchone()
    try:
        times: dict[str, list[float]] = {"by_key": [], "by_best": [], "unsplit": []}
        bags = {}
        for _ in range(repeat):
            for name, table, probe, split in (("by_key", "by_key", "uid", None),
                                              ("by_best", "by_best", best, None),
                                              ("unsplit", "by_best", best, False)):
                seconds, bags[name] = _push(dsn, table, probe, split)
                times[name].append(seconds)
        if not bags["by_key"] == bags["by_best"] == bags["unsplit"]:
            raise AssertionError("the MVs differ after the same push")
    finally:
        with connect(dsn, autocommit=True, what="bench") as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(SCHEMA)))
            conn.execute("DELETE FROM _smile.vertex_ts WHERE vertex LIKE %s", (f"{SCHEMA}:%",))
    key, mine = statistics.median(times["by_key"]), statistics.median(times["by_best"])
    whole = statistics.median(times["unsplit"])
    return {"mv_rows": int(rows[0]) if rows else 0, "rows_arriving": inserts + 100,
            "rows_leaving": 150, "repeat": repeat, "index_column": best,
            "join_key_index_ms": round(key * 1000, 1),
            "most_distinct_index_ms": round(mine * 1000, 1),
            "ratio": round(mine / key, 3) if key > 0 else None,
            "all_rows_netted_ms": round(whole * 1000, 1),
            "split_ratio": round(mine / whole, 3) if whole > 0 else None}
