"""The statements the capturer and its sink run on their machine, in one place: COPY into ΔR,
the target commit's watermarks and counts, the idle tick, error marks, the check for dropped
or altered tables, the wait for a relation's snapshot, and TRUNCATE's `-row`s.

Publishing (`publish.py`), the first copy (`snapshot.py`), re-synchronisation (`resync.py`),
the durable progress (`progress.py`) and the metadata reads (`registry.py`) keep their own
statements; the tables are those of `smile/sql/capture.sql`, and TS(v) is read and written
through `smile.operators.vertex_ts` only.

Must not: commit (the caller owns the transaction), decode, or hold state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.delta_capture.decode import format_lsn, parse_lsn, pg_time
from smile.delta_capture.progress import write_progress
from smile.delta_capture.registry import SCHEMA, TICK_PREFIX
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import datetime

    import psycopg

    from smile.delta_capture.progress import Progress
    from smile.delta_capture.registry import CapturedRelation


def _cols(names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(c) for c in names)


def copy_rows(conn: psycopg.Connection[Any], table: str, columns: tuple[str, ...],
              lines: list[bytes]) -> None:
    """COPY delta lines (`transform.py`'s) into ΔR `table`."""
    copy = sql.SQL("COPY {} ({}, __sign, __ts, __lsn, __idx) FROM STDIN").format(
        sql.Identifier(SCHEMA, table), _cols(columns))
    with conn.cursor() as cur, cur.copy(copy) as cp:
        cp.write(b"".join(lines))


def record_commit(conn: psycopg.Connection[Any], slot: str, progress: Progress,
                  watermark_vertices: list[str], counts: Mapping[int, int]) -> None:
    """What a target transaction ends with: the watermarks TS(ΔR) raised to the last source
    transaction's timestamp, the rows captured per relation, and the durable progress."""
    if watermark_vertices:
        vertex_ts.raise_to(conn, watermark_vertices, pg_time(progress.last_ts))
    if counts:  # one statement for every relation (an executemany costs more than the rows)
        conn.execute(
            "UPDATE _smile.capture_state s SET rows_captured = s.rows_captured + c.n "
            "FROM unnest(%s::oid[], %s::bigint[]) c(relid, n) WHERE s.relid = c.relid",
            (list(counts), list(counts.values())))
    write_progress(conn, slot, progress)


def emit_tick(conn: psycopg.Connection[Any]) -> None:
    """A transactional logical message: its arrival on the stream proves every earlier commit
    was seen, so watermarks follow the source's clock while it is idle."""
    conn.execute("SELECT pg_logical_emit_message(true, %s, '')", (TICK_PREFIX,))


def mark_error(conn: psycopg.Connection[Any], relid: int, message: str,
               lsn: int | None = None) -> None:
    """Stop a relation's capture with `message` (a first error only; `lsn`: where)."""
    conn.execute(
        "UPDATE _smile.capture_state SET error = %s, error_lsn = %s::pg_lsn, "
        "error_at = clock_timestamp() WHERE relid = %s AND error IS NULL",
        (message, None if lsn is None else format_lsn(lsn), relid),
    )


def changed_relations(conn: psycopg.Connection[Any]) -> list[tuple[int, int, str]]:
    """(relid, the WAL position now, why) of each streaming relation whose table was dropped
    (its columns changing is followed: `transform.layout`)."""
    rows = conn.execute(
        "SELECT r.relid, pg_current_wal_lsn()::text FROM _smile.captured_relations r "
        "LEFT JOIN pg_class c ON c.oid = r.relid WHERE r.state = 'streaming' AND c.oid IS NULL"
    ).fetchall()
    return [(int(relid), parse_lsn(lsn), "the table was dropped") for relid, lsn in rows]


def write_columns_gone(conn: psycopg.Connection[Any], rel: CapturedRelation,
                       columns: list[str], ts: datetime, lsn: int, idx: int) -> int:
    """Published columns R's table lost (dropped, renamed or retyped): from this point R
    holds NULL in them — `-row` and `+row` with them NULL for every row R holds (R̂ rolled
    forward with ΔR, this transaction's rows so far included) with a value in one, numbered
    after `idx` — and they are noted in `capture_state.gone`. Columns noted already change nothing
    (the same point replayed after a restart); returns the rows written."""
    row = conn.execute("SELECT gone FROM _smile.capture_state WHERE relid = %s",
                       (rel.relid,)).fetchone()
    new = [c for c in columns if row is None or c not in row[0]]
    if not new:
        return 0
    names = rel.column_names
    valued = sql.SQL(" OR ").join(sql.SQL("{} IS NOT NULL").format(sql.Identifier(c))
                                  for c in new)
    nulled = sql.SQL(", ").join(sql.SQL("NULL") if c in new else sql.Identifier(c)
                                for c in names)
    query = sql.SQL(
        "INSERT INTO {delta} ({cols}, __sign, __ts, __lsn, __idx) "
        "SELECT {cols}, __s, %(ts)s, %(lsn)s::pg_lsn, %(idx)s + row_number() OVER () FROM ("
        " SELECT {cols}, -1 AS __s FROM ({rows}) x WHERE {valued}"
        " UNION ALL SELECT {nulled}, 1 FROM ({rows}) y WHERE {valued}) z"
    ).format(delta=sql.Identifier(SCHEMA, rel.delta_table), cols=_cols(names),
             rows=rolled_forward(rel), valued=valued, nulled=nulled)
    n = int(conn.execute(query, {"ts": ts, "lsn": format_lsn(lsn), "idx": idx}).rowcount)
    conn.execute("UPDATE _smile.capture_state SET gone = ARRAY(SELECT DISTINCT x FROM "
                 "unnest(gone || %s::text[]) x ORDER BY 1) WHERE relid = %s", (new, rel.relid))
    return n


def relation_state(conn: psycopg.Connection[Any], relid: int) -> str | None:
    """'snapshotting' or 'streaming'; None once the relation is no longer published."""
    row = conn.execute("SELECT state FROM _smile.captured_relations WHERE relid = %s",
                       (relid,)).fetchone()
    return None if row is None else str(row[0])


def rolled_forward(rel: CapturedRelation, upto: sql.Composable | None = None) -> sql.Composed:
    """R as ΔR knows it: R̂ plus every ΔR row past TS(R̂) (up to `upto` if given), as a bag
    of rows (with their duplicates)."""
    cols = _cols(rel.column_names)
    bound = sql.SQL("") if upto is None else sql.SQL(" AND __ts <= {}").format(upto)
    return sql.SQL(
        "SELECT {cols} FROM ("
        "  SELECT {cols}, sum(__m) AS __n FROM ("
        "    SELECT {cols}, 1 AS __m FROM {shadow} "
        "    UNION ALL SELECT {cols}, __sign FROM {delta} WHERE __ts > {since}{bound}"
        "  ) u GROUP BY {cols} HAVING sum(__m) > 0) c, generate_series(1, c.__n)"
    ).format(cols=cols, shadow=sql.Identifier(SCHEMA, rel.shadow_table),
             delta=sql.Identifier(SCHEMA, rel.delta_table),
             since=vertex_ts.ts_of(sql.Literal(rel.shadow_vertex)), bound=bound)


def write_truncate(conn: psycopg.Connection[Any], rel: CapturedRelation, ts: datetime,
                   lsn: int, idx: int) -> int:
    """TRUNCATE of R: `-row` for every row R holds at this point of the transaction (R̂ rolled
    forward with ΔR, including this transaction's rows so far), numbered after `idx`; returns
    how many."""
    query = sql.SQL(
        "INSERT INTO {delta} ({cols}, __sign, __ts, __lsn, __idx) "
        "SELECT {cols}, -1, %(ts)s, %(lsn)s::pg_lsn, %(idx)s + row_number() OVER () "
        "FROM ({rows}) x"
    ).format(delta=sql.Identifier(SCHEMA, rel.delta_table), cols=_cols(rel.column_names),
             rows=rolled_forward(rel))
    return int(conn.execute(query, {"ts": ts, "lsn": format_lsn(lsn), "idx": idx}).rowcount)
