"""DeltaToRel(Δv → v): apply the signed rows of Δv with `__ts ∈ (TS(v), t]` to v as a bag.

Per distinct row (composite equality: NULLs equal, as GROUP BY and EXCEPT ALL see them) the net
sign is summed; `+k` inserts k copies, `-k` deletes k copies (by ctid). All of it, and TS(v) = t,
happen in one transaction under a lock on v's timestamp row, so a repeated or concurrent call
with the same or an older `t` does nothing.

Must not: read a live base table (NOTES §3), or commit anything but its own transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.errors import AgentError
from smile.operators import vertex_ts

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

    @property
    def noop(self) -> bool:
        return self.from_ts >= self.to_ts


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
) -> Applied:
    """Advance relation vertex `rel` to `to_ts` from `delta` (both (schema, table)). With
    `probe`, an indexed column of `rel`, rows to delete are found through that index instead
    of a scan of the whole relation."""
    with conn.transaction():
        have = vertex_ts.lock(conn, rel_vertex)
        if have >= to_ts:
            return Applied(have, have, 0, 0)
        watermark = vertex_ts.read(conn, delta_vertex)
        if watermark < to_ts:
            raise AgentError(
                f"cannot advance {rel_vertex} to {to_ts.isoformat()}: {delta_vertex} is complete "
                f"only up to {watermark.isoformat()}"
            )
        rel_t = sql.Identifier(*rel)
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        # the net sign per distinct row, computed once (grouping by the columns, which is
        # faster than by the row value and treats NULLs alike)
        conn.execute(sql.SQL(
            "CREATE TEMP TABLE __net ON COMMIT DROP AS "
            "SELECT ROW({cols})::{rel_t} AS __r, __n FROM ("
            " SELECT {cols}, sum(__sign)::bigint AS __n FROM {delta_t}"
            " WHERE __ts > %(a)s AND __ts <= %(b)s GROUP BY {cols} HAVING sum(__sign) <> 0) g"
        ).format(cols=cols, rel_t=rel_t, delta_t=sql.Identifier(*delta)),
            {"a": have, "b": to_ts})
        net = sql.SQL("WITH net AS (SELECT __r, __n FROM pg_temp.__net), ")
        if probe is None:  # no indexed column to narrow the search: scan the relation
            candidates = sql.SQL(
                "SELECT __t.ctid, __t AS __r FROM {rel_t} __t "
                "WHERE __t IN (SELECT __r FROM net WHERE __n < 0)").format(rel_t=rel_t)
        else:  # probe the index on `probe` with the keys of the rows to delete
            p = sql.Identifier(probe)
            candidates = sql.SQL(
                "SELECT __t.ctid, __t AS __r FROM {rel_t} __t "
                "JOIN (SELECT DISTINCT (__r).{p} AS __k FROM net WHERE __n < 0) __keys "
                "ON __t.{p} = __keys.__k WHERE __t IN (SELECT __r FROM net WHERE __n < 0) "
                "UNION ALL SELECT __t.ctid, __t FROM {rel_t} __t WHERE __t.{p} IS NULL "
                "AND EXISTS (SELECT 1 FROM net WHERE __n < 0 AND (__r).{p} IS NULL) "
                "AND __t IN (SELECT __r FROM net WHERE __n < 0)").format(rel_t=rel_t, p=p)
        deleted = conn.execute(
            net
            + sql.SQL(
                "victims AS ("
                " SELECT v.ctid AS c FROM ("
                "  SELECT __c.ctid, __c.__r, row_number() OVER (PARTITION BY __c.__r) AS __rn"
                "  FROM ({candidates}) __c) v"
                " JOIN net ON v.__r = net.__r WHERE v.__rn <= -net.__n) "
                "DELETE FROM {rel_t} WHERE ctid IN (SELECT c FROM victims)"
            ).format(rel_t=rel_t, candidates=candidates)).rowcount
        inserted = conn.execute(
            sql.SQL(
                "INSERT INTO {rel_t} ({cols}) SELECT (__r).* FROM pg_temp.__net, "
                "generate_series(1, __n) WHERE __n > 0"
            ).format(rel_t=rel_t, cols=cols)).rowcount
        conn.execute("DROP TABLE pg_temp.__net")
        vertex_ts.advance(conn, rel_vertex, to_ts)
        return Applied(have, to_ts, inserted, deleted)
