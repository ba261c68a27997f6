"""How skewed a sharing's joins are for the changes that will flow through them, measured on
the live data when it is submitted: admission must see the load the sharing will bring.

Uniform statistics say a changed row of R meets |X| / distinct keys rows of X through
`R.c = X.c'`. The rows that change are not uniform: in the evaluation data the users who move
(`loc`, `curloc`) are those who tweet most, and a change of `loc` meets ~100× the tweets of an
average user, so a join over it charged at the uniform rate would be admitted at a hundredth
of its load. So for each join predicate of the query, in both directions, this takes the keys
of the changes ΔR holds now (capture keeps them until every reader is past) — consolidated on
the columns the sharing reads, as its joins will — counts what each meets in X, and reports
K = measured ÷ uniform per delta row (`estimate.skew_key` → K, within `K_RANGE`); the
optimizer multiplies rates by it. Uniform is what the estimate assumes,
|X| · 1/max(distinct keys of R.c, of X.c'): a new tweet meets its one hashtag row if it has
one, and dividing by the distinct keys of X.c' alone would read K = 0.15 where the estimate
already counts on 0.15 rows met. Too few changes (under `MIN_CHANGES`) or an unreachable
machine say nothing (K stays 1).

ΔR holds only the last seconds of changes, so one measurement samples a heavy-tailed process
(one key read 25.8 and 13.7 a second apart). Keeping the last reading would let a low one
lower the load of sharings already running; keeping the highest would grow K with the number
of readings. So readings are pooled (`merge_skews`, `Reading`): K is all the rows the changes
met over all that the statistics promised them, each earlier reading weighing `DECAY` times
the one after it — more readings make K steadier, not higher. The running vertices' rates are
measured anyway (`observed.py`).

Must not: decide anything; it measures, read-only, with bounded work (the 5,000 most frequent
keys).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.costmodel.selectivity import join_selectivity
from smile.deploy import table_stats
from smile.deploy.machine_state import Sessions
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
DECAY = 0.9
"""What a reading of a key weighs against the next one (`merge_skews`): the eleventh-last
weighs a third of the last, so K follows data whose skew changes."""
_TYPE = re.compile(r"^[a-z][a-z0-9 ]*(\(\d+(,\d+)?\))?$")


@dataclass(frozen=True)
class Reading:
    """One key's changes, as read (`measure_skews`) or pooled (`merge_skews`)."""

    met: float
    """Rows of X the changes met, all together."""
    promised: float
    """Rows uniform statistics promised them: the changes × the estimate's rows per change."""

    @property
    def k(self) -> float:
        """K: met ÷ promised, within `K_RANGE`; 1 (uniform) where nothing was promised, which
        only a catalog option written by hand can hold."""
        if self.promised <= 0:
            return 1.0
        return min(max(self.met / self.promised, K_RANGE[0]), K_RANGE[1])

    def to_json(self) -> list[float]:
        return [self.met, self.promised]

    @classmethod
    def from_json(cls, doc: Any) -> Reading:
        """As `to_json` wrote it; a bare K (what was kept before readings were pooled)
        weighs as one promised row, so the first new reading outweighs it."""
        if isinstance(doc, (int, float)):
            return cls(float(doc), 1.0)
        met, promised = doc
        return cls(float(met), float(promised))


def skews_of(readings: dict[str, Reading]) -> dict[str, float]:
    """`skew_key` → K, as the catalog snapshot carries them."""
    return {key: r.k for key, r in readings.items()}


def measure_skews(topology: Topology, catalog: CatalogSnapshot, query: SpjQuery
                  ) -> dict[str, Reading]:
    """`skew_key` → what the changes ΔR holds now meet, for every join predicate of `query`,
    both ways, where measurable."""
    aliases = {r.alias: r.relation for r in query.relations}
    out: dict[str, Reading] = {}
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
                reading = _measure(topology, catalog, rel, col, xrel, xcol, sorted(read))
            except Exception as exc:  # a machine away: uniform, as before
                log.info("cannot measure %s: %s", key, exc)
                continue
            if reading is not None:
                out[key] = reading
    return out


def merge_skews(kept: dict[str, Reading], measured: dict[str, Reading],
                decay: float = DECAY) -> dict[str, Reading]:
    """The readings known after a new measurement: per key, the new reading added to what
    was kept, which first weighs `decay` times as much (see the module's docstring).

    >>> pooled = merge_skews({"tweets.uid>loc.uid": Reading(2580.0, 100.0)},
    ...                      {"tweets.uid>loc.uid": Reading(1370.0, 100.0),
    ...                       "a.x>b.y": Reading(60.0, 30.0)}, decay=1.0)
    >>> {key: round(r.k, 2) for key, r in pooled.items()}
    {'tweets.uid>loc.uid': 19.75, 'a.x>b.y': 2.0}
    """
    out = dict(kept)
    for key, new in measured.items():
        old = kept.get(key)
        out[key] = new if old is None else Reading(
            old.met * decay + new.met, old.promised * decay + new.promised)
    return out


def _measure(topology: Topology, catalog: CatalogSnapshot, rel: str, col: str, xrel: str,
             xcol: str, read: list[str]) -> Reading | None:
    """What the changes of `rel` meet as the sharing sees them: consolidated on the columns it reads
    (`read`), as its join consolidates them — an UPDATE of a column it does not read is a − and
    a + that cancel and meet nothing — over all the delta rows (what the rate counts)."""
    r, x = catalog.relation(rel), catalog.relation(xrel)
    xtype = x.column(xcol).type
    if not _TYPE.match(xtype):
        return None
    with Sessions(topology, "smile") as sessions:
        changes, keys = table_stats.delta_keys(sessions.get(r.machine), rel, col, read, KEYS)
        if changes < MIN_CHANGES:
            return None
        uniform = x.rows * join_selectivity(r.column(col).n_distinct,
                                            x.column(xcol).n_distinct)
        if uniform <= 0:
            return None
        if not keys:  # every change cancelled: they meet nothing
            return Reading(0.0, changes * uniform)
        met = table_stats.rows_met(sessions.get(x.machine), xrel, xcol, xtype, keys)
    return Reading(met, changes * uniform)
