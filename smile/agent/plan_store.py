"""Installed plans in the catalog database (`smile_catalog.plans`), the one place agents and
the executor rebuild them from after a restart.

Must not: install or run plans.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from smile.agent.plan_codec import decode_physical, encode_physical
from smile.db import connect
from smile.errors import AgentError

if TYPE_CHECKING:
    from smile.agent.physical import PhysicalPlan

DDL = """
CREATE SCHEMA IF NOT EXISTS smile_catalog;
CREATE TABLE IF NOT EXISTS smile_catalog.plans (
    name         text PRIMARY KEY,
    physical     jsonb NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""


def store_plan(catalog_dsn: str, phys: PhysicalPlan) -> None:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        conn.execute("INSERT INTO smile_catalog.plans (name, physical) VALUES (%s, %s) "
                     "ON CONFLICT (name) DO UPDATE SET physical = excluded.physical, "
                     "installed_at = clock_timestamp()",
                     (phys.plan.sharing, json.dumps(encode_physical(phys))))


def load_plan(catalog_dsn: str, name: str) -> PhysicalPlan:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        row = conn.execute("SELECT physical FROM smile_catalog.plans WHERE name = %s",
                           (name,)).fetchone()
    if row is None:
        raise AgentError(f"no installed plan named {name!r}")
    return decode_physical(row[0])


def delete_plan(catalog_dsn: str, name: str) -> None:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        conn.execute("DELETE FROM smile_catalog.plans WHERE name = %s", (name,))
