"""Sizes and rates of a sharing's inputs and joins, from the catalog's statistics.

For each alias: rows and delta rate after its selections, and the width of the columns the
sharing needs from it. For a set of aliases joined: rows N = Π N_a · Π join selectivities, delta
rate λ = Σ λ_a · K_a · N / N_a (each change of one input meets the others), width = Σ widths.

`K_a` is the skew of a's changes: the product, over a's join predicates inside the set, of how
many more rows of the other side a changed row meets than the uniform N_other / distinct keys
(`CatalogSnapshot.skew`, measured on the live data at submission; 1 when unknown), and of the
skews above 1 of the rows those meet further along the joins (`Estimates.skew`). The users
whose rows change most are those who tweet most: a change of `loc` meets ~100× the tweets of
an average user, and without K the load of every sharing over `loc ⋈ tweets` was a hundredth
of what the machines did.

Must not: choose plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from smile.costmodel.selectivity import join_selectivity, selection_selectivity

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.optimizer.catalog import CatalogSnapshot, RelationStats
    from smile.optimizer.sharing import SpjQuery


@dataclass(frozen=True)
class AliasStats:
    alias: str
    relation: RelationStats
    selectivity: float
    rows: float
    rate: float
    width: float
    needed: tuple[str, ...]

    @property
    def home(self) -> str:
        return self.relation.machine


@dataclass(frozen=True)
class SetStats:
    rows: float
    rate: float
    width: float


def skew_key(relation: str, column: str, other: str, other_column: str) -> str:
    """How `CatalogSnapshot.skews` names the skew of `relation`'s changes through
    `relation.column = other.other_column`.

    >>> skew_key("loc", "uid", "tweets", "uid")
    'loc.uid>tweets.uid'
    """
    return f"{relation}.{column}>{other}.{other_column}"


def _lookup(stats: dict[str, tuple[float, float]]) -> Callable[[str], tuple[float, float]]:
    return lambda col: stats.get(col or "", (10.0, 0.0))


class Estimates:
    def __init__(self, catalog: CatalogSnapshot, query: SpjQuery) -> None:
        self.query = query
        self.skews = dict(catalog.skews)
        self.alias: dict[str, AliasStats] = {}
        for ref in query.relations:
            rel = catalog.relation(ref.relation)
            stats = {c.name: (c.n_distinct, c.null_frac) for c in rel.columns}
            sel = 1.0
            for s in query.selections_of(ref.alias):
                sel *= selection_selectivity(s.sql, _lookup(stats))
            needed = tuple(sorted(query.needed_columns(ref.alias))) or (rel.columns[0].name,)
            width = float(sum(rel.column(c).width for c in needed))
            self.alias[ref.alias] = AliasStats(
                ref.alias, rel, sel, rel.rows * sel, rel.update_rate * sel, width, needed)
        self.stats = cache(self._stats)
        self.rows = cache(self._rows)
        self.rate_from = cache(self._rate_from)
        self.stored_rows = cache(self._stored_rows)

    def join_selectivity(self, left: frozenset[str], alias: str) -> float:
        out = 1.0
        for j in self.query.joins_between(left, alias):
            nds = []
            for c in (j.left, j.right):
                col = self.alias[c.alias].relation.column(c.column)
                nds.append(col.n_distinct)
            out *= join_selectivity(nds[0], nds[1])
        return out

    def skew(self, alias: str, among: frozenset[str]) -> float:
        """K: how many more rows of `among` a change of `alias` meets than uniformly.

        The change's own predicates count as measured. Beyond them, outward along the joins
        (breadth first through `among`), a row the change met meets the next relation with
        a skew that depends on which value it meets on:
        - on a column of its own other than the one it was met on (a check-in's tweet meets
          `socnet` on its author, not on its tid), the skew measured for that row's
          relation's changes, when above 1: the rows a change meets belong to the users who
          change things (a check-in's tweet is a new one, by a user who tweets much and has
          many followers), so the fan-out of active rows carries over, and
          `tweets.uid>socnet.uid` = 33 makes Δ(Δfoursq ⋈ tweets ⋈ users ⋈ socnet) 33× the
          uniform rate, as measured (uniform: 1/33 of it);
        - on the column it was met on (Table 1's joins are stars around `tweets`: a changed
          user meets their tweets on uid, which meet `socnet` on that same uid), the changed
          value itself, so the skew measured for the relation that value came from (here
          `users.uid>socnet.uid`), when above 1, and 1 when not measured: charging the new
          tweets' authors' 140 followers to every change of `users` (most of them follower
          counts) made S13, S15 and S16 look 40× dearer than they ran.
        A K below 1 further away is a property of the changes themselves — most changes of
        `users` are updates of columns no sharing reads, which cancel (`users.uid>socnet.uid`
        ≈ 0.08), already counted by the change's own predicates — not of the rows a change
        of another relation meets: 1 there."""
        out = 1.0
        own = self.alias[alias].relation.name
        # each alias reached: the column it was met on, and the (relation, column) the value
        # met there came from
        entry: dict[str, tuple[str, tuple[str, str]]] = {}
        reached, frontier = {alias}, [alias]
        while frontier:
            near = frontier.pop(0)
            met: set[str] = set()
            for j in self.query.joins_between(among - reached, near):
                mine, other = (j.left, j.right) if j.left.alias == near else (j.right, j.left)
                if near == alias:
                    source = (own, mine.column)
                else:
                    entered_on, came_from = entry[near]
                    source = (came_from if mine.column == entered_on
                              else (self.alias[near].relation.name, mine.column))
                k = self.skews.get(skew_key(*source, self.alias[other.alias].relation.name,
                                            other.column), 1.0)
                out *= k if near == alias else max(1.0, k)
                entry[other.alias] = (other.column, source)
                met.add(other.alias)
            reached |= met
            frontier.extend(sorted(met))
        return out

    def _stored_rows(self, aliases: frozenset[str]) -> float:
        """Rows the join of `aliases` holds, skew counted (`stored_rows`, cached: the DP asks
        at every step): the uniform N times the largest
        K (above 1) of its inputs. Changes are drawn as the rows are (a new tweet's author
        is a user as likely to have tweeted before), so a changed row of `a` meeting K_a ×
        the uniform rows says each row of `a` does: |tweets ⋈ loc| = Σ_users tweets·locs,
        which the uniform |tweets|·|loc| / users puts 580× too low once busy users have both
        (48M rows against 83k at 2000 tweets/s). A K below 1 is a property of the changes
        (updates that cancel), not of the rows."""
        rows = self.rows(aliases)
        if len(aliases) < 2:
            return rows
        return rows * max(1.0, *(self.skew(a, aliases) for a in aliases))

    def _rows(self, aliases: frozenset[str]) -> float:
        rows = 1.0
        seen: frozenset[str] = frozenset()
        for a in sorted(aliases):
            rows *= self.alias[a].rows
            if seen:
                rows *= self.join_selectivity(seen, a)
            seen = seen | {a}
        return rows

    def _rate_from(self, aliases: frozenset[str], sources: frozenset[str]) -> float:
        """Delta rows per second of the join of `aliases` caused by changes of `sources`
        (`rate_from`, cached: the DP asks for the same sets at every step)."""
        rows = self.rows(aliases)
        return sum(self.alias[a].rate * self.skew(a, aliases) * rows
                   / max(self.alias[a].rows, 1e-9) for a in sorted(sources))

    def driving_left(self, left: frozenset[str], alias: str) -> float:
        """The rate of Δ(ΔL ⋈ a): changes of L meeting a."""
        return self.rate_from(left | {alias}, left)

    def driving_right(self, left: frozenset[str], alias: str) -> float:
        """The rate of Δ(L ⋈ Δa): changes of a meeting L."""
        return self.rate_from(left | {alias}, frozenset({alias}))

    def _stats(self, aliases: frozenset[str]) -> SetStats:
        width = sum(self.alias[a].width for a in aliases)
        return SetStats(self.rows(aliases), self.rate_from(aliases, aliases), width)

    def output_width(self) -> float:
        width = 0.0
        for p in self.query.projections:
            if p.alias is not None and p.sql.count(".") == 1 and len(p.columns) == 1:
                width += self.alias[p.alias].relation.column(next(iter(p.columns))).width
            else:
                width += 8.0
        return width or 8.0
