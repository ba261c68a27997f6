"""Consumers' PostgreSQL roles on a machine: a login role per consumer that can read its own MVs
(views in `smile_mv`) and nothing else, and on SMILE's own clusters the machine-wide hardening
that makes "nothing else" true (PUBLIC may not connect, create temporary tables or look into
`public`). An app's attached database keeps its PUBLIC rights, which its own roles may rely
on: there a consumer's role has what PUBLIC has, as any role the app makes (docs/security.md).

A consumer's role is `LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOINHERIT`, with a
connection limit and a statement timeout; it is granted CONNECT on the machine's database, USAGE
on `smile_mv` and SELECT on each of its views. A view runs with its owner's rights, so reading it
needs no right on the vertex table under it. Revoking the last view takes back CONNECT and USAGE,
makes the role NOLOGIN and ends its sessions; the role stays, so its name and password are
stable if the consumer comes back.

Must not: decide who may read what (the sharing service does); compose SQL from strings: every
identifier goes through `psycopg.sql`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from smile.db import connect
from smile.deploy.install import MV_SCHEMA

if TYPE_CHECKING:
    import psycopg

CONNECTION_LIMIT = 8
STATEMENT_TIMEOUT = "60s"
IDLE_IN_TRANSACTION = "30s"
"""A consumer's open transaction may not hold locks (and vacuum) back for longer than this."""
_LO_CREATORS = ("lo_creat(integer)", "lo_create(oid)", "lo_from_bytea(oid, bytea)")
ROLE_PREFIX = "smile_c_"


def role_name(consumer: str) -> str:
    """The consumer's role: a prefix no SMILE role has, and the consumer's name (≤ 40 chars)."""
    return ROLE_PREFIX + consumer


def harden(conn: psycopg.Connection[Any]) -> None:
    """PUBLIC loses CONNECT and TEMP on every database and USAGE/CREATE on `public`: a login
    role reaches only what is granted to it. Idempotent; SMILE's own role is a superuser."""
    for (db,) in conn.execute("SELECT datname FROM pg_database WHERE datallowconn").fetchall():
        conn.execute(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC")
                     .format(sql.Identifier(db)))
    conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
    for fn in _LO_CREATORS:  # large objects are the one thing PUBLIC could still write
        conn.execute(f"REVOKE EXECUTE ON FUNCTION pg_catalog.{fn} FROM PUBLIC")
    own_schema(conn)


def own_schema(conn: psycopg.Connection[Any]) -> None:
    """`smile_mv` exists and PUBLIC has no right on it: a role reads only the views granted."""
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(MV_SCHEMA)))
    conn.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM PUBLIC").format(sql.Identifier(MV_SCHEMA)))


def grant_reader(conn: psycopg.Connection[Any], consumer: str, password: str,
                 view: str, cluster_wide: bool = True) -> str:
    """Make (or update) the consumer's role and let it read `smile_mv.view`; returns the role.
    `conn` is a superuser session in autocommit or a transaction the caller commits.
    `cluster_wide`: `harden` the cluster first (SMILE's own); else only `smile_mv` is closed
    to PUBLIC (an app's database, whose roles may rely on PUBLIC's rights)."""
    if cluster_wide:
        harden(conn)
    else:
        own_schema(conn)
    role = sql.Identifier(role_name(consumer))
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                          (role_name(consumer),)).fetchone()
    attrs = sql.SQL("LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOINHERIT "
                    "NOBYPASSRLS CONNECTION LIMIT {} PASSWORD {}").format(
        sql.Literal(CONNECTION_LIMIT), sql.Literal(password))
    verb = "ALTER" if exists else "CREATE"
    conn.execute(sql.SQL(verb + " ROLE {} {}").format(role, attrs))
    for setting, value in (("statement_timeout", STATEMENT_TIMEOUT),
                           ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION)):
        conn.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(
            role, sql.Identifier(setting), sql.Literal(value)))
    db = conn.execute("SELECT current_database()").fetchone()
    assert db is not None
    conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db[0]),
                                                                       role))
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(MV_SCHEMA),
                                                                  role))
    conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(MV_SCHEMA, view),
                                                             role))
    return role_name(consumer)


def revoke_reader(conn: psycopg.Connection[Any], consumer: str, view: str,
                  last: bool) -> None:
    """Take back SELECT on `smile_mv.view` (if it still exists) and, when it was the
    consumer's `last` view on this machine, CONNECT and USAGE too."""
    name = role_name(consumer)
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone() is None:
        return
    role = sql.Identifier(name)
    qualified = sql.Identifier(MV_SCHEMA, view).as_string(conn)
    if conn.execute("SELECT to_regclass(%s)", (qualified,)).fetchone() != (None,):
        conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(
            sql.Identifier(MV_SCHEMA, view), role))
    if last:  # no more logins, and the sessions it has are ended
        db = conn.execute("SELECT current_database()").fetchone()
        assert db is not None
        conn.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(
            sql.Identifier(MV_SCHEMA), role))
        conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM {}").format(
            sql.Identifier(db[0]), role))
        conn.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(role))
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE usename = %s", (name,))


def grant_on(dsn: str, consumer: str, password: str, view: str,
             cluster_wide: bool = True) -> str:
    """`grant_reader` on the machine of `dsn` (SMILE's own DSN of it)."""
    with connect(dsn, autocommit=True, what="the MV's machine") as conn:
        return grant_reader(conn, consumer, password, view, cluster_wide)


def revoke_on(dsn: str, consumer: str, view: str, last: bool) -> None:
    """`revoke_reader` on the machine of `dsn`."""
    with connect(dsn, autocommit=True, what="the MV's machine") as conn:
        revoke_reader(conn, consumer, view, last)


def reader_dsn(dsn: str, consumer: str, password: str) -> str:
    """The DSN a consumer reads its MVs with on the machine of `dsn` (SMILE's own DSN of it,
    which is never handed out): the same host, port and database, the consumer's role.

    >>> reader_dsn("postgresql://smile:x@10.0.0.5:5433/apps", "app1", "p w")
    'postgresql://smile_c_app1:p%20w@10.0.0.5:5433/apps'
    """
    d = conninfo_to_dict(dsn)
    return (f"postgresql://{role_name(consumer)}:{quote(password)}@"
            f"{d.get('host', '127.0.0.1')}:{d.get('port', 5432)}/{d.get('dbname', '')}")
