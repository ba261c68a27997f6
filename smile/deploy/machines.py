"""Machines attached to a running SMILE: their rows in the catalog (`smile_catalog.machines`),
the topology a process sees with them (`live_topology`, `refresh`), and what SMILE puts on an
attached database and takes off it again (`prepare`, `clear`).

An attached machine is an app's own database: SMILE adds its schemas (`_smile`, `smile_mv`),
its publication and its slot on `prepare`, and on `clear` drops exactly those and the
consumers' roles it made; the app's schemas, tables and rows are never touched.

Must not: decide whether a machine may be attached or detached (`executor/machines.py`), or
start and stop processes (`cloud.daemons`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from smile.db import connect
from smile.delta_capture.publish import ensure_capture_setup
from smile.delta_capture.registry import PUBLICATION, SCHEMA
from smile.deploy.install import MV_SCHEMA
from smile.deploy.roles import ROLE_PREFIX
from smile.errors import CaptureError
from smile.topology import MachineEndpoint, Topology, resolve_topology

if TYPE_CHECKING:
    from smile.settings import Settings

DDL = """
SELECT pg_advisory_xact_lock(hashtext('smile.machines.ddl'));
CREATE SCHEMA IF NOT EXISTS smile_catalog;
CREATE TABLE IF NOT EXISTS smile_catalog.machines (
    name           text PRIMARY KEY,
    dsn            text NOT NULL,
    cores          float8 NOT NULL,
    price_per_hour float8 NOT NULL,
    attached_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""
"""Run whole before each use (one implicit transaction, serialised like `plan_store.DDL`)."""
DEFAULT_CORES = 2.0
"""An attached machine's cores when the admin gives none (the optimizer's default machine)."""
DEFAULT_PRICE = 0.34
"""Its price in $ per hour when none is given (the paper's EC2 'large' instance, §9.1.2)."""


@dataclass(frozen=True)
class Leftovers:
    """What SMILE still has on a machine: empty after `clear`."""

    slots: tuple[str, ...]
    publications: tuple[str, ...]
    schemas: tuple[str, ...]
    roles: tuple[str, ...]

    def empty(self) -> bool:
        return not (self.slots or self.publications or self.schemas or self.roles)


def attached(catalog_dsn: str) -> tuple[MachineEndpoint, ...]:
    """The machines attached to SMILE, in the order they came."""
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        rows = conn.execute("SELECT name, dsn, cores, price_per_hour FROM smile_catalog.machines "
                            "ORDER BY attached_at, name").fetchall()
    return tuple(MachineEndpoint(r[0], r[1], "attached", float(r[2]), float(r[3])) for r in rows)


def add(catalog_dsn: str, machine: MachineEndpoint) -> None:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        conn.execute("INSERT INTO smile_catalog.machines (name, dsn, cores, price_per_hour) "
                     "VALUES (%s, %s, %s, %s)",
                     (machine.name, machine.dsn, machine.cores or DEFAULT_CORES,
                      DEFAULT_PRICE if machine.price_per_hour is None
                      else machine.price_per_hour))


def remove(catalog_dsn: str, name: str) -> None:
    with connect(catalog_dsn, autocommit=True, what="catalog") as conn:
        conn.execute(DDL.encode())
        conn.execute("DELETE FROM smile_catalog.machines WHERE name = %s", (name,))


def merged(static: tuple[MachineEndpoint, ...],
           more: tuple[MachineEndpoint, ...]) -> tuple[MachineEndpoint, ...]:
    """The machines of the settings or the local cloud, then the attached ones not among them.

    >>> a, b = MachineEndpoint("m1", "x"), MachineEndpoint("app", "y", "attached")
    >>> [m.name for m in merged((a,), (b, MachineEndpoint("m1", "z", "attached")))]
    ['m1', 'app']
    """
    names = {m.name for m in static}
    return static + tuple(m for m in more if m.name not in names)


def place(dsn: str) -> tuple[str, str, str]:
    """Host, port and database of a DSN: two DSNs of one database (other users) are one.

    >>> place("postgresql://a:x@h:5433/d") == place("host=h port=5433 dbname=d user=b")
    True
    """
    d = conninfo_to_dict(dsn)
    return (str(d.get("host", "")), str(d.get("port", "5432")), str(d.get("dbname", "")))


def live_topology(settings: Settings) -> Topology:
    """`resolve_topology` with the machines attached in the catalog added."""
    topology = resolve_topology(settings)
    topology.fixed = topology.machines
    topology.set_machines(merged(topology.machines, attached(topology.catalog_dsn)))
    return topology


def refresh(topology: Topology) -> bool:
    """Bring `topology`'s machines up to the catalog's attached ones; True if they changed."""
    fixed = topology.fixed if topology.fixed is not None else topology.machines
    now = merged(fixed, attached(topology.catalog_dsn))
    if now == topology.machines:
        return False
    topology.set_machines(now)
    return True


def prepare(dsn: str) -> None:
    """SMILE's schema, publication and slot on the machine (idempotent)."""
    ensure_capture_setup(dsn)


def leftovers(dsn: str) -> Leftovers:
    """SMILE's slots, publications, schemas and consumers' roles on the machine."""
    with connect(dsn, autocommit=True, what="the machine") as conn:
        def names(query: str, *args: object) -> tuple[str, ...]:
            return tuple(r[0] for r in conn.execute(query, args).fetchall())

        return Leftovers(
            names("SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'smile%%' "
                  "AND database = current_database()"),
            names("SELECT pubname FROM pg_publication WHERE pubname = %s", PUBLICATION),
            names("SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)",
                  [SCHEMA, MV_SCHEMA]),
            names("SELECT rolname FROM pg_roles WHERE starts_with(rolname, %s)", ROLE_PREFIX))


def clear(dsn: str, timeout_s: float = 30.0) -> Leftovers:
    """Drop SMILE's slots, publication, schemas and consumers' roles from the machine (its
    capturer stopped first: an active slot cannot go); returns what could not go (a role
    holding rights in another database of the cluster stays)."""
    with connect(dsn, autocommit=True, what="the machine") as conn:
        _drop_slots(conn, timeout_s)
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(PUBLICATION)))
        for schema in (MV_SCHEMA, SCHEMA):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))
        for (role,) in conn.execute("SELECT rolname FROM pg_roles WHERE starts_with(rolname, %s)",
                                    (ROLE_PREFIX,)).fetchall():
            _drop_role(conn, role)
    return leftovers(dsn)


def _drop_slots(conn: psycopg.Connection[Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = conn.execute(
            "SELECT slot_name, active_pid FROM pg_replication_slots WHERE slot_name LIKE "
            "'smile%%' AND database = current_database()").fetchall()
        if not rows:
            return
        for slot, pid in rows:
            if pid is not None:  # a walsender still ending
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                continue
            with contextlib.suppress(psycopg.errors.ObjectInUse,
                                     psycopg.errors.UndefinedObject):
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        if time.monotonic() > deadline:
            raise CaptureError(f"slots {[r[0] for r in rows]} are still in use after "
                               f"{timeout_s:g} s: is a capturer of this machine still running?")
        time.sleep(0.2)


def _drop_role(conn: psycopg.Connection[Any], role: str) -> None:
    ident = sql.Identifier(role)
    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                 (role,))
    try:
        with conn.transaction():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
            conn.execute(sql.SQL("DROP ROLE {}").format(ident))
    except psycopg.errors.DependentObjectsStillExist:
        pass  # rights in another database of the cluster: the role stays for it

