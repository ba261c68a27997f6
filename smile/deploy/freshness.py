"""Staleness in SQL: on each machine that holds MVs, the view `smile_mv.freshness (name, ts,
staleness_s, sla_s, "group")` — one row per sharing whose MV is there and whose view the
reading role may SELECT, so a consumer's role sees its own sharings only (an admin's
superuser sees all).

`ts` is TS(MV) as stored beside the MV's contents, so a transaction that reads the MV and the
view sees the two agree; `staleness_s` is the machine's clock at the start of that
transaction (`now()`) against it — the auditor holds TS(MV) against the sources' clocks, which
on one host (or NTP-synchronised hosts) is the same reading. `"group"` is NULL: a sharing in
no consistent group.

What the view needs beyond the vertex timestamps is in `_smile.mv_freshness (name, vertex,
sla_s, grp)`, a row per sharing written when it is admitted (`register`) and removed at its
withdrawal (`unregister`); the view filters by `has_table_privilege` on `smile_mv.<name>`,
which the consumer's grant gives (`roles.grant_reader`).

Must not: decide who may read what (the grants on the MVs' views do); compose SQL from
strings: identifiers go through `psycopg.sql`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import connect
from smile.deploy.install import MV_SCHEMA
from smile.deploy.roles import role_name
from smile.operators import vertex_ts

if TYPE_CHECKING:
    import psycopg

VIEW = "freshness"
REGISTRY = "_smile.mv_freshness"


def ensure(conn: psycopg.Connection[Any]) -> None:
    """The registry and the view (idempotent; a superuser session in autocommit)."""
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(MV_SCHEMA)))
    conn.execute(f"CREATE TABLE IF NOT EXISTS {REGISTRY} (name text PRIMARY KEY, "
                 "vertex text NOT NULL, sla_s float8 NOT NULL, grp text)")
    conn.execute(sql.SQL(
        "CREATE OR REPLACE VIEW {view} (name, ts, staleness_s, sla_s, \"group\") AS "
        "SELECT f.name, v.ts, extract(epoch FROM now() - v.ts)::float8, f.sla_s, f.grp "
        "FROM {registry} f JOIN {ts_table} v ON v.vertex = f.vertex "
        "WHERE has_table_privilege(to_regclass(format('%I.%I', {schema}, f.name)), "
        "'SELECT') IS TRUE").format(
        view=sql.Identifier(MV_SCHEMA, VIEW), registry=sql.SQL(REGISTRY),
        ts_table=sql.SQL(vertex_ts.TABLE), schema=sql.Literal(MV_SCHEMA)))


def register(dsn: str, name: str, vertex: str, sla_s: float, consumer: str | None,
             group: str | None = None) -> None:
    """Sharing `name`'s MV (vertex key `vertex` in the TS table) is on the machine of `dsn`
    (SMILE's own DSN of it): its row in the view, readable by `consumer`'s role."""
    with connect(dsn, autocommit=True, what="the MV's machine") as conn:
        ensure(conn)
        conn.execute(f"INSERT INTO {REGISTRY} (name, vertex, sla_s, grp) "
                     "VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                     "vertex = excluded.vertex, sla_s = excluded.sla_s, grp = excluded.grp",
                     (name, vertex, sla_s, group))
        if consumer is not None:
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(
                sql.Identifier(MV_SCHEMA, VIEW), sql.Identifier(role_name(consumer))))


def unregister(dsn: str, name: str) -> None:
    """Sharing `name` is withdrawn: its row goes from the view of the machine of `dsn`."""
    with connect(dsn, autocommit=True, what="the MV's machine") as conn:
        if conn.execute("SELECT to_regclass(%s)", (REGISTRY,)).fetchone() != (None,):
            conn.execute(f"DELETE FROM {REGISTRY} WHERE name = %s", (name,))
