"""The catalog's plan tables under concurrent first use: processes that start together (an
executor, agents, a data load) each create them if missing, and none may fail for it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from smile.deploy.plan_store import active_version
from smile.executor.store import CatalogStore

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services


def _first_uses_at_once(dsn: str, n: int) -> list[BaseException]:
    """`n` threads make the catalog's first use at the same instant, half through the plan
    store, half through the executor's store (whose DDL includes the plan store's): what
    they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def first_use(i: int) -> None:
        try:
            start.wait()
            if i % 2:
                assert active_version(dsn) is None
            else:
                CatalogStore(dsn).close()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def test_first_uses_at_once_on_a_fresh_catalog_all_succeed(cloud: CloudHandle) -> None:
    """Found in CI: a data load's `active_version` and a starting executor both ran `CREATE
    SCHEMA IF NOT EXISTS smile_catalog` on a fresh catalog, and the second failed with a
    UniqueViolation on `pg_namespace` (IF NOT EXISTS does not guard against a concurrent
    creator). Each round starts from a database without the schema."""
    admin = cloud.topology.catalog_dsn
    db = "smile_plan_store_race"
    dsn = make_conninfo(**{**conninfo_to_dict(admin), "dbname": db})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.execute(f"CREATE DATABASE {db}")
    try:
        for _ in range(10):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DROP SCHEMA IF EXISTS smile_catalog CASCADE")
            CatalogStore._ready.discard(dsn)
            errors = _first_uses_at_once(dsn, 8)
            assert errors == []
            assert active_version(dsn) is None
    finally:
        CatalogStore._ready.discard(dsn)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
