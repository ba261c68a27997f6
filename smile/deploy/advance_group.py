"""Advance the MVs of a consistent group to one timestamp in one transaction — the body of an
agent's PUSH with `together` (docs/design/groups.md).

Every MV's step (its DeltaToRel, or the Aggregate that keeps it) is the operator a PUSH of it
alone runs (`advance.advance_vertex`), each in a savepoint of one transaction on the MV
machine: the operators open their transaction with `conn.transaction()`, which inside an open
one is a savepoint, so their contents and TS rows commit together, once. The TS rows of all
of them are locked first, in label order (two group pushes cannot deadlock), and every MV
must be below the target or at it: a group's MVs are at one TS after each push, and a
consumer's snapshot, which sees the transaction whole or not at all, finds them there.

Must not: decide what to push; advance anything but relation vertices of its own machine
whose step reads only that machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.deploy.advance import advance_vertex
from smile.errors import AgentError
from smile.operators import vertex_ts
from smile.optimizer.plan import Aggregate, DeltaToRel

if TYPE_CHECKING:
    from datetime import datetime

    import psycopg

    from smile.deploy.physical import PhysicalPlan
    from smile.optimizer.plan import Vertex


@dataclass(frozen=True)
class Together:
    """What a group's push did: per vertex (label, seconds, rows in, rows out), and the span
    of the first one (the TS the MVs went from and to)."""

    parts: tuple[tuple[str, float, int, int], ...]
    span: tuple[datetime, datetime] | None


def advance_together(conns: dict[str, psycopg.Connection[Any]], phys: PhysicalPlan,
                     machine: str, vertices: list[Vertex], t: datetime) -> Together:
    """Advance `vertices` (MVs on `machine`) to `t` in one transaction on it."""
    conn = conns[machine]
    for v in vertices:
        e = phys.incoming(v)
        if v.machine != machine or not isinstance(e, (DeltaToRel, Aggregate)):
            raise AgentError(f"{v.label}: a group's push advances MVs of {machine} only")
    ordered = sorted(set(vertices), key=lambda v: v.label)
    parts: list[tuple[str, float, int, int]] = []
    span = None
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")  # as each step alone would
        have = {v.label: vertex_ts.lock(conn, phys.vertices[v].ts_key) for v in ordered}
        ahead = {label: ts for label, ts in have.items() if ts > t}
        if ahead:
            raise AgentError(f"the group's MVs are not behind {t.isoformat()}: "
                             + ", ".join(f"{k} at {ts.isoformat()}" for k, ts in ahead.items()))
        for v in vertices:
            started = time.perf_counter()
            moved = advance_vertex(conns, phys, v, t)
            _drop_step_tables(conn)
            parts.append((v.label, round(time.perf_counter() - started, 6), moved.rows_in,
                          moved.rows_out))
            if span is None:
                span = moved.span
    return Together(tuple(parts), span)


def _drop_step_tables(conn: psycopg.Connection[Any]) -> None:
    """Drop the temporary tables a step left to its commit (`ON COMMIT DROP`): the next step,
    in the same transaction, makes tables of the same names."""
    names = [r[0] for r in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = pg_my_temp_schema() "
        "AND relkind = 'r' AND relname LIKE '\\_\\_%'").fetchall()]
    if names:
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.SQL(", ").join(
            sql.Identifier("pg_temp", n) for n in names)))
