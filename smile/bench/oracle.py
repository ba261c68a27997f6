"""The oracle for a running cloud (docs/design/semantics.md §2: an MV at TS is its query over
the bases at TS): a sharing's query run by PostgreSQL itself on copies of the bases, compared
as a bag with the sharing's MV.

Every published base relation is copied (COPY, database to database) into a scratch schema
on the MV's machine, the query runs there with that schema first on the search path, and the
schema is dropped again. Run it once the sources are quiet and the MV is past them.

Must not: leave its scratch schema behind.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

from psycopg import sql

from smile.db import connect
from smile.deploy.install import MV_SCHEMA, stream_rows
from smile.errors import SmileError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from smile.topology import Topology


def mv_diff(topology: Topology, name: str, mv_machine: str, query: str,
            where: Mapping[str, str], relations: Iterable[str]) -> tuple[int, int]:
    """(rows in the MV `smile_mv.<name>`, rows by which it differs from `query` run on copies
    of `relations`, each found on machine `where[relation]`)."""
    schema = f"oracle_{time.monotonic_ns()}"
    with connect(topology.machine(mv_machine).dsn, autocommit=True, what=mv_machine) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            for rel in relations:
                with connect(topology.machine(where[rel]).dsn, autocommit=True,
                             what=where[rel]) as src:
                    row = src.execute(
                        "SELECT string_agg(quote_ident(attname) || ' ' || format_type("
                        "atttypid, atttypmod), ', ' ORDER BY attnum), array_agg(attname "
                        "ORDER BY attnum) FROM pg_attribute WHERE attrelid = "
                        "%s::regclass AND attnum > 0 AND NOT attisdropped",
                        (f"public.{rel}",)).fetchone()
                    if row is None or row[0] is None:
                        raise SmileError(f"no relation public.{rel} on {where[rel]}")
                    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(
                        sql.Identifier(schema, rel), sql.SQL(row[0])))
                    stream_rows(src, sql.SQL("SELECT * FROM {}").format(
                        sql.Identifier("public", rel)), conn,
                        sql.Identifier(schema, rel), list(row[1]))
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            want = Counter(conn.execute(query.encode()).fetchall())
            conn.execute("SET search_path = public")
            got = Counter(conn.execute(sql.SQL("SELECT * FROM {}").format(
                sql.Identifier(MV_SCHEMA, name))).fetchall())
        finally:
            conn.execute("SET search_path = public")
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    return sum(got.values()), sum(((got - want) + (want - got)).values())
