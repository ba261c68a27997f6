"""DeltaToRel(Δv → v): apply the signed rows of Δv with `__ts ∈ (TS(v), t]` to v as a bag.

Per distinct row (composite equality: NULLs equal, as GROUP BY and EXCEPT ALL see them) the net
sign is summed; `+k` inserts k copies, `-k` deletes k copies (by ctid). A slice without a
negative row (new tweets and what they join, in a short interval) is inserted as it is, and an
empty one only moves TS(v): the grouping, its temporary table and the search for rows to update
or delete cost several milliseconds a push even when they find nothing. A large slice with a
few rows leaving (an edited tweet among thousands of new ones) is split on an indexed column:
only the rows that share its value with a leaving row (or have none) are grouped, the rest
inserted as they are. With an indexed `probe` column, a key that loses one row and gains one
(an UPDATE upstream) is updated in place. A slice netted whole whose leaving rows are found
through an index — a small push's usual case — is applied in one statement (`_net_at_once`:
the net rows, the pairs updated, the deletions, the insertions and TS(v)); the others keep the
net rows in a temporary table for the steps that follow. All of it, and TS(v) = t, happen in
one transaction under a lock on v's timestamp row, so a repeated or concurrent call with the
same or an older `t` does nothing.

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
    from collections.abc import Callable, Sequence
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
        # the lock, the delta's TS and the slice's size in one round trip
        have, (delta_at, counts) = vertex_ts.begin_local_advance_with(conn, rel_vertex, (
            vertex_ts.input_ts_of(sql.Literal(delta_vertex)),
            vertex_ts.slice_counts(delta, vertex_ts.LOCKED_TS, to_ts)))
        if have >= to_ts:
            return Applied(have, have, 0, 0)
        ready = vertex_ts.ready(f"cannot advance {rel_vertex} to {to_ts.isoformat()}",
                                (delta_vertex,), (delta_at,), counts, to_ts)
        read, negative = ready.rows, ready.leaving
        rel_t = sql.Identifier(*rel)
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        delta_t = sql.Identifier(*delta)
        if negative == 0:  # insertions only (or nothing): each row goes in as it is
            if read == 0:
                vertex_ts.advance(conn, rel_vertex, to_ts)
                return Applied(have, to_ts, 0, 0, read)
            inserted = vertex_ts.write_and_advance(conn, rel_vertex, to_ts, sql.SQL(
                "INSERT INTO {rel_t} ({cols}) SELECT {cols} FROM {delta_t}, "
                "generate_series(1, __sign) WHERE __ts > {a} AND __ts <= {b}").format(
                rel_t=rel_t, cols=cols, delta_t=delta_t, a=sql.Literal(have),
                b=sql.Literal(to_ts)))
            return Applied(have, to_ts, inserted, 0, read)
        stats = index_stats(conn, rel)
        key = most_selective(stats, probe) if _splits(split, read, negative) else None
        lit = {"a": sql.Literal(have), "b": sql.Literal(to_ts)}
        rows = sql.SQL("SELECT * FROM {} WHERE __ts > {a} AND __ts <= {b}").format(
            delta_t, **lit)
        direct = 0
        if key is not None:  # the rows no leaving row shares a key with go in as they are
            k = sql.Identifier(key)
            gone = sql.SQL("SELECT {k} FROM {d} WHERE __ts > {a} AND __ts <= {b} "
                           "AND __sign < 0 AND {k} IS NOT NULL").format(k=k, d=delta_t, **lit)
            direct = int(conn.execute(sql.SQL(
                "INSERT INTO {rel_t} ({cols}) SELECT {cols} FROM ({rows}) d, "
                "generate_series(1, d.__sign) WHERE d.{k} NOT IN ({gone})").format(
                    rel_t=rel_t, cols=cols, rows=rows, k=k, gone=gone)).rowcount)
            # and only the others are netted: NULL keys, and keys a leaving row has
            rows = sql.SQL("{rows} AND ({k} IS NULL OR NOT ({k} NOT IN ({gone})))").format(
                rows=rows, k=k, gone=gone)
        # the net sign per distinct row, computed once (grouping by the columns, which is
        # faster than by the row value and treats NULLs alike)
        net = sql.SQL(
            "SELECT ROW({cols})::{rel_t} AS __r, __n FROM ("
            " SELECT {cols}, sum(__sign)::bigint AS __n FROM ({rows}) d GROUP BY {cols}"
            " HAVING sum(__sign) <> 0) g").format(cols=cols, rel_t=rel_t, rows=rows)
        indexed = [c for c, _ in stats.columns]
        if key is None and (via := choose_probe(
                stats, _leaving_in_slice(conn, delta_t, indexed, have, to_ts), probe)):
            # a slice netted whole, its leaving rows found through an index: all of it in
            # one statement (no temporary table, 3 round trips fewer)
            updated, deleted, inserted = _net_at_once(conn, rel_t, columns, via, net,
                                                      rel_vertex, to_ts)
            return Applied(have, to_ts, inserted + updated, deleted + updated, read, read)
        conn.execute(sql.SQL("CREATE TEMP TABLE __net ON COMMIT DROP AS {}").format(net))
        # the rows to find are those leaving (an arriving row is only inserted): through
        # the index that reads fewest rows for their distinct values, or in one pass
        probe = choose_probe(stats, _leaving_values(conn, indexed), probe)
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
            deleted = conn.execute(sql.SQL("WITH {} DELETE FROM {} WHERE {}").format(
                _victims(rel_t, probe, sql.SQL("pg_temp.__net")), rel_t, _VICTIMS)).rowcount
        inserted = vertex_ts.write_and_advance(conn, rel_vertex, to_ts, sql.SQL(
            "INSERT INTO {rel_t} ({cols}) SELECT (__r).* FROM pg_temp.__net, "
            "generate_series(1, __n) WHERE __n > 0").format(rel_t=rel_t, cols=cols))
        if not own:  # in the caller's transaction, before another DeltaToRel makes its
            conn.execute("DROP TABLE pg_temp.__net")  # own (else the commit drops it)
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
    return _distinct(conn, columns, lambda c: sql.SQL("(__r).{}").format(sql.Identifier(c)),
                     sql.SQL("pg_temp.__net WHERE __n < 0"))


def _leaving_in_slice(conn: psycopg.Connection[Any], delta_t: sql.Identifier,
                      columns: Sequence[str], lo: datetime, hi: datetime) -> dict[str, int]:
    """Per column, how many distinct values the negative rows of the slice have: at least
    as many as the rows leaving once netted (`_leaving_values`), read before the netting."""
    return _distinct(conn, columns, sql.Identifier, sql.SQL(
        "{} WHERE __ts > {} AND __ts <= {} AND __sign < 0").format(
        delta_t, sql.Literal(lo), sql.Literal(hi)))


def _distinct(conn: psycopg.Connection[Any], columns: Sequence[str],
              value: Callable[[str], sql.Composable], rows: sql.Composable) -> dict[str, int]:
    """Per column, `count(DISTINCT value(column))` over `rows` (a FROM clause), in one
    statement; nothing asked without columns."""
    if not columns:
        return {}
    row = conn.execute(sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(sql.SQL("count(DISTINCT {})").format(value(c)) for c in columns),
        rows)).fetchone()
    return dict(zip(columns, (int(n) for n in row), strict=True)) if row else {}


def _pairs(rel_t: sql.Identifier, columns: Sequence[str], probe: str, net: sql.Composable
           ) -> sql.Composed:
    """CTEs `pr`, the pairs of `net` (a table or CTE of `__r`, `__n`) that `_update_pairs`
    describes, and `done`, their rows updated in place, returning the keys updated (`__k`)."""
    p = sql.Identifier(probe)
    sets = sql.SQL(", ").join(sql.SQL("{c} = (v.__new).{c}").format(c=sql.Identifier(c))
                              for c in columns)
    return sql.SQL(
        "pr AS ("
        " SELECT (array_agg(__r) FILTER (WHERE __n < 0))[1] AS __old,"
        " (array_agg(__r) FILTER (WHERE __n > 0))[1] AS __new"
        " FROM {net} WHERE (__r).{p} IS NOT NULL GROUP BY (__r).{p}"
        " HAVING count(*) = 2 AND min(__n) = -1 AND max(__n) = 1), "
        "done AS ("
        " UPDATE {rel_t} __u SET {sets} FROM ("
        "  SELECT x.c, pr.__new FROM pr, LATERAL (SELECT __t.ctid AS c"
        "   FROM {rel_t} __t WHERE __t.{p} = (pr.__old).{p} AND __t = pr.__old LIMIT 1) x) v"
        " WHERE __u.ctid = v.c RETURNING __u.{p} AS __k)").format(
        net=net, rel_t=rel_t, sets=sets, p=p)


_VICTIMS = sql.SQL("ctid = ANY(ARRAY(SELECT c FROM victims WHERE __rn <= __k))")
"""The rows `_victims` found to delete, as a DELETE's condition."""


def _victims(rel_t: sql.Identifier, probe: str, net: sql.Composable) -> sql.Composed:
    """CTEs `net` (the leaving rows of `net`, a table or CTE of `__r`, `__n`), `found` (the
    rows of `rel` with their values of `probe`, through its index, or NULL) and `victims`
    (per leaving row, its first -n copies among them: `_VICTIMS`)."""
    p = sql.Identifier(probe)
    return sql.SQL(
        "net AS (SELECT __r, __n FROM {net} WHERE __n < 0), "
        "found AS ("
        " SELECT __t.ctid AS c, __t AS __r FROM {rel_t} __t"
        " WHERE __t.{p} = ANY(ARRAY(SELECT DISTINCT (__r).{p} FROM net"
        "  WHERE (__r).{p} IS NOT NULL))"
        " UNION ALL SELECT __t.ctid, __t FROM {rel_t} __t WHERE __t.{p} IS NULL"
        " AND EXISTS (SELECT FROM net WHERE (__r).{p} IS NULL)), "
        "victims AS (SELECT f.c, row_number() OVER (PARTITION BY f.__r) AS __rn,"
        " -net.__n AS __k FROM found f JOIN net ON f.__r = net.__r)").format(
        net=net, rel_t=rel_t, p=p)


def _update_pairs(conn: psycopg.Connection[Any], rel_t: sql.Identifier, columns: Sequence[str],
                  probe: str) -> int:
    """Where a key of `probe` has exactly one row leaving (-1) and one arriving (+1) — an
    UPDATE at the source — change the leaving row in place instead of deleting it and
    inserting the other: half the row versions, and no index entries at all when the indexed
    columns stay the same and the page has room (HOT; vertex tables leave 10% free). The pairs
    updated leave `__net`; what remains is applied as deletions and insertions. Returns rows
    updated."""
    # one statement, the pairs a CTE: a temporary table of them cost a catalog row written
    # and dropped per push, and two more round trips
    row = conn.execute(sql.SQL(
        "WITH {}, gone AS (DELETE FROM pg_temp.__net WHERE (__r).{} IN (SELECT __k FROM done)) "
        "SELECT count(*) FROM done").format(
        _pairs(rel_t, columns, probe, sql.SQL("pg_temp.__net")), sql.Identifier(probe))
    ).fetchone()
    return int(row[0]) if row else 0


def _net_at_once(conn: psycopg.Connection[Any], rel_t: sql.Identifier, columns: Sequence[str],
                 probe: str, net: sql.Composable, rel_vertex: str, to_ts: datetime
                 ) -> tuple[int, int, int]:
    """What the temporary table's steps do — `_update_pairs`, the deletions through `probe`,
    the insertions, TS(v) = `to_ts` — as one statement over `net` (the query of `__r`,
    `__n`): (rows updated, deleted, inserted). The rows updated are left out of the rest
    by their key; deleted and updated rows are never the same (a deleted one matches a
    leaving row of another key), and rows inserted are not seen by the deletion."""
    p = sql.Identifier(probe)
    row = conn.execute(sql.SQL(
        "WITH __all AS MATERIALIZED ({net}), {pairs}, "
        "__rest AS MATERIALIZED (SELECT __r, __n FROM __all"
        " WHERE (__r).{p} IS NULL OR (__r).{p} NOT IN (SELECT __k FROM done)), "
        "{victims}, "
        "gone AS (DELETE FROM {rel_t} WHERE {where} RETURNING 1), "
        "__w AS (INSERT INTO {rel_t} ({cols}) SELECT (__r).* FROM __rest, "
        " generate_series(1, __n) WHERE __n > 0 RETURNING 1), "
        "__a AS ({advance}) "
        "SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM gone), "
        "(SELECT count(*) FROM __w)").format(
        net=net, pairs=_pairs(rel_t, columns, probe, sql.SQL("__all")), p=p,
        victims=_victims(rel_t, probe, sql.SQL("__rest")), rel_t=rel_t, where=_VICTIMS,
        cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        advance=vertex_ts.advance_statement(rel_vertex, to_ts))).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])
