"""Publishing a base relation for capture, and withdrawing it.

`publish_relation` makes sure the machine has the `_smile` schema, the publication and the main
slot; checks the relation (exists, no generated columns) and gives it REPLICA IDENTITY FULL
(UPDATE and DELETE must carry the whole old row, or deltas could not carry `-old`); creates ΔR
and R̂; registers it as 'snapshotting' and adds it to the publication in one transaction; then
hands over to `snapshot.py` for the exact first contents. It is idempotent: a streaming relation
is returned as is; one left 'snapshotting' by a crash gets its snapshot again; one whose capture
stopped with an error (schema change), or whose table gained columns since (captured without
them), is withdrawn and published afresh.

Must not: stream or decode.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import psycopg
from psycopg import sql

from smile.db import connect
from smile.delta_capture.registry import (
    PUBLICATION,
    SCHEMA,
    SLOT,
    CapturedRelation,
    delta_table,
    delta_vertex,
    ensure_capture_schema,
    load_errors,
    load_relations,
    shadow_table,
    shadow_vertex,
)
from smile.delta_capture.snapshot import copy_under_exported_snapshot
from smile.errors import CaptureError
from smile.operators import vertex_ts
from smile.optimizer.column_types import NO_EQUALITY, base_name


def split_name(qualified: str) -> tuple[str, str]:
    """`schema.table` (or `table`, meaning public).

    >>> split_name("users"), split_name("app.users")
    (('public', 'users'), ('app', 'users'))
    """
    parts = qualified.split(".")
    if len(parts) == 1 and parts[0]:
        return "public", parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise CaptureError(f"bad table name {qualified!r}: expected schema.table")


def ensure_capture_setup(dsn: str, slot: str = SLOT) -> None:
    """Schema `_smile`, the publication and the main slot exist on this machine."""
    with connect(dsn, autocommit=True) as conn:
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('smile.capture.setup'))")
                ensure_capture_schema(conn)
                if not conn.execute(
                    "SELECT 1 FROM pg_publication WHERE pubname = %s", (PUBLICATION,)
                ).fetchone():
                    conn.execute(sql.SQL("CREATE PUBLICATION {}").format(
                        sql.Identifier(PUBLICATION)))
            if not conn.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone():
                with contextlib.suppress(psycopg.errors.DuplicateObject):
                    conn.execute(
                        "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        except psycopg.Error as exc:
            raise CaptureError(f"cannot set up capture: {exc}", sqlstate=exc.sqlstate) from exc


def _columns(conn: psycopg.Connection[Any], schema: str, table: str) -> tuple[int, list[Any]]:
    row = conn.execute(
        "SELECT c.oid, c.relkind, c.relreplident FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    ).fetchone()
    if row is None:
        tables = [r[0] for r in conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema', '_smile') ORDER BY 1"
        ).fetchall()]
        raise CaptureError(f"no table {schema}.{table} on this machine; tables: {tables}")
    relid, relkind, _ident = row
    if relkind not in ("r", "p"):
        raise CaptureError(f"{schema}.{table} is not a table (relkind {relkind!r})")
    cols = conn.execute(
        "SELECT attname, atttypid::int, attgenerated FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (relid,),
    ).fetchall()
    generated = [c[0] for c in cols if c[2]]
    if generated:
        raise CaptureError(
            f"{schema}.{table} has generated columns {generated}: PostgreSQL 15's pgoutput "
            "does not send them, so their deltas would be wrong; publish a view-free copy instead"
        )
    return int(relid), cols


def _as_text(conn: psycopg.Connection[Any], relid: int,
             tables: tuple[sql.Identifier, ...]) -> None:
    """Columns of a type PostgreSQL cannot compare for equality (`json`, `xml`, geometric
    types) are kept as their text in ΔR and R̂: operators consolidate rows by value, and a
    sharing never reads such a column (it is refused at submission), so its exact text is
    all capture has to keep."""
    cols = [name for name, typ in conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped", (relid,)).fetchall()
        if base_name(typ) in NO_EQUALITY]
    for t in tables:
        for c in cols:
            conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE text").format(
                t, sql.Identifier(c)))


def _register(dsn: str, schema: str, table: str) -> CapturedRelation:
    with connect(dsn) as conn:
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('smile.capture.setup'))")
                relid, cols = _columns(conn, schema, table)
                target = sql.Identifier(schema, table)
                ident = conn.execute("SELECT relreplident FROM pg_class WHERE oid = %s",
                                     (relid,)).fetchone()
                if ident is None or ident[0] != "f":
                    try:
                        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(target))
                    except psycopg.errors.InsufficientPrivilege as exc:
                        raise CaptureError(
                            f"{schema}.{table} needs REPLICA IDENTITY FULL so that its UPDATEs "
                            "and DELETEs carry the whole old row (deltas are -old/+new); ask its "
                            f"owner to run: ALTER TABLE {schema}.{table} REPLICA IDENTITY FULL",
                            sqlstate=exc.sqlstate,
                        ) from exc
                d = sql.Identifier("_smile", delta_table(schema, table))
                s = sql.Identifier("_smile", shadow_table(schema, table))
                conn.execute(sql.SQL(
                    "CREATE TABLE {d} (LIKE {t}, __sign smallint NOT NULL, "
                    "__ts timestamptz NOT NULL, __lsn pg_lsn NOT NULL, __idx integer NOT NULL)"
                ).format(d=d, t=target))
                conn.execute(sql.SQL("CREATE INDEX ON {} (__ts)").format(d))
                conn.execute(sql.SQL("CREATE TABLE {} (LIKE {})").format(s, target))
                _as_text(conn, relid, (d, s))
                conn.execute(
                    "INSERT INTO _smile.captured_relations (relid, schema_name, table_name, "
                    "delta_table, shadow_table, columns, state) "
                    "VALUES (%s, %s, %s, %s, %s, %s, 'snapshotting')",
                    (relid, schema, table, delta_table(schema, table), shadow_table(schema, table),
                     json.dumps([{"name": c[0], "type": c[1]} for c in cols])),
                )
                conn.execute("INSERT INTO _smile.capture_state (relid) VALUES (%s)", (relid,))
                conn.execute(
                    "INSERT INTO _smile.delta_readers VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    (delta_vertex(schema, table), shadow_vertex(schema, table)),
                )
                conn.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                    sql.Identifier(PUBLICATION), target))
        except psycopg.Error as exc:
            raise CaptureError(f"cannot publish {schema}.{table}: {exc}",
                               sqlstate=exc.sqlstate) from exc
        rel = load_relations(conn)[relid]
    return rel


def _find(dsn: str, schema: str, table: str) -> tuple[CapturedRelation | None, str | None]:
    with connect(dsn) as conn:
        rels = load_relations(conn)
        errors = load_errors(conn)
    for rel in rels.values():
        if (rel.schema, rel.table) == (schema, table):
            return rel, errors.get(rel.relid)
    return None, None


def _oid(dsn: str, schema: str, table: str) -> int | None:
    with connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s)::oid::bigint",
                           (f"{sql.Identifier(schema, table).as_string(conn)}",)).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _live_columns(dsn: str, relid: int) -> tuple[tuple[str, int], ...]:
    with connect(dsn, autocommit=True) as conn:
        return tuple((r[0], int(r[1])) for r in conn.execute(
            "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum", (relid,)).fetchall())


def publish_relation(dsn: str, qualified: str) -> CapturedRelation:
    """Publish `schema.table` on the machine at `dsn`; returns it once streaming."""
    schema, table = split_name(qualified)
    if schema == SCHEMA:
        raise CaptureError("tables in schema _smile are SMILE's own and cannot be published")
    ensure_capture_setup(dsn)
    existing, error = _find(dsn, schema, table)
    if existing is not None and (error is not None or existing.relid != _oid(dsn, schema, table)
                                 or existing.columns != _live_columns(dsn, existing.relid)):
        # capture stopped (schema change), the table was dropped and created again, or it
        # has columns added since it was published (captured without them until now)
        unpublish_relation(dsn, qualified)
        existing = None
    if existing is not None and existing.state == "streaming":
        return existing
    rel = existing or _register(dsn, schema, table)
    if rel.state == "snapshotting":
        with connect(dsn, autocommit=True) as conn:  # a crashed attempt may have left rows
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier("_smile", rel.shadow_table)))
        copy_under_exported_snapshot(dsn, rel)
    found, _ = _find(dsn, schema, table)
    assert found is not None
    return found


def unpublish_relation(dsn: str, qualified: str) -> bool:
    """Withdraw a relation from capture: publication, metadata, ΔR and R̂. False if unknown."""
    schema, table = split_name(qualified)
    rel, _ = _find(dsn, schema, table)
    if rel is None:
        return False
    with connect(dsn) as conn:
        try:
            with conn.transaction():
                member = conn.execute(
                    "SELECT 1 FROM pg_publication_tables WHERE pubname = %s "
                    "AND schemaname = %s AND tablename = %s", (PUBLICATION, schema, table),
                ).fetchone()
                if member:
                    conn.execute(sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(
                        sql.Identifier(PUBLICATION), sql.Identifier(schema, table)))
                conn.execute("DELETE FROM _smile.captured_relations WHERE relid = %s", (rel.relid,))
                conn.execute("DELETE FROM _smile.capture_state WHERE relid = %s", (rel.relid,))
                conn.execute("DELETE FROM _smile.delta_readers WHERE delta_vertex = %s",
                             (rel.delta_vertex,))
                conn.execute("DELETE FROM _smile.delta_pruned WHERE delta_vertex = %s",
                             (rel.delta_vertex,))  # retention's mark of how far ΔR was pruned
                vertex_ts.delete(conn, [rel.delta_vertex, rel.shadow_vertex])
                for name in (rel.delta_table, rel.shadow_table):
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(
                        sql.Identifier("_smile", name)))
        except psycopg.Error as exc:
            raise CaptureError(f"cannot unpublish {qualified}: {exc}",
                               sqlstate=exc.sqlstate) from exc
    return True
