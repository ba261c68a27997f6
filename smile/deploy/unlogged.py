"""Which relations live in UNLOGGED tables, and making one logged again: a relation a push
can recompute and no consumer reads may (a crash empties it; it is then stale until a push
recomputes it, docs/design/agents.md, *Unlogged relations*); an MV's table must survive a
crash, so a vertex a new sharing takes as its MV is made logged.

Must not: create, fill or recompute relations (`install.py`, the operators).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.operators import vertex_ts
from smile.optimizer.plan import Aggregate
from smile.optimizer.recompute import recomputes

if TYPE_CHECKING:
    import psycopg

    from smile.deploy.physical import PhysicalPlan, PhysicalVertex
    from smile.optimizer.plan import Vertex


def may_be_unlogged(phys: PhysicalPlan, v: Vertex) -> bool:
    """Whether relation `v` may live in an UNLOGGED table: one a push can recompute, that no
    consumer reads (not an MV) — a crash empties it, and it is then recomputed like a stale
    one (docs/design/agents.md, *Unlogged relations*)."""
    return (not v.is_delta and v in recomputes(phys.plan)
            and v not in {s.mv for s in phys.plan.sharings}
            and not isinstance(phys.incoming(v), Aggregate))


def persistence(conn: psycopg.Connection[Any], table: tuple[str, str]) -> str | None:
    """`pg_class.relpersistence` of `table` ('p' logged, 'u' unlogged; None: no such table)."""
    row = conn.execute("SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass(%s)",
                       (sql.Identifier(*table).as_string(conn),)).fetchone()
    return str(row[0]) if row else None


def keep_logged(conn: psycopg.Connection[Any], pv: PhysicalVertex) -> None:
    """Make an MV's table logged if it was an unlogged relation (a vertex a new sharing
    takes as its MV): a consumer's relation must survive a crash. Emptied by one already, it
    stays stale (marked first) until recomputed."""
    if persistence(conn, pv.table) != "u":
        return
    with conn.transaction():
        vertex_ts.settle_reset(conn)
        conn.execute(sql.SQL("ALTER TABLE {} SET LOGGED").format(sql.Identifier(*pv.table)))
        vertex_ts.set_unlogged(conn, [pv.ts_key], False)
