"""What the executor reads of the apps' published tables and of their deltas to plan: table
sizes, column statistics and change counters (the catalog snapshot, the rate monitor), and
the keys the changes in a delta carry and what they meet in another table (the skew of a
join). Read-only, on the connections it is handed.

Must not: change anything on a machine, or decide what the numbers mean (the executor's
`catalog_live`, `rates` and `skew` do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.delta_capture.registry import delta_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    import psycopg

_TABLES = """
SELECT c.relname, c.reltuples::float8,
       coalesce(s.n_tup_ins + s.n_tup_del + 2 * s.n_tup_upd, 0)::float8
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = 'public' AND c.relkind = 'r'
"""
_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), coalesce(st.n_distinct, -1)::float8,
       coalesce(st.null_frac, 0)::float8, coalesce(st.avg_width, 8)
FROM pg_attribute a LEFT JOIN pg_stats st
  ON st.schemaname = 'public' AND st.tablename = %s AND st.attname = a.attname
WHERE a.attrelid = ('public.' || quote_ident(%s))::regclass AND a.attnum > 0
  AND NOT a.attisdropped ORDER BY a.attnum
"""
_COUNTERS = """
SELECT relname, (n_tup_ins + n_tup_del + 2 * n_tup_upd)::float8,
       (n_tup_ins - n_tup_del)::float8
FROM pg_stat_user_tables WHERE schemaname = 'public'
"""


def tables(conn: psycopg.Connection[Any], analyze: bool = False
           ) -> list[tuple[str, float, float]]:
    """Every public table: (name, estimated rows, delta rows so far — inserts + deletes + 2 ×
    updates). With `analyze`, those tables are ANALYZEd first — only those: a bare ANALYZE
    would also take every delta table, intermediate vertex and MV of the running plan."""
    rows: list[tuple[str, float, float]] = conn.execute(_TABLES).fetchall()
    if analyze and rows:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(", ").join(
            sql.Identifier("public", name) for name, _, _ in rows)))
        rows = conn.execute(_TABLES).fetchall()
    return rows


def columns(conn: psycopg.Connection[Any], table: str
            ) -> list[tuple[str, str, float, float, int]]:
    """A public table's columns: (name, type, n_distinct as pg_stats has it, null fraction,
    average width)."""
    return [(c, t, float(nd), float(nf), int(w))
            for c, t, nd, nf, w in conn.execute(_COLUMNS, (table, table)).fetchall()]


def captured_columns(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, ...]]:
    """The public tables capture keeps: their columns as published (a column added since is
    not in ΔR and R̂ until the table is published again, so no sharing may read it)."""
    if conn.execute("SELECT to_regclass('_smile.captured_relations')").fetchone() == (None,):
        return {}
    rows = conn.execute("SELECT table_name, columns FROM _smile.captured_relations "
                        "WHERE schema_name = 'public'").fetchall()
    return {str(r[0]): tuple(str(c["name"]) for c in r[1]) for r in rows}


def change_counters(conn: psycopg.Connection[Any]) -> list[tuple[str, float, float]]:
    """Every public table: (name, delta rows so far, net rows inserted so far)."""
    return list(conn.execute(_COUNTERS).fetchall())


def delta_keys(conn: psycopg.Connection[Any], table: str, column: str,
               read: Sequence[str], limit: int) -> tuple[int, list[tuple[str, float]]]:
    """How many rows the delta of public `table` holds, and its `limit` keys most changed in
    `column` (as text, with their changes): consolidated on the columns a sharing reads
    (`read`), as its join consolidates them — an UPDATE of a column it does not read is a −
    and a + that cancel and meet nothing."""
    delta = sql.Identifier("_smile", delta_table("public", table))
    total = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(delta)).fetchone()
    keys = conn.execute(sql.SQL(
        "SELECT {c}::text, sum(n) FROM (SELECT {c}, abs(sum(__sign)) AS n FROM {d} "
        "GROUP BY {cols}, __ts HAVING sum(__sign) <> 0) g WHERE {c} IS NOT NULL "
        "GROUP BY 1 ORDER BY 2 DESC LIMIT {n}").format(
        c=sql.Identifier(column), d=delta,
        cols=sql.SQL(", ").join(sql.Identifier(c) for c in sorted({column, *read})),
        n=sql.Literal(limit))).fetchall()
    return (int(total[0]) if total else 0), [(k, float(n)) for k, n in keys]


def rows_met(conn: psycopg.Connection[Any], table: str, column: str, column_type: str,
             keys: Sequence[tuple[str, float]]) -> float:
    """Rows of public `table` whose `column` (of `column_type`, a plain type name) equals
    each key, weighted by the key's changes, all together."""
    row = conn.execute(sql.SQL(
        "SELECT coalesce(sum(k.w * x.n), 0) FROM unnest(%s::text[], %s::float8[]) "
        "k(key, w) JOIN (SELECT {c}::text AS key, count(*) AS n FROM {x} "
        "WHERE {c} = ANY(%s::text[]::{t}[]) GROUP BY 1) x USING (key)").format(
        c=sql.Identifier(column), x=sql.Identifier("public", table), t=sql.SQL(column_type)),
        ([k for k, _ in keys], [w for _, w in keys], [k for k, _ in keys])).fetchone()
    return float(row[0]) if row else 0.0


def relation_rows(conn: psycopg.Connection[Any], tables: Sequence[tuple[str, str]]
                  ) -> dict[str, float]:
    """Rows of each of `tables` ((schema, name)) as the statistics have them (`reltuples`;
    0 for one never analysed), by name; tables that do not exist are left out."""
    return {name: max(0.0, float(n)) for name, n in conn.execute(
        "SELECT c.relname, c.reltuples FROM pg_class c JOIN pg_namespace s "
        "ON s.oid = c.relnamespace JOIN unnest(%s::text[], %s::text[]) AS t(sch, rel) "
        "ON t.sch = s.nspname AND t.rel = c.relname",
        ([s for s, _ in tables], [t for _, t in tables])).fetchall()}
