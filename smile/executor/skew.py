"""How skewed a sharing's joins are for the changes that will flow through them, measured on
the live data when it is submitted (issue 12: admission must see the load the sharing brings).

Uniform statistics say a changed row of R meets |X| / distinct keys rows of X through
`R.c = X.c'`. The rows that change are not uniform: in the evaluation data the users who move
(`loc`, `curloc`) are those who tweet most, and a change of `loc` meets ~100× the tweets of an
average user — at 1000 tweets/s, sharings over `loc ⋈ tweets` were admitted at a hundredth of
their load and the machines fell minutes behind. So for each join predicate of the query, in
both directions, this takes the keys of the changes ΔR holds now (capture keeps them until
every reader is past) — consolidated on the columns the sharing reads, as its joins will —
counts what each meets in X, and reports K = measured ÷ uniform per delta row
(`estimate.skew_key` → K, kept within [1/100, 1000]); the optimizer multiplies rates by it.
Uniform is what the estimate assumes, |X| · 1/max(distinct keys of R.c, of X.c'), not
|X| / distinct keys of X.c': a new tweet meets its one hashtag row if it has one, and with
hashtags on 15% of the tweets the latter read K = 0.15 where the estimate, which already
counts on 0.15 rows met, needed 1 (Δtweets ⋈ hashtags was estimated at 1/7 of its rate).
Too few changes (under 30) or an unreachable machine say nothing (K stays 1).

ΔR holds only the last seconds of changes, so one measurement samples a heavy-tailed
process: `tweets.uid>loc.uid` read 25.8 for S14 and 13.7 for S15, a second apart. A
later, lower reading overwrote the earlier one and lowered the predicted load of sharings
already running (m2: 0.23 → 0.14 over two submissions at 1000 tweets/s; measured later:
0.54). So the highest reading of a key is kept (`merge_skews`). Admission must not
under-predict, and the running vertices' rates are measured anyway (`observed.py`).

Must not: decide anything; it measures, read-only, with bounded work (the 5,000 most frequent
keys).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from psycopg import sql

from smile.costmodel.selectivity import join_selectivity
from smile.db import connect
from smile.delta_capture.registry import delta_table
from smile.optimizer.estimate import skew_key

if TYPE_CHECKING:
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.sharing import SpjQuery
    from smile.topology import Topology

log = logging.getLogger("smile.skew")

SKEWS_OPTION = "skews"
"""The catalog option (`CatalogStore.option`) under which the skews learnt so far are kept."""
MIN_CHANGES = 30
KEYS = 5000
K_RANGE = (0.01, 1000.0)
_TYPE = re.compile(r"^[a-z][a-z0-9 ]*(\(\d+(,\d+)?\))?$")


def measure_skews(topology: Topology, catalog: CatalogSnapshot, query: SpjQuery
                  ) -> dict[str, float]:
    """`skew_key` → K for every join predicate of `query`, both ways, where measurable."""
    aliases = {r.alias: r.relation for r in query.relations}
    out: dict[str, float] = {}
    for j in query.joins:
        ends = ((j.left, j.right), (j.right, j.left))
        for mine, other in ends:
            rel, col = aliases[mine.alias].split(".")[-1], mine.column
            xrel, xcol = aliases[other.alias].split(".")[-1], other.column
            key = skew_key(rel, col, xrel, xcol)
            if key in out:
                continue
            read = query.needed_columns(mine.alias) | {
                c for sel in query.selections_of(mine.alias) for c in sel.columns}
            try:
                k = _measure(topology, catalog, rel, col, xrel, xcol, sorted(read))
            except Exception as exc:  # a machine away: uniform, as before
                log.info("cannot measure %s: %s", key, exc)
                continue
            if k is not None:
                out[key] = k
    return out


def merge_skews(kept: dict[str, float], measured: dict[str, float]) -> dict[str, float]:
    """The skews known after a new measurement: per key, the highest reading so far.

    >>> merge_skews({"tweets.uid>loc.uid": 25.8}, {"tweets.uid>loc.uid": 13.7, "a.x>b.y": 2.0})
    {'tweets.uid>loc.uid': 25.8, 'a.x>b.y': 2.0}
    """
    return kept | {k: max(v, kept.get(k, v)) for k, v in measured.items()}


def _measure(topology: Topology, catalog: CatalogSnapshot, rel: str, col: str, xrel: str,
             xcol: str, read: list[str]) -> float | None:
    """K for changes of `rel` as the sharing sees them: consolidated on the columns it reads
    (`read`), as its join consolidates them — an UPDATE of a column it does not read is a − and
    a + that cancel and meet nothing — over all the delta rows (what the rate counts)."""
    r, x = catalog.relation(rel), catalog.relation(xrel)
    xtype = x.column(xcol).type
    if not _TYPE.match(xtype):
        return None
    delta = sql.Identifier("_smile", delta_table("public", rel))
    with connect(topology.machine(r.machine).dsn, autocommit=True, what=r.machine) as conn:
        total = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(delta)).fetchone()
        changes = int(total[0]) if total else 0
        if changes < MIN_CHANGES:
            return None
        keys: list[Any] = conn.execute(sql.SQL(
            "SELECT {c}::text, sum(n) FROM (SELECT {c}, abs(sum(__sign)) AS n FROM {d} "
            "GROUP BY {cols}, __ts HAVING sum(__sign) <> 0) g WHERE {c} IS NOT NULL "
            "GROUP BY 1 ORDER BY 2 DESC LIMIT {n}").format(
            c=sql.Identifier(col), d=delta,
            cols=sql.SQL(", ").join(sql.Identifier(c) for c in sorted({col, *read})),
            n=sql.Literal(KEYS))).fetchall()
    if not keys:
        return K_RANGE[0]
    with connect(topology.machine(x.machine).dsn, autocommit=True, what=x.machine) as conn:
        row = conn.execute(sql.SQL(
            "SELECT coalesce(sum(k.w * x.n), 0) FROM unnest(%s::text[], %s::float8[]) "
            "k(key, w) JOIN (SELECT {c}::text AS key, count(*) AS n FROM {x} "
            "WHERE {c} = ANY(%s::text[]::{t}[]) GROUP BY 1) x USING (key)").format(
            c=sql.Identifier(xcol), x=sql.Identifier("public", xrel), t=sql.SQL(xtype)),
            ([k for k, _ in keys], [float(n) for _, n in keys],
             [k for k, _ in keys])).fetchone()
    met = float(row[0]) / changes if row else 0.0
    uniform = x.rows * join_selectivity(r.column(col).n_distinct, x.column(xcol).n_distinct)
    if uniform <= 0:
        return None
    return min(max(met / uniform, K_RANGE[0]), K_RANGE[1])
