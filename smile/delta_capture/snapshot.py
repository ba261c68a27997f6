"""The exact first contents of a shadow copy R̂ (docs/design/semantics.md §3).

A temporary logical slot is created with an exported snapshot; its consistent point `L` is after
the relation joined the publication. R̂ is filled from R under that snapshot, and in the same
transaction TS(R̂) = TS(ΔR) = T0 (the source's clock, read after `L`) and the relation is marked
'streaming' from `L`: the capturer keeps R's changes of transactions committing at or after `L`
(all stamped after T0) and drops earlier ones, so there is no gap and no overlap. Closing the
replication connection drops the temporary slot.

Must not: stream changes or touch the main slot.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import psycopg2
import psycopg2.extras
from psycopg import sql

from smile.db import SYNC_COMMIT
from smile.delta_capture.decode import parse_lsn
from smile.errors import CaptureError
from smile.operators import vertex_ts

T = TypeVar("T")

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from smile.delta_capture.registry import CapturedRelation


def copy_under_exported_snapshot(dsn: str, rel: CapturedRelation) -> tuple[int, datetime]:
    """Fill R̂ exactly; returns (L, T0)."""
    found: list[int] = []

    def fill(conn: psycopg.Connection[Any], lsn: str) -> datetime:
        found.append(parse_lsn(lsn))
        return _copy(conn, rel, lsn)

    t0 = under_exported_snapshot(dsn, rel, fill)
    return found[0], t0


def under_exported_snapshot(dsn: str, rel: CapturedRelation,
                            body: Callable[[psycopg.Connection[Any], str], T]) -> T:
    """Run `body(conn, L)` in one repeatable-read transaction under the snapshot a temporary
    logical slot exports at its consistent point `L` (also `resync.py`'s way in)."""
    tmp_slot = f"smile_snap_{rel.relid}_{secrets.token_hex(3)}"
    try:
        rconn = psycopg2.connect(
            dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection
        )
    except psycopg2.Error as exc:
        raise CaptureError(f"cannot open a replication connection: {exc}",
                           sqlstate=exc.pgcode) from exc
    try:
        with rconn.cursor() as rcur:
            rcur.execute(
                f"CREATE_REPLICATION_SLOT {tmp_slot} TEMPORARY LOGICAL pgoutput "
                "(SNAPSHOT 'export')"
            )
            row = rcur.fetchone()
            if row is None:
                raise CaptureError("CREATE_REPLICATION_SLOT returned nothing")
            _slot, consistent_point, snapshot_name, _plugin = row
            with psycopg.connect(dsn, options=SYNC_COMMIT) as conn:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                with conn.transaction():
                    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(
                        sql.Literal(snapshot_name)))
                    return body(conn, consistent_point)
    except psycopg2.Error as exc:
        raise CaptureError(f"snapshot of {rel.qualified} failed: {exc}",
                           sqlstate=exc.pgcode) from exc
    except psycopg.Error as exc:
        raise CaptureError(f"working on {rel.qualified} under its snapshot failed: {exc}",
                           sqlstate=exc.sqlstate) from exc
    finally:
        rconn.close()  # drops the temporary slot


def _copy(conn: psycopg.Connection[Any], rel: CapturedRelation, start_lsn: str) -> datetime:
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in rel.column_names)
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    t0: datetime = row[0]
    conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
        sql.Identifier("_smile", rel.shadow_table), cols, cols,
        sql.Identifier(rel.schema, rel.table)))
    vertex_ts.put(conn, {rel.delta_vertex: t0, rel.shadow_vertex: t0}, on_conflict="replace")
    conn.execute(
        "UPDATE _smile.captured_relations SET state = 'streaming', "
        "start_lsn = %s::pg_lsn, start_ts = %s WHERE relid = %s",
        (start_lsn, t0, rel.relid),
    )
    return t0
