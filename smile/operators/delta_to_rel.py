"""DeltaToRel(Δv → v): apply the signed rows of Δv with `__ts ∈ (TS(v), t]` to v as a bag.

Per distinct row (composite equality: NULLs equal, as GROUP BY and EXCEPT ALL see them) the net
sign is summed; `+k` inserts k copies, `-k` deletes k copies (by ctid). A slice without a
negative row (new tweets and what they join, in a short interval) is inserted as it is, and an
empty one only moves TS(v): the grouping, its temporary table and the search for rows to update
or delete cost several milliseconds a push even when they find nothing. A large slice with a
few rows leaving (an edited tweet among thousands of new ones) is split on an indexed column:
only the rows that share its value with a leaving row (or have none) are grouped, the rest
inserted as they are. With an indexed `probe` column, a key that loses one row and gains one
(an UPDATE upstream) is updated in place. All of it, and TS(v) = t, happen in one transaction
under a lock on v's timestamp row, so a repeated or concurrent call with the same or an older
`t` does nothing.

Must not: read a live base table (docs/design/semantics.md §3), or commit anything but its own
transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.pq import TransactionStatus

from smile.operators import vertex_ts
from smile.operators.probes import choose_probe, index_stats, most_selective

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    import psycopg


@dataclass(frozen=True)
class Applied:
    from_ts: datetime
    to_ts: datetime
    inserted: int
    deleted: int
    read: int = 0
    """Delta rows taken in."""
    netted: int = 0
    """Of those, the rows grouped to net their signs (the rest went in as they were)."""


def delta_to_rel(
    conn: psycopg.Connection[Any],
    *,
    delta: tuple[str, str],
    rel: tuple[str, str],
    columns: Sequence[str],
    rel_vertex: str,
    delta_vertex: str,
    to_ts: datetime,
    probe: str | None = None,
    split: bool | None = None,
) -> Applied:
    """Advance relation vertex `rel` to `to_ts` from `delta` (both (schema, table)). Rows to
    delete are found through the index of `rel` that reads the fewest rows per value
    (`probes.choose_probe`; `probe`, an indexed column, while its statistics are unknown) when
    that costs less than a scan of the whole relation. A slice with rows leaving nets only
    the rows that share the value of its most selective indexed column
    (`probes.most_selective`) with one of them, and the rest go in as they are: where
    `_splits` says it pays (`split` None), always (True), or never (False, the benchmark's
    baseline)."""
    own = conn.info.transaction_status == TransactionStatus.IDLE
    with conn.transaction():
        have = vertex_ts.begin_local_advance(conn, rel_vertex)
        if have >= to_ts:
            return Applied(have, have, 0, 0)
        ready = vertex_ts.ready_slice(
            conn, f"cannot advance {rel_vertex} to {to_ts.isoformat()}", (delta_vertex,), delta,
            have, to_ts)
        read, negative = ready.rows, ready.leaving
        rel_t = sql.Identifier(*rel)
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        delta_t = sql.Identifier(*delta)
        if negative == 0:  # insertions only (or nothing): each row goes in as it is
            inserted = conn.execute(sql.SQL(
                "INSERT INTO {rel_t} ({cols}) SELECT {cols} FROM {delta_t}, "
                "generate_series(1, __sign) WHERE __ts > %s AND __ts <= %s").format(
                rel_t=rel_t, cols=cols, delta_t=delta_t), (have, to_ts)).rowcount if read else 0
            vertex_ts.advance(conn, rel_vertex, to_ts)
            return Applied(have, to_ts, inserted, 0, read)
        stats = index_stats(conn, rel)
        key = most_selective(stats, probe) if _splits(split, read, negative) else None
        rows = sql.SQL("SELECT * FROM {} WHERE __ts > %(a)s AND __ts <= %(b)s").format(delta_t)
        direct = 0
        if key is not None:  # the rows no leaving row shares a key with go in as they are
            k = sql.Identifier(key)
            gone = sql.SQL("SELECT {k} FROM {d} WHERE __ts > %(a)s AND __ts <= %(b)s "
                           "AND __sign < 0 AND {k} IS NOT NULL").format(k=k, d=delta_t)
            direct = int(conn.execute(sql.SQL(
                "INSERT INTO {rel_t} ({cols}) SELECT {cols} FROM ({rows}) d, "
                "generate_series(1, d.__sign) WHERE d.{k} NOT IN ({gone})").format(
                    rel_t=rel_t, cols=cols, rows=rows, k=k, gone=gone),
                {"a": have, "b": to_ts}).rowcount)
            # and only the others are netted: NULL keys, and keys a leaving row has
            rows = sql.SQL("{rows} AND ({k} IS NULL OR NOT ({k} NOT IN ({gone})))").format(
                rows=rows, k=k, gone=gone)
        # the net sign per distinct row, computed once (grouping by the columns, which is
        # faster than by the row value and treats NULLs alike)
        conn.execute(sql.SQL(
            "CREATE TEMP TABLE __net ON COMMIT DROP AS "
            "SELECT ROW({cols})::{rel_t} AS __r, __n FROM ("
            " SELECT {cols}, sum(__sign)::bigint AS __n FROM ({rows}) d GROUP BY {cols}"
            " HAVING sum(__sign) <> 0) g"
        ).format(cols=cols, rel_t=rel_t, rows=rows),
            {"a": have, "b": to_ts})
        # the rows to find are those leaving (an arriving row is only inserted): through
        # the index that reads fewest rows for their distinct values, or in one pass
        probe = choose_probe(stats, _leaving_values(conn, [c for c, _ in stats.columns]),
                             probe)
        if probe is None:
            # no indexed column to narrow the search, or many rows share each value (an MV
            # on the join key of a skewed join): one pass over the relation
            updated = 0
            deleted = conn.execute(sql.SQL(
                "WITH net AS (SELECT __r, __n FROM pg_temp.__net WHERE __n < 0), "
                "victims AS (SELECT v.ctid AS c FROM ("
                " SELECT __t.ctid, __t AS __r, row_number() OVER (PARTITION BY __t) AS __rn"
                " FROM {rel_t} __t WHERE __t IN (SELECT __r FROM net)) v"
                " JOIN net ON v.__r = net.__r WHERE v.__rn <= -net.__n) "
                "DELETE FROM {rel_t} WHERE ctid IN (SELECT c FROM victims)"
            ).format(rel_t=rel_t)).rowcount
        else:  # replaced rows updated in place; then the rows of each value of `probe`
            # that rows leave are read once through its index, and per leaving row its
            # first -n copies among them deleted (a deleted tweet of a busy user leaves
            # hundreds of rows that share its id: one lookup, not one each)
            updated = _update_pairs(conn, rel_t, columns, probe)
            p = sql.Identifier(probe)
            deleted = conn.execute(sql.SQL(
                "WITH net AS (SELECT __r, __n FROM pg_temp.__net WHERE __n < 0), "
                "found AS ("
                " SELECT __t.ctid AS c, __t AS __r FROM {rel_t} __t"
                " WHERE __t.{p} = ANY(ARRAY(SELECT DISTINCT (__r).{p} FROM net"
                "  WHERE (__r).{p} IS NOT NULL))"
                " UNION ALL SELECT __t.ctid, __t FROM {rel_t} __t WHERE __t.{p} IS NULL"
                " AND EXISTS (SELECT FROM net WHERE (__r).{p} IS NULL)), "
                "victims AS (SELECT f.c, row_number() OVER (PARTITION BY f.__r) AS __rn,"
                " -net.__n AS __k FROM found f JOIN net ON f.__r = net.__r) "
                "DELETE FROM {rel_t} WHERE ctid = ANY(ARRAY("
                " SELECT c FROM victims WHERE __rn <= __k))"
            ).format(rel_t=rel_t, p=p)).rowcount
        inserted = conn.execute(
            sql.SQL(
                "INSERT INTO {rel_t} ({cols}) SELECT (__r).* FROM pg_temp.__net, "
                "generate_series(1, __n) WHERE __n > 0"
            ).format(rel_t=rel_t, cols=cols)).rowcount
        if not own:  # in the caller's transaction, before another DeltaToRel makes its
            conn.execute("DROP TABLE pg_temp.__net")  # own (else the commit drops it)
        vertex_ts.advance(conn, rel_vertex, to_ts)
        return Applied(have, to_ts, direct + inserted + updated, deleted + updated, read,
                       read - direct)  # a delta row's sign is ±1: one row in, one in v


SPLIT_MIN_ROWS = 1000
"""A slice under this many rows is netted whole: splitting it reads it twice more, for a few
rows (a push of 300 new rows split by force measured 1.04 of the same push netted whole)."""
SPLIT_MAX_LEAVING = 100_000
"""A slice with more rows leaving than this is netted whole. The leaving keys are looked up in
a hash the `NOT IN` subquery builds once (a hashed SubPlan), which PostgreSQL builds only for
what it estimates fits in `work_mem` × `hash_mem_multiplier`; beyond it would run the subquery
once per row, and a slice with that many rows leaving gains little anyway."""


def _splits(split: bool | None, read: int, leaving: int) -> bool:
    """Whether a slice of `read` rows, `leaving` of them negative, is split: `split` when
    given, else when it is large and a quarter or less of it leaves.

    >>> _splits(None, 5000, 150), _splits(None, 500, 1), _splits(None, 5000, 2000)
    (True, False, False)
    >>> _splits(True, 10, 5), _splits(False, 50_000, 1)
    (True, False)
    """
    if split is not None:
        return split
    return read >= SPLIT_MIN_ROWS and 4 * leaving <= read and leaving <= SPLIT_MAX_LEAVING


def _leaving_values(conn: psycopg.Connection[Any], columns: Sequence[str]) -> dict[str, int]:
    """Per column, how many distinct values the rows leaving (`__net`, n < 0) have."""
    if not columns:
        return {}
    row = conn.execute(sql.SQL("SELECT {} FROM pg_temp.__net WHERE __n < 0").format(
        sql.SQL(", ").join(sql.SQL("count(DISTINCT (__r).{})").format(sql.Identifier(c))
                           for c in columns))).fetchone()
    return dict(zip(columns, (int(n) for n in row), strict=True)) if row else {}


def _update_pairs(conn: psycopg.Connection[Any], rel_t: sql.Identifier, columns: Sequence[str],
                  probe: str) -> int:
    """Where a key of `probe` has exactly one row leaving (-1) and one arriving (+1) — an
    UPDATE at the source — change the leaving row in place instead of deleting it and
    inserting the other: half the row versions, and no index entries at all when the indexed
    columns stay the same and the page has room (HOT; vertex tables leave 10% free). The pairs
    updated leave `__net`; what remains is applied as deletions and insertions. Returns rows
    updated."""
    p = sql.Identifier(probe)
    sets = sql.SQL(", ").join(sql.SQL("{c} = (v.__new).{c}").format(c=sql.Identifier(c))
                              for c in columns)
    # one statement, the pairs a CTE: a temporary table of them cost a catalog row written
    # and dropped per push, and two more round trips
    row = conn.execute(sql.SQL(
        "WITH pr AS ("
        " SELECT (array_agg(__r) FILTER (WHERE __n < 0))[1] AS __old,"
        " (array_agg(__r) FILTER (WHERE __n > 0))[1] AS __new"
        " FROM pg_temp.__net WHERE (__r).{p} IS NOT NULL GROUP BY (__r).{p}"
        " HAVING count(*) = 2 AND min(__n) = -1 AND max(__n) = 1), "
        "done AS ("
        " UPDATE {rel_t} __u SET {sets} FROM ("
        "  SELECT x.c, pr.__new FROM pr, LATERAL (SELECT __t.ctid AS c"
        "   FROM {rel_t} __t WHERE __t.{p} = (pr.__old).{p} AND __t = pr.__old LIMIT 1) x) v"
        " WHERE __u.ctid = v.c RETURNING __u.{p} AS __k), "
        "gone AS (DELETE FROM pg_temp.__net WHERE (__r).{p} IN (SELECT __k FROM done)) "
        "SELECT count(*) FROM done").format(rel_t=rel_t, sets=sets, p=p)).fetchone()
    return int(row[0]) if row else 0
