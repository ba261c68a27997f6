"""Recovery of a machine whose replication slot PostgreSQL invalidated.

`max_slot_wal_keep_size` bounds the WAL a slot may hold back: a capturer that stays away too
long (stopped, or far behind) loses its slot — `wal_status = 'lost'` — and the changes in the
WAL it did not read are gone. They are not gone from the relations, though: for each captured
relation R, what ΔR lacks is exactly the difference between R now and R as of ΔR's watermark
W (R̂ rolled forward with ΔR up to W, docs/design/semantics.md §3). So the capturer, before it
streams again:

1. drops the lost slot and creates the main slot anew (its consistent point `L0`);
2. per relation, under an exported snapshot (consistent point `L ≥ L0`, `snapshot.py`), in
   one transaction: writes `R(snapshot) − R(W)` into ΔR as signed rows stamped `T1` (the
   source's clock, after W), sets TS(ΔR) = T1 and marks the relation as streaming from `L` —
   the stream drops its changes of transactions before `L`, as after a first snapshot;
3. records when and how many rows (`_smile.capture_state.resynced_at`, `resync_rows`).

Every reader of ΔR — R̂, copies, joins, MVs — sees one large change at T1 and stays exact; no
sharing is rebuilt. What it costs them is what a burst costs (and the staleness of the outage).

Must not: stream, or decide when the slot is lost beyond reading `pg_replication_slots`.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from smile.db import connect
from smile.delta_capture.publish import ensure_capture_setup
from smile.delta_capture.registry import SLOT, load_errors, load_relations
from smile.delta_capture.snapshot import under_exported_snapshot
from smile.delta_capture.source import rolled_forward
from smile.errors import CaptureError
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from smile.delta_capture.registry import CapturedRelation

log = logging.getLogger("smile.capture")


def slot_lost(conn: psycopg.Connection[Any], slot: str = SLOT) -> bool:
    """Whether PostgreSQL invalidated `slot` (the WAL it needed is gone)."""
    row = conn.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                       (slot,)).fetchone()
    return row is not None and row[0] == "lost"


def resync(dsn: str, slot: str = SLOT) -> dict[str, int]:
    """Replace the lost `slot` and bring every streaming relation's ΔR up to date from a
    snapshot; returns relation → rows written. Idempotent: run again after a crash, it finds
    the slot healthy and the relations current (a second difference is empty)."""
    with connect(dsn, autocommit=True, what="the machine") as conn:
        if slot_lost(conn, slot):
            log.error("slot %s was invalidated (max_slot_wal_keep_size): re-synchronising "
                      "every captured relation from a snapshot", slot)
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        rels, errors = load_relations(conn), load_errors(conn)
    ensure_capture_setup(dsn, slot)
    done: dict[str, int] = {}
    for rel in rels.values():
        if rel.state == "streaming" and rel.relid not in errors:
            done[rel.qualified] = under_exported_snapshot(dsn, rel, partial(_catch_up, rel=rel))
    return done


def _catch_up(conn: psycopg.Connection[Any], lsn: str, *, rel: CapturedRelation) -> int:
    """In the snapshot's transaction: ΔR += R − R(W), stamped T1 > W; stream R from `lsn`."""
    w = vertex_ts.read(conn, rel.delta_vertex)
    row = conn.execute("SELECT greatest(clock_timestamp(), %s + interval '1 microsecond')",
                       (w,)).fetchone()
    assert row is not None
    t1 = row[0]
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in rel.column_names)
    old = rolled_forward(rel, upto=sql.Literal(w))  # R(W): TS(R̂) never passes W
    try:
        rows = conn.execute(sql.SQL(
            "INSERT INTO {delta} ({cols}, __sign, __ts, __lsn, __idx) "
            "SELECT {cols}, sign(g.__n)::smallint, {t1}, {lsn}::pg_lsn, "
            "  (row_number() OVER ())::int FROM ("
            " SELECT {cols}, sum(__s) AS __n FROM ("
            "  SELECT {cols}, 1 AS __s FROM {live}"
            "  UNION ALL SELECT {cols}, -1 FROM ({old}) __o"
            " ) __u GROUP BY {cols} HAVING sum(__s) <> 0) g, generate_series(1, abs(g.__n))"
        ).format(delta=sql.Identifier("_smile", rel.delta_table), cols=cols,
                 t1=sql.Literal(t1), lsn=sql.Literal(lsn), old=old,
                 live=sql.Identifier(rel.schema, rel.table))).rowcount
        vertex_ts.advance(conn, rel.delta_vertex, t1)
        conn.execute(
            "UPDATE _smile.captured_relations SET start_lsn = %s::pg_lsn, start_ts = %s "
            "WHERE relid = %s", (lsn, t1, rel.relid))
        conn.execute("UPDATE _smile.capture_state SET resynced_at = %s, resync_rows = %s "
                     "WHERE relid = %s", (t1, rows, rel.relid))
    except psycopg.Error as exc:
        raise CaptureError(f"re-synchronising {rel.qualified} failed: {exc}",
                           sqlstate=exc.sqlstate) from exc
    log.warning("%s re-synchronised: %d delta rows at %s", rel.qualified, rows, t1)
    return int(rows)
