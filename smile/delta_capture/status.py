"""What capture looks like on a machine: per relation its state, watermark, lag and counts, and
the WAL its slot holds back. A capturer that falls behind says so here: its lag in seconds (the
source's clock against the watermark), in bytes of WAL, and in transactions (those begun on the
machine since the last one captured, SMILE's own target transactions included, so an idle
machine shows one or two).

Must not: change anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import connect
from smile.delta_capture.registry import SLOT
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from datetime import datetime


@dataclass(frozen=True)
class RelationStatus:
    machine: str
    relation: str
    state: str
    """'snapshotting', 'streaming' or 'error'."""
    watermark: datetime | None
    lag_s: float | None
    lag_bytes: int | None
    rows_captured: int
    delta_rows: int
    error: str | None
    resynced_at: datetime | None = None
    """When capture last re-synchronised ΔR from a snapshot after its slot was invalidated."""
    lag_txns: int | None = None
    """Transactions begun on the machine since the last one captured."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["watermark"] = self.watermark.isoformat() if self.watermark else None
        out["resynced_at"] = self.resynced_at.isoformat() if self.resynced_at else None
        return out


@dataclass(frozen=True)
class SlotStatus:
    machine: str
    slot: str
    active: bool
    wal_status: str
    """'reserved', 'extended', 'unreserved' or 'lost' (then capture re-synchronises)."""
    retained_wal_bytes: int
    confirmed_lag_bytes: int


def capture_status(machine: str, dsn: str) -> tuple[list[RelationStatus], SlotStatus | None]:
    with connect(dsn, autocommit=True, what=machine) as conn:
        has_schema = conn.execute("SELECT to_regclass('_smile.captured_relations')").fetchone()
        if not has_schema or has_schema[0] is None:
            return [], None
        rows = conn.execute(sql.SQL(
            "SELECT r.schema_name || '.' || r.table_name, r.state, s.error, v.ts, "
            "  extract(epoch FROM clock_timestamp() - v.ts)::float8, "
            "  pg_wal_lsn_diff(pg_current_wal_lsn(), p.end_lsn)::bigint, "
            "  coalesce(s.rows_captured, 0), coalesce(c.reltuples, 0)::bigint, "
            "  s.resynced_at, "
            "  (pg_snapshot_xmax(pg_current_snapshot())::text::bigint %% 4294967296 "
            "   - p.last_xid - 1 + 4294967296) %% 4294967296 "
            "FROM _smile.captured_relations r "
            "LEFT JOIN _smile.capture_state s ON s.relid = r.relid "
            "LEFT JOIN {vertex_ts} v ON v.vertex = 'delta:' || r.schema_name || '.' || "
            "  r.table_name "
            "LEFT JOIN _smile.capture_progress p ON p.slot = %s "
            "LEFT JOIN pg_class c ON c.oid = ('_smile.' || quote_ident(r.delta_table))::regclass "
            "ORDER BY 1").format(vertex_ts=sql.SQL(vertex_ts.TABLE)),
            (SLOT,),
        ).fetchall()
        slot = conn.execute(
            "SELECT active, coalesce(wal_status, ''), "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint "
            "FROM pg_replication_slots WHERE slot_name = %s", (SLOT,),
        ).fetchone()
    rels = [
        RelationStatus(
            machine=machine, relation=r[0], state="error" if r[2] else r[1], watermark=r[3],
            lag_s=r[4], lag_bytes=r[5], rows_captured=int(r[6]), delta_rows=max(0, int(r[7])),
            error=r[2], resynced_at=r[8], lag_txns=None if r[9] is None else int(r[9]),
        )
        for r in rows
    ]
    slot_status = (
        SlotStatus(machine, SLOT, bool(slot[0]), str(slot[1]), int(slot[2] or 0),
                   int(slot[3] or 0))
        if slot else None
    )
    return rels, slot_status
