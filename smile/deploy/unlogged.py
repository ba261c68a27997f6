"""Which vertices live in UNLOGGED tables, and making one logged again: a relation a push
can recompute and no consumer reads may (a crash empties it; it is then stale until a push
recomputes it, docs/design/agents.md, *Unlogged relations*); an MV's table must survive a
crash, so a vertex a new sharing takes as its MV is made logged. A delta may when the one
push that reads it can make its loss good (`optimizer.recompute.recoverable`; *Unlogged
deltas*), and is made logged when a new version of the plan gives it other readers.

Must not: create, fill or recompute relations (`install.py`, the operators).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from psycopg import sql

from smile.errors import AgentError
from smile.operators import vertex_ts
from smile.optimizer.plan import Aggregate
from smile.optimizer.recompute import recomputes, recoverable

if TYPE_CHECKING:
    import psycopg

    from smile.deploy.physical import PhysicalPlan, PhysicalVertex
    from smile.optimizer.plan import Vertex

Persistence = Literal["unlogged", "relations", "logged"]
"""Which vertices that may be are installed UNLOGGED: all of them (as plans install them),
the relations only (deltas logged), none (a benchmark's baselines)."""


def may_be_unlogged(phys: PhysicalPlan, v: Vertex) -> bool:
    """Whether vertex `v` may live in an UNLOGGED table (its TS row flagged so, for a Union's
    view): a relation a push can recompute, that no consumer reads (not an MV) — a crash
    empties it, and it is then recomputed like a stale one (docs/design/agents.md,
    *Unlogged relations*); a delta whose loss the push that reads it makes good
    (`recoverable`, *Unlogged deltas*)."""
    if v.is_delta:
        return recoverable(phys.plan, v)
    return (v in recomputes(phys.plan) and v not in {s.mv for s in phys.plan.sharings}
            and not isinstance(phys.incoming(v), Aggregate))


def relog_deltas(conn: psycopg.Connection[Any], phys: PhysicalPlan, machine: str) -> int:
    """Make logged the unlogged deltas of `machine` that `phys`, a new version of the plan,
    no longer lets be (another sharing reads below them now): their loss could no longer be
    made good by one push. AgentError, changing nothing, while one of them is stale — a
    crash emptied it and its sharing's next push has not yet recovered it (that push
    cannot once others read it): the deploy is to be tried again after that push. How many
    were made logged."""
    if not vertex_ts.exists(conn):
        return 0
    flagged = {k for (k,) in conn.execute(
        f"SELECT vertex FROM {vertex_ts.TABLE} WHERE unlogged").fetchall()}
    relog = [pv for v, pv in phys.vertices.items() if v.machine == machine and v.is_delta
             and pv.ts_key in flagged and not may_be_unlogged(phys, v)]
    lost = sorted(pv.ts_key for pv in relog if vertex_ts.is_stale(conn, pv.ts_key))
    if lost:
        raise AgentError(f"{', '.join(lost)} lost rows in a crash on {machine} and are "
                         "recovered by their sharing's next push, which this plan change "
                         "would prevent: try again once it has run")
    with conn.transaction():
        for pv in relog:
            if persistence(conn, pv.table) == "u":
                conn.execute(sql.SQL("ALTER TABLE {} SET LOGGED").format(
                    sql.Identifier(*pv.table)))
        vertex_ts.set_unlogged(conn, [pv.ts_key for pv in relog], False)
    return len(relog)


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
