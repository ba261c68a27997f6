"""What an external PostgreSQL database must offer before SMILE attaches it, decided from the
database's own answers: its `pg_settings` rows, the connecting role's attributes and rights,
and how many replication slots and WAL senders are taken. Each unmet prerequisite is one
`Problem` naming the setting or grant that fixes it and whether the server must restart.

What capture needs, and why:
- `wal_level = logical`: capture decodes the WAL with `pgoutput` (a restart).
- `max_replication_slots` and `max_wal_senders` with `FREE_SLOTS` free: the capturer's
  slot streams for good, and publishing a relation takes its snapshot through a temporary
  slot of its own beside it (both need a restart to raise).
- PostgreSQL ≥ `MIN_VERSION`: the capture and operator SQL is written for 15.
- The role: a superuser, or `REPLICATION` (the stream and its slots), `CREATEROLE`
  (consumers' read-only roles) and `CREATE` on the database (SMILE's schemas and its
  publication). Publishing a table further needs its ownership; that is checked when it is
  published.
`track_commit_timestamp` is not needed: every change is stamped with the commit time
`pgoutput` sends with its transaction, never with `pg_xact_commit_timestamp`.

Must not: connect to anything (`prerequisites.py` asks the database and hands the answers here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_VERSION = 150000
"""`server_version_num` of PostgreSQL 15."""
FREE_SLOTS = 2
"""Replication slots and WAL senders SMILE takes on a machine at most: the capturer's stream,
and a publication's snapshot slot beside it while a relation is published."""


@dataclass(frozen=True)
class Setting:
    """One `pg_settings` row, as far as the checks read it."""

    name: str
    setting: str
    context: str
    """`postmaster`: a change needs a restart; anything else takes a reload at most."""
    pending_restart: bool = False
    """The configuration holds a new value that waits for a restart."""


@dataclass(frozen=True)
class RoleRights:
    """The connecting role's attributes and its right to create in the database."""

    name: str
    superuser: bool
    replication: bool
    createrole: bool
    create_on_database: bool


@dataclass(frozen=True)
class Usage:
    """What replication is using now."""

    slots: int
    """Replication slots that exist (SMILE's own, if any, excluded)."""
    senders: int
    """WAL senders running (SMILE's own excluded)."""


@dataclass(frozen=True)
class Problem:
    """One unmet prerequisite."""

    item: str
    """The setting or the right, e.g. `wal_level` or `REPLICATION`."""
    found: str
    fix: str
    """The statement or setting that fixes it."""
    restart: bool
    """The server must restart after the fix."""

    def to_json(self) -> dict[str, Any]:
        return {"item": self.item, "found": self.found, "fix": self.fix,
                "restart": self.restart}

    def __str__(self) -> str:
        then = "; then restart the server" if self.restart else ""
        return f"{self.item} is {self.found}: {self.fix}{then}"


def problems(settings: dict[str, Setting], role: RoleRights, usage: Usage,
             version_num: int) -> list[Problem]:
    """Every unmet prerequisite, in a stable order (settings, then the role).

    >>> s = {"wal_level": Setting("wal_level", "replica", "postmaster"),
    ...      "max_replication_slots": Setting("max_replication_slots", "10", "postmaster"),
    ...      "max_wal_senders": Setting("max_wal_senders", "10", "postmaster")}
    >>> r = RoleRights("app", False, True, True, True)
    >>> [p.item for p in problems(s, r, Usage(0, 0), 150004)]
    ['wal_level']
    """
    found: list[Problem] = []
    if version_num < MIN_VERSION:
        found.append(Problem("server_version", _version(version_num),
                             "upgrade to PostgreSQL 15 or later", True))
    found.extend(_wal_level(settings.get("wal_level")))
    found.extend(_capacity(settings.get("max_replication_slots"), usage.slots,
                           "replication slots"))
    found.extend(_capacity(settings.get("max_wal_senders"), usage.senders, "WAL senders"))
    found.extend(_role(role))
    return found


def _version(num: int) -> str:
    return f"{num // 10000}.{num % 10000}" if num >= 100000 else str(num)


def _wal_level(s: Setting | None) -> list[Problem]:
    if s is None or s.setting == "logical":
        return []
    waiting = " (logical is configured and waits for a restart)" if s.pending_restart else ""
    return [Problem("wal_level", f"{s.setting}{waiting}",
                    "ALTER SYSTEM SET wal_level = logical (or wal_level = logical in "
                    "postgresql.conf)", s.context == "postmaster")]


def _capacity(s: Setting | None, used: int, what: str) -> list[Problem]:
    if s is None:
        return []
    try:
        limit = int(s.setting)
    except ValueError:
        return []
    if limit - used >= FREE_SLOTS:
        return []
    want = used + FREE_SLOTS
    return [Problem(s.name, f"{limit} with {used} {what} in use",
                    f"ALTER SYSTEM SET {s.name} = {max(want, 10)} (SMILE needs {FREE_SLOTS} "
                    "free)", s.context == "postmaster")]


def _role(r: RoleRights) -> list[Problem]:
    if r.superuser:
        return []
    out = []
    if not r.replication:
        out.append(Problem("REPLICATION", f"missing on role {r.name}",
                           f'ALTER ROLE "{r.name}" REPLICATION', False))
    if not r.createrole:
        out.append(Problem("CREATEROLE", f"missing on role {r.name}",
                           f'ALTER ROLE "{r.name}" CREATEROLE (consumers read their views '
                           "through roles of their own)", False))
    if not r.create_on_database:
        out.append(Problem("CREATE", f"role {r.name} may not create schemas here",
                           f'GRANT CREATE ON DATABASE <this database> TO "{r.name}"', False))
    return out


LOST = (
    ("password authentication failed", "its password was changed: detach it and attach it "
     "again with the new DSN"),
    ("is not permitted to log in", "its role may no longer log in: grant LOGIN again, or "
     "detach it"),
    ("role \"", "its role was dropped: create it again, or detach it"),
    ("database \"", "its database was dropped: detach it"),
    ("no pg_hba.conf entry", "pg_hba.conf no longer lets SMILE in: allow it again, or "
     "detach it"),
)
"""libpq's words for a database that refuses SMILE until an admin acts, and what to do."""


def why_lost(message: str) -> str | None:
    """What a failed connection's message says about a machine lost for good (None: down or
    unreachable, which may pass by itself).

    >>> why_lost('FATAL:  database "shop" does not exist')
    'its database was dropped: detach it'
    >>> why_lost("Connection refused") is None
    True
    """
    for words, why in LOST:
        if words in message and ("does not exist" in message or not words.endswith('"')):
            return why
    return None
