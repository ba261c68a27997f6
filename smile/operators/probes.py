"""Whether finding rows of a relation vertex through its index, once per input row, beats one
pass over the whole relation — asked by the join (probing X̂) and by DeltaToRel (finding the
rows it replaces or deletes), from planner statistics only: the relation's size (pg_class) and,
for a key column, how many rows share a value (pg_stats). A relation vertex is analyzed when
installed and by autovacuum.

An MV no join probes is indexed on its most distinct column once filled (`most_distinct`), and
DeltaToRel probes whichever indexed column finds the fewest rows per value (`choose_probe`): an
MV indexed on its join key, `loc ⋈ tweets` on `uid`, holds for a user who tweets much and moves
often hundreds of rows per tweet and millions per user, so a push that deleted one edited
tweet's rows read the whole MV (2.2M rows, 9 scans in 5 minutes); on `tid` it reads that
tweet's.

Must not: count rows (that would cost what it is meant to save).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.db import regclass_name

if TYPE_CHECKING:
    from collections.abc import Mapping

    import psycopg

PROBE_RATIO = 16
"""A row found through an index costs about as much as this many rows of the relation read by
a sequential scan into a hash (both cached)."""


def probes_pay_at(size: float | None, inputs: int, per_key: float | None = None
                  ) -> bool | None:
    """True if `inputs` index probes, each reading `per_key` rows (unknown: one, as selective
    as can be), cost less than a pass over the relation's `size` rows (`reltuples`, read by
    the caller); None while the statistics are unknown.

    >>> probes_pay_at(10_000.0, 100), probes_pay_at(10_000.0, 1000), probes_pay_at(-1.0, 1)
    (True, False, None)
    """
    if size is None or size <= 0:
        return None
    return inputs * (per_key or 1.0) * PROBE_RATIO < size


def reltuples(table: tuple[str, str]) -> sql.Composed:
    """An expression: the planner's row count of `table` (`pg_class.reltuples`; -1 or 0
    before its first ANALYZE, NULL without the table), for a caller that reads it inside
    another statement."""
    return sql.SQL("(SELECT reltuples FROM pg_class WHERE oid = to_regclass({}))").format(
        regclass_name(table))


_INDEXED = """
SELECT a.attname, c.reltuples, s.n_distinct,
       (SELECT max(f) FROM unnest(s.most_common_freqs) f)
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
LEFT JOIN pg_stats s ON s.schemaname = %s AND s.tablename = %s AND s.attname = a.attname
WHERE i.indrelid = %s::regclass AND i.indnatts = 1 AND i.indkey[0] > 0
ORDER BY a.attnum
"""


def rows_per_value(size: float, distinct: float | None, top_freq: float | None) -> float | None:
    """Rows a lookup of one value of a column reads, from pg_stats: the mean (n_distinct,
    negative when a fraction of the rows) or, when higher, its most common value's rows — the
    values that change are those of the busiest users, so a skewed column is judged by them.
    None when unknown.

    >>> rows_per_value(10_000.0, 5001.0, 0.5)  # one user holds half the rows
    5000.0
    >>> rows_per_value(10_000.0, -0.5, None)
    2.0
    """
    if distinct is None or float(distinct) == 0 or size <= 0:
        return None
    d = float(distinct)
    mean = 1.0 / -d if d < 0 else max(1.0, size / d)
    return max(mean, float(top_freq or 0.0) * size)


@dataclass(frozen=True)
class IndexStats:
    """A relation's size and, per column with an index of its own, the rows one lookup of a
    value reads (`rows_per_value`; None while unknown)."""

    size: float
    columns: tuple[tuple[str, float | None], ...]


def index_stats(conn: psycopg.Connection[Any], table: tuple[str, str]) -> IndexStats:
    """`IndexStats` of `table`, its single-column indexes in column order."""
    rows = conn.execute(_INDEXED, (table[0], table[1],
                                   sql.Identifier(*table).as_string(conn))).fetchall()
    size = float(rows[0][1] or 0.0) if rows else 0.0
    return IndexStats(size, tuple((str(col), rows_per_value(size, d, top))
                                  for col, _, d, top in rows))


def choose_probe(stats: IndexStats, lookups: Mapping[str, int], hint: str | None = None
                 ) -> str | None:
    """The indexed column whose lookups — `lookups[c]` distinct values, each read once — read
    the fewest rows, if that costs less than a pass over the relation; `hint` (or the first
    indexed column) while the statistics are unknown; None without an indexed column or when
    a pass costs less.

    >>> stats = IndexStats(1e6, (("uid", 4e5), ("tid", 200.0)))  # a busy user, her tweets
    >>> choose_probe(stats, {"uid": 1, "tid": 40})  # 40 × 200 × 16 < 1M
    'tid'
    >>> choose_probe(stats, {"uid": 50, "tid": 400}) is None  # 400 × 200 × 16 > 1M
    True
    >>> choose_probe(IndexStats(1e6, (("uid", None), ("tid", None))), {}, "tid")
    'tid'
    """
    known = [(lookups.get(col, 0) * per_value, col) for col, per_value in stats.columns
             if per_value is not None]
    if not known:
        return _hinted(stats, hint)
    rows, col = min(known)
    return col if rows * PROBE_RATIO < stats.size else None


def most_selective(stats: IndexStats, hint: str | None = None) -> str | None:
    """The indexed column with the fewest rows per value; `hint` (or the first indexed
    column) while the statistics are unknown; None without an indexed column.

    >>> most_selective(IndexStats(1e6, (("uid", 4e5), ("tid", 200.0))), "uid")
    'tid'
    >>> most_selective(IndexStats(0.0, (("uid", None), ("tid", None))), "tid")
    'tid'
    >>> most_selective(IndexStats(0.0, ()), "tid") is None
    True
    """
    known = [(per_value, col) for col, per_value in stats.columns if per_value is not None]
    return min(known)[1] if known else _hinted(stats, hint)


def _hinted(stats: IndexStats, hint: str | None) -> str | None:
    """`hint` if it is an indexed column, else the first indexed column, else None."""
    names = [col for col, _ in stats.columns]
    return hint if hint in names else names[0] if names else None


def most_distinct(conn: psycopg.Connection[Any], table: tuple[str, str],
                  columns: list[str]) -> str | None:
    """Of `columns`, the one whose lookups read the fewest rows (`rows_per_value`) in the
    table's statistics (an ANALYZE after its fill); None when they are unknown."""
    rows = conn.execute(
        "SELECT s.attname, c.reltuples, s.n_distinct,"
        " (SELECT max(f) FROM unnest(s.most_common_freqs) f)"
        " FROM pg_class c JOIN pg_stats s ON s.schemaname = %s AND s.tablename = %s"
        " WHERE c.oid = %s::regclass",
        (table[0], table[1], sql.Identifier(*table).as_string(conn))).fetchall()
    known = [(k, columns.index(col), str(col)) for col, size, d, top in rows
             if col in columns and (k := rows_per_value(float(size or 0.0), d, top)) is not None]
    return min(known)[2] if known else None
