"""`smile bench busy-key-join`: one Join push where a busy key meets many updates of a column
the join does not read — Table 1's `Δ(… tweets …) ⋈ users`, a user who tweets much and whose
follower count changes often — with the other side's delta consolidated before the join (as
joins run: the − and + of each such UPDATE cancel) against joined row by row
(`consolidate_other=False`), in the same run.

The shape: X (`users`: uid, name, followers) with `users` rows, the join reading uid and name;
a driving slice of `slice_rows` rows, `busy_share` of them the busy user's; `updates` UPDATEs
of the busy user's follower count in X's delta (a − and a + row each, at one timestamp),
spread over the push's interval, X̂ halfway through it, so that some are backed out of X̂ and
the rest come after it. Row by row, each of those rows meets every busy driving row of its
side of X̂'s time; consolidated, none does. `inserts`: rows of new users in X's delta besides,
which nothing cancels — what consolidating costs where it saves nothing (`--updates 0
--inserts 60000 --slice 500`: a push of a few driving rows over a full slice of X's delta).
Each push runs in a transaction rolled back afterwards, `repeat` times per rule; figures are
medians. Both rules must write the same rows (checked).

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

SCHEMA = "smile_bench_busy"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(seconds=30)
MID = T0 + timedelta(seconds=15)
"""TS(X̂): the updates before it are backed out of X̂, those after it added."""


def spec() -> JoinSpec:
    """Δ(Δt ⋈ u) on uid, the driving delta on the left; u's `followers` is not read."""
    ts = {("t", "uid"): "uid", ("t", "tid"): "tid"}
    us = {("u", "uid"): "uid", ("u", "name"): "name", ("u", "followers"): "followers"}
    return JoinSpec(Side((SCHEMA, "td"), f"{SCHEMA}:td", ts),
                    Side((SCHEMA, "u"), f"{SCHEMA}:u", us),
                    Side((SCHEMA, "ud"), f"{SCHEMA}:ud", us), (SCHEMA, "out"), f"{SCHEMA}:out",
                    ((("t", "uid"), ("u", "uid")),),
                    ((("t", "tid"), "tid"), (("t", "uid"), "uid"), (("u", "name"), "name")),
                    "left")


def setup_tables(conn: Any, slice_rows: int, busy_share: float, updates: int,
                 users: int, inserts: int = 0) -> None:
    """X and X̂ (uid 0 the busy user), the two deltas, the destination, the timestamps."""
    s = sql.Identifier(SCHEMA)
    span_ms = (T1 - T0) / timedelta(milliseconds=1)
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(s))
    conn.execute(sql.SQL("CREATE TABLE {}.u (uid int, name text, followers int)").format(s))
    conn.execute(sql.SQL("INSERT INTO {}.u SELECT i, 'user' || i, %s FROM generate_series(0, %s) i")
                 .format(s), (updates // 2, users - 1))
    conn.execute(sql.SQL("CREATE INDEX ON {}.u (uid)").format(s))
    for t, cols in (("td", "uid int, tid int"), ("ud", "uid int, name text, followers int")):
        conn.execute(sql.SQL(f"CREATE TABLE {{}}.{{}} ({cols}, __sign smallint NOT NULL, "
                             "__ts timestamptz NOT NULL)").format(s, sql.Identifier(t)))
        conn.execute(sql.SQL("CREATE INDEX ON {}.{} (__ts)").format(s, sql.Identifier(t)))
    busy = round(slice_rows * busy_share)
    # driving rows spread over (T0, T1]: the first `busy` of them the busy user's
    conn.execute(sql.SQL(
        "INSERT INTO {}.td SELECT CASE WHEN i <= %s THEN 0 ELSE 1 + i %% (%s - 1) END, i, 1, "
        "%s::timestamptz + ((i * 7919) %% %s + 1) * interval '1 millisecond' "
        "FROM generate_series(1, %s) i").format(s),
        (busy, max(users, 2), T0, int(span_ms), slice_rows))
    # the busy user's follower count: j-1 → j at the j-th of `updates` moments
    conn.execute(sql.SQL(
        "INSERT INTO {}.ud SELECT 0, 'user0', j - 1 + (s + 1) / 2, s, %s::timestamptz + "
        "(j * %s / (%s + 1) + 1) * interval '1 millisecond' "
        "FROM generate_series(1, %s) j, (VALUES (-1), (1)) v(s)").format(s),
        (T0, int(span_ms), updates, updates))
    # new users (ids past X's), each arriving once over the interval
    conn.execute(sql.SQL(
        "INSERT INTO {}.ud SELECT %s + i, 'user' || (%s + i), 0, 1, %s::timestamptz + "
        "((i * 7919) %% %s + 1) * interval '1 millisecond' FROM generate_series(1, %s) i"
    ).format(s), (users, users, T0, int(span_ms), inserts))
    for t in ("u", "td", "ud"):
        conn.execute(sql.SQL("ANALYZE {}.{}").format(s, sql.Identifier(t)))
    conn.execute(sql.SQL("CREATE TABLE {}.out (tid int, uid int, name text, "
                         "__sign smallint NOT NULL, __ts timestamptz NOT NULL)").format(s))
    stamp(conn, SCHEMA, {"td": T1, "ud": T1, "u": MID, "out": T0})


def bench_busy_key_join(topology: Topology, slice_rows: int = 20_000, busy_share: float = 0.5,
                        updates: int = 100, users: int = 5000, repeat: int = 5,
                        inserts: int = 0) -> dict[str, Any]:
    dsn = topology.machines[0].dsn
    with connect(dsn, autocommit=True, what="bench") as conn:
        ensure_capture_schema(conn)
        setup_tables(conn, slice_rows, busy_share, updates, users, inserts)
    written = sql.SQL("SELECT tid, uid, name, __sign, __ts, count(*) FROM {}.out "
                      "GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5").format(
        sql.Identifier(SCHEMA))
    try:
        medians, wrote = compare_rules(dsn, {
            "row_by_row": lambda conn: join_delta(conn, spec(), T1, consolidate_other=False),
            "consolidated": lambda conn: join_delta(conn, spec(), T1)}, written, repeat)
    finally:
        with connect(dsn, autocommit=True, what="bench") as conn:
            drop_schema(conn, SCHEMA)
    row_by_row, consolidated = medians["row_by_row"], medians["consolidated"]
    return {"slice_rows": slice_rows, "busy_rows": round(slice_rows * busy_share),
            "updates": updates, "inserts": inserts, "users": users, "repeat": repeat,
            "rows_written": sum(int(r[5]) for r in wrote),
            "row_by_row_ms": round(row_by_row * 1000, 1),
            "consolidated_ms": round(consolidated * 1000, 1),
            "ratio": round(consolidated / row_by_row, 3) if row_by_row > 0 else None}
