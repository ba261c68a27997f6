"""SMILE's capture metadata on one machine: the `_smile` schema, published relations, names.

`ensure_capture_schema` runs `smile/sql/capture.sql` (package data; idempotent) and creates the
TS table through `smile.operators.vertex_ts`. Published relations are read as frozen
`CapturedRelation` values; vertex and table names are derived here and nowhere else.

Must not: stream, decode or snapshot.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from smile.delta_capture.decode import parse_lsn
from smile.operators import vertex_ts

if TYPE_CHECKING:
    from datetime import datetime

    import psycopg

SCHEMA = "_smile"
"""SMILE's schema on every machine; not `smile`, which would be the `$user` schema of a role
named smile and so catch its unqualified tables."""
PUBLICATION = "smile_pub"
SLOT = "smile_capture"
TICK_PREFIX = "smile.tick"
SQL_FILE = resources.files("smile") / "sql" / "capture.sql"
"""The DDL of the capture tables, shipped inside the package."""


def _name(schema: str, table: str, suffix: str) -> str:
    base = f"{schema}__{table}__{suffix}"
    if len(base.encode()) <= 63:
        return base
    digest = hashlib.sha1(base.encode()).hexdigest()[:10]
    return f"{base.encode()[:40].decode(errors='ignore')}_{digest}__{suffix}"


def delta_table(schema: str, table: str) -> str:
    """The delta table ΔR's name (in schema `_smile`).

    >>> delta_table("public", "users")
    'public__users__delta'
    """
    return _name(schema, table, "delta")


def shadow_table(schema: str, table: str) -> str:
    return _name(schema, table, "shadow")


def delta_vertex(schema: str, table: str) -> str:
    """The vertex name of ΔR (its key among the TS of vertices).

    >>> delta_vertex("public", "users")
    'delta:public.users'
    """
    return f"delta:{schema}.{table}"


def shadow_vertex(schema: str, table: str) -> str:
    return f"shadow:{schema}.{table}"


@dataclass(frozen=True)
class CapturedRelation:
    relid: int
    schema: str
    table: str
    columns: tuple[tuple[str, int], ...]
    """(name, type oid) in attribute order, as published."""
    state: str
    start_lsn: int | None
    start_ts: datetime | None

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def delta_table(self) -> str:
        return delta_table(self.schema, self.table)

    @property
    def shadow_table(self) -> str:
        return shadow_table(self.schema, self.table)

    @property
    def delta_vertex(self) -> str:
        return delta_vertex(self.schema, self.table)

    @property
    def shadow_vertex(self) -> str:
        return shadow_vertex(self.schema, self.table)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c[0] for c in self.columns)


def ensure_capture_schema(conn: psycopg.Connection[Any]) -> None:
    """Create schema `_smile` and its capture tables if missing, in one transaction (within
    the caller's, if it has one).

    Processes starting together (a capturer and an agent on one machine) would race on
    `CREATE … IF NOT EXISTS`, the loser failing on a unique violation of the catalog: an
    ERROR in the server's log, which reads as a fault. The script's first statement takes an
    advisory lock to the transaction's end, so they take turns, `vertex_ts`'s tables
    included."""
    with conn.transaction():
        conn.execute(SQL_FILE.read_text().encode())
        vertex_ts.ensure_table(conn)


def load_relations(conn: psycopg.Connection[Any]) -> dict[int, CapturedRelation]:
    rows = conn.execute(
        "SELECT relid, schema_name, table_name, columns, state, start_lsn::text, start_ts "
        "FROM _smile.captured_relations"
    ).fetchall()
    return {
        int(r[0]): CapturedRelation(
            relid=int(r[0]),
            schema=r[1],
            table=r[2],
            columns=tuple((c["name"], int(c["type"])) for c in r[3]),
            state=r[4],
            start_lsn=parse_lsn(r[5]) if r[5] else None,
            start_ts=r[6],
        )
        for r in rows
    }


def load_errors(conn: psycopg.Connection[Any]) -> dict[int, str]:
    rows = conn.execute(
        "SELECT relid, error FROM _smile.capture_state WHERE error IS NOT NULL"
    ).fetchall()
    return {int(r[0]): r[1] for r in rows}
