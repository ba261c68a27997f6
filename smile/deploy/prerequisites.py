"""Ask an external database the questions `prereq_rules.py` decides on: its settings, the
connecting role's attributes and rights, and the replication slots and WAL senders in use;
and whether a machine that stopped answering still takes SMILE's connection (`probe`).

Must not: decide what is wrong (`prereq_rules.problems` does), or change the database.
"""

from __future__ import annotations

from dataclasses import dataclass

from smile.db import connect
from smile.delta_capture.registry import SLOT
from smile.deploy.prereq_rules import Problem, RoleRights, Setting, Usage, problems, why_lost
from smile.errors import SmileError


@dataclass(frozen=True)
class Unreachable:
    """Why a machine's database does not take SMILE's connection."""

    reason: str
    """libpq's words."""
    lost: str | None
    """What its words say of a machine lost for good, and what to do (None: down or
    unreachable, which may pass by itself)."""


def probe(dsn: str, timeout_s: int = 3) -> Unreachable | None:
    """None when the database at `dsn` takes a connection within `timeout_s`; else why not."""
    try:
        with connect(dsn, autocommit=True, what="the machine", connect_timeout=timeout_s) \
                as conn:
            conn.execute("SELECT 1")
        return None
    except SmileError as exc:
        return Unreachable(str(exc), why_lost(str(exc)))


NAMES = ("wal_level", "max_replication_slots", "max_wal_senders", "track_commit_timestamp")


def check_database(dsn: str, what: str = "the database") -> list[Problem]:
    """Every unmet prerequisite of the database at `dsn` (an empty list: it can be attached);
    one that cannot be reached is the one problem `connection`, with libpq's reason."""
    try:
        conn = connect(dsn, autocommit=True, what=what)
    except SmileError as exc:
        return [Problem("connection", str(exc), "check the DSN's host, port, database, "
                        "user and password, and pg_hba.conf", False)]
    with conn:
        rows = conn.execute(
            "SELECT name, setting, context, pending_restart FROM pg_settings "
            "WHERE name = ANY(%s)", (list(NAMES),)).fetchall()
        settings = {r[0]: Setting(r[0], r[1], r[2], bool(r[3])) for r in rows}
        role = conn.execute(
            "SELECT rolname, rolsuper, rolreplication, rolcreaterole, "
            "has_database_privilege(current_database(), 'CREATE') "
            "FROM pg_roles WHERE rolname = current_user").fetchone()
        assert role is not None
        rights = RoleRights(role[0], *(bool(x) for x in role[1:]))
        slots = conn.execute("SELECT count(*) FROM pg_replication_slots "
                             "WHERE slot_name <> %s AND NOT temporary", (SLOT,)).fetchone()
        senders = conn.execute(
            "SELECT count(*) FROM pg_stat_replication r WHERE NOT EXISTS (SELECT 1 FROM "
            "pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_name = %s)", (SLOT,)
        ).fetchone()
        version = conn.execute("SHOW server_version_num").fetchone()
        assert slots is not None and senders is not None and version is not None
        return problems(settings, rights, Usage(int(slots[0]), int(senders[0])),
                        int(version[0]))
