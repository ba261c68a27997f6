"""Versions of the global plan D in the catalog database (`smile_catalog.plan_versions`), the
one place agents, executors and auditors rebuild it from — after a restart too.

Every change to the set of sharings makes a new version (state `installing`); once its new
vertices are installed it becomes `active` and the one before `retired` (a version that
could not be installed is `failed`). Commands name a version, so an agent never runs a plan it
was not told to: a withdrawn sharing resubmitted under the same name runs in a new version.
`vertex_born` remembers at which timestamp each vertex got its first contents — a vertex may
only switch to a new source once it is past the source's birth (docs/design/semantics.md §8).
Deploys are serialised across processes by an advisory lock.

Must not: install or run plans.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import TYPE_CHECKING

from smile.db import connect
from smile.deploy.plan_codec import decode_physical, encode_physical
from smile.errors import AgentError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from datetime import datetime

    from smile.deploy.physical import PhysicalPlan

DDL = """
SELECT pg_advisory_xact_lock(hashtext('smile.plan_store.ddl'));
CREATE SCHEMA IF NOT EXISTS smile_catalog;
CREATE TABLE IF NOT EXISTS smile_catalog.plan_versions (
    version    bigserial PRIMARY KEY,
    physical   jsonb NOT NULL,
    state      text NOT NULL DEFAULT 'installing',
    reason     text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS smile_catalog.vertex_born (
    vertex text PRIMARY KEY,
    ts     timestamptz NOT NULL
);
"""
"""Run whole (no parameters: one implicit transaction) before each use. `IF NOT EXISTS` is not
safe against a concurrent creator — two processes' first calls on a fresh catalog both found
no schema, and the second failed on `pg_namespace`'s unique index — so the batch first takes
a transaction-level advisory lock, and the second creator waits and then finds it there."""
_LOCK = 727_101  # pg_advisory_lock key of deploys


def store_version(catalog_dsn: str, phys: PhysicalPlan, reason: str) -> int:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        row = conn.execute("INSERT INTO smile_catalog.plan_versions (physical, reason) VALUES "
                           "(%s, %s) RETURNING version",
                           (json.dumps(encode_physical(phys)), reason)).fetchone()
    assert row is not None
    return int(row[0])


def load_version(catalog_dsn: str, version: int) -> PhysicalPlan:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        row = conn.execute("SELECT physical FROM smile_catalog.plan_versions WHERE version = %s",
                           (version,)).fetchone()
    if row is None:
        raise AgentError(f"no version {version} of the global plan in the catalog")
    return decode_physical(row[0])


def active_version(catalog_dsn: str) -> int | None:
    """The number of the active version, or None before the first sharing."""
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        row = conn.execute("SELECT max(version) FROM smile_catalog.plan_versions "
                           "WHERE state = 'active'").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def load_active(catalog_dsn: str) -> tuple[int, PhysicalPlan] | None:
    version = active_version(catalog_dsn)
    return None if version is None else (version, load_version(catalog_dsn, version))


def activate(catalog_dsn: str, version: int) -> None:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn, conn.transaction():
        conn.execute("UPDATE smile_catalog.plan_versions SET state = 'retired' "
                     "WHERE state = 'active' AND version <> %s", (version,))
        conn.execute("UPDATE smile_catalog.plan_versions SET state = 'active' WHERE version = %s",
                     (version,))


def fail(catalog_dsn: str, version: int, reason: str) -> None:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute("UPDATE smile_catalog.plan_versions SET state = 'failed', reason = %s "
                     "WHERE version = %s", (reason, version))


def set_born(catalog_dsn: str, labels: Iterable[str], ts: datetime) -> None:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO smile_catalog.vertex_born VALUES (%s, %s) ON CONFLICT "
                            "(vertex) DO UPDATE SET ts = excluded.ts", [(v, ts) for v in labels])


def forget_born(catalog_dsn: str, labels: Iterable[str]) -> None:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        conn.execute("DELETE FROM smile_catalog.vertex_born WHERE vertex = ANY(%s)",
                     (list(labels),))


def born(catalog_dsn: str) -> dict[str, datetime]:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        return {v: ts for v, ts in conn.execute(
            "SELECT vertex, ts FROM smile_catalog.vertex_born").fetchall()}


@contextmanager
def deploy_lock(catalog_dsn: str) -> Iterator[None]:
    """Held while one process changes the global plan: planning from the active version and
    installing the next must not interleave with another process doing the same."""
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK,))
