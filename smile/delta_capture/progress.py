"""Durable capture progress: the last source transaction whose changes are all in the deltas.

Written in the same transaction as those delta rows, read at start-up: the stream restarts
after `end_lsn`, and any transaction whose commit LSN is not beyond `commit_lsn` is a replay
(PostgreSQL 15 may rewind a slot's confirmed_flush_lsn after a restart) and is skipped.
`last_ts` carries the monotone timestamp on across restarts.

Must not: commit (the caller's transaction holds the delta rows too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from smile.delta_capture.decode import format_lsn, parse_lsn, pg_micros, pg_time

if TYPE_CHECKING:
    import psycopg


class Progress(NamedTuple):
    """An immutable value, a NamedTuple rather than a frozen dataclass: one is made per
    captured source transaction."""

    commit_lsn: int = 0
    end_lsn: int = 0
    last_ts: int = 0
    """Microseconds since 2000-01-01 of the last transaction's (monotone) timestamp."""
    last_xid: int = 0
    """The last transaction's xid (32 bits): how many transactions began on the source since
    is how far behind capture is (`status.py`)."""


def read_progress(conn: psycopg.Connection[Any], slot: str) -> Progress:
    row = conn.execute(
        "SELECT commit_lsn::text, end_lsn::text, last_ts, coalesce(last_xid, 0) "
        "FROM _smile.capture_progress "
        "WHERE slot = %s", (slot,),
    ).fetchone()
    if row is None:
        return Progress()
    return Progress(parse_lsn(row[0]), parse_lsn(row[1]), pg_micros(row[2]), int(row[3]))


def write_progress(conn: psycopg.Connection[Any], slot: str, progress: Progress) -> None:
    conn.execute(
        "INSERT INTO _smile.capture_progress (slot, commit_lsn, end_lsn, last_ts, last_xid, "
        "updated_at) VALUES (%s, %s::pg_lsn, %s::pg_lsn, %s, %s, clock_timestamp()) "
        "ON CONFLICT (slot) DO UPDATE SET commit_lsn = excluded.commit_lsn, "
        "end_lsn = excluded.end_lsn, last_ts = excluded.last_ts, last_xid = excluded.last_xid, "
        "updated_at = excluded.updated_at",
        (slot, format_lsn(progress.commit_lsn), format_lsn(progress.end_lsn),
         pg_time(progress.last_ts), progress.last_xid),
    )
