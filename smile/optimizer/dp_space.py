"""The DP's space for one query: what Algorithm 1 reads that no admission changes — the
query's estimates, the machines and their prices, the push period, what each set of aliases
holds (the name of the vertices computing it), and the figures of every join step
(`dp_state.StepFigures`) and base state — computed on first use.

It depends on the query, the catalog's statistics (relations, skews, machines), the time
model's lines, the prices and the period, and on nothing an admission changes (the capacity
used, D): `space_for` keeps the spaces of recent queries under exactly that key, so the DPT
and DPD of one admission, and later admissions of the same query (a sharing copied to another
machine, the same query withdrawn and submitted again), share one.

Must not: search, know about capacity or D, or touch a database.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from smile.costmodel.formulas import edge_load
from smile.costmodel.ledger import Ledger, charge
from smile.costmodel.time_model import TimeModel
from smile.optimizer.catalog import CatalogSnapshot
from smile.optimizer.dp_state import State, StepFigures, step_figures
from smile.optimizer.estimate import Estimates
from smile.optimizer.expr import Expr, Part
from smile.optimizer.join_step import steps_from

if TYPE_CHECKING:
    from smile.costmodel.prices import Prices
    from smile.costmodel.time_model import Line
    from smile.optimizer.catalog import Machine, RelationStats
    from smile.optimizer.sharing import SpjQuery

SPACES = 64
"""How many queries' spaces `space_for` keeps (up to a few hundred kB each, for a 5-way join
on 12 machines)."""


@dataclass(frozen=True)
class StepPrices:
    """What each step joining `<L, mj>` with `a` (`join_step.steps_from`, in order) adds on
    its own: its resCost, and its ρ (its busiest edge's seconds); and per result machine the
    least of each. A candidate's resCost is its left state's plus the step's, up to the order
    of the additions; its ρ, the larger of theirs."""

    res: array[float]
    rho: array[float]
    least_res: array[float]
    least_rho: array[float]

    @property
    def least(self) -> float:
        return min(self.least_res)

    @property
    def least_rho_all(self) -> float:
        return min(self.least_rho)


class Space:
    """The figures Algorithm 1 reads for one query (see the module's docstring)."""

    def __init__(self, catalog: CatalogSnapshot, query: SpjQuery, model: TimeModel,
                 prices: Prices, period: float) -> None:
        self.query, self.model, self.period = query, model, period
        self.est = Estimates(catalog, query)
        self.machines = [m.name for m in catalog.machines]
        self.index = {m: i for i, m in enumerate(self.machines)}
        self.cpu_price = [prices.cpu_per_core_second(m.price_per_hour, m.cpu_cores)
                          for m in catalog.machines]
        self.net_price = prices.network_per_byte()
        self.store_price = prices.storage_per_byte_second()
        self.all = frozenset(query.aliases)
        self._content: dict[frozenset[str], Expr] = {}
        self._figures: dict[tuple[frozenset[str], str], StepFigures] = {}
        self._base: dict[str, tuple[int, State]] = {}
        self._prices: dict[tuple[frozenset[str], str, int], StepPrices] = {}

    def seconds(self, kind: str, tuples: float) -> float:
        return self.model.seconds(kind, tuples)  # type: ignore[arg-type]

    def load(self, kind: str, tuples: float) -> float:
        """The edge's work per second on its machine when pushed once per period."""
        line = self.model.line(kind)  # type: ignore[arg-type]
        return edge_load(line.a, line.b, tuples, 1.0 / self.period)

    def content(self, aliases: frozenset[str] | list[str] | tuple[str, ...]) -> Expr:
        """What σπ(⋈ aliases) holds: each alias's needed columns after its selections — the
        name of a vertex computing it, whichever sharing or join order computes it."""
        chosen = frozenset(aliases)
        expr = self._content.get(chosen)
        if expr is None:
            est, q = self.est, self.query
            parts = tuple(sorted(
                Part(a, est.alias[a].relation.name, est.alias[a].needed,
                     tuple(sorted(s.sql for s in q.selections_of(a)))) for a in chosen))
            joins = tuple(sorted((j.left.sql(), j.right.sql()) for j in q.joins
                                 if j.aliases() <= chosen))
            expr = self._content[chosen] = Expr(parts, joins)
        return expr

    def new_relation(self, left: frozenset[str], a: str) -> bool:
        """Whether base alias `a`'s relation is not in `left` already (a self-join shares ΔR
        and R̂, so its upkeep is counted once)."""
        rel = self.est.alias[a].relation.name
        return all(self.est.alias[x].relation.name != rel for x in left)

    def figures(self, left: frozenset[str], a: str) -> StepFigures:
        """The figures of joining `left` with base alias `a` (`dp_state.step_figures`)."""
        key = (left, a)
        f = self._figures.get(key)
        if f is None:
            f = self._figures[key] = step_figures(self, left, a)
        return f

    def step_prices(self, left: frozenset[str], a: str, mj: int) -> StepPrices:
        """What each step from `<left, mj>` joining `a` adds on its own (`StepPrices`)."""
        key = (left, a, mj)
        got = self._prices.get(key)
        if got is None:
            got = self._prices[key] = self._step_prices(left, a, mj)
        return got

    def _step_prices(self, left: frozenset[str], a: str, mj: int) -> StepPrices:
        f = self.figures(left, a)
        machines = len(self.machines)
        mk = self.index[self.est.alias[a].relation.machine]
        res, rho = array("d"), array("d")
        least_res, least_rho = array("d", [math.inf] * machines), array("d", [math.inf] * machines)
        for s in steps_from(mj, mk, machines):
            r, p = charge(s.charges, f.t, f.w, f.nbytes, self.cpu_price, self.net_price,
                          self.store_price, 0.0, 0.0, None)
            res.append(r)
            rho.append(p)
            least_res[s.mi] = min(least_res[s.mi], r)
            least_rho[s.mi] = min(least_rho[s.mi], p)
        return StepPrices(res, rho, least_res, least_rho)

    def base(self, alias: str) -> tuple[int, State]:
        """Base alias `alias`'s home and its own state: its shadow copy R̂ kept at home,
        priced (time, dollars) but not held against the room — the plan may read a copy of R
        kept elsewhere instead, or the R̂ D keeps already; `optimize` checks the plan it
        builds."""
        got = self._base.get(alias)
        if got is None:
            rel = self.est.alias[alias].relation
            mk = self.index[rel.machine]
            t = self.seconds("delta_to_rel", rel.update_rate)  # the shadow R̂'s upkeep
            ledger = Ledger(self.cpu_price, self.net_price, self.store_price, with_usage=False)
            ledger.work(mk, t, self.load("delta_to_rel", rel.update_rate))
            ledger.store(mk, rel.rows * rel.width)
            got = self._base[alias] = (mk, State(0.0, t, ledger.res, t,
                                                 (0.0,) * (3 * len(self.machines)), None))
        return got


def space_for(catalog: CatalogSnapshot, query: SpjQuery, model: TimeModel, prices: Prices,
              period: float) -> Space:
    """The space of `query` under `catalog`'s statistics, `model`'s lines, `prices` and
    `period`, kept for the next admissions (the `SPACES` most recently used)."""
    lines = tuple(sorted(model.lines.items()))
    return _space(query, catalog.machines, catalog.relations, catalog.skews, lines,
                  model.dispatch_s, prices, period)


@lru_cache(maxsize=SPACES)
def _space(query: SpjQuery, machines: tuple[Machine, ...], relations: tuple[RelationStats, ...],
           skews: tuple[tuple[str, float], ...], lines: tuple[tuple[str, Line], ...],
           dispatch_s: float, prices: Prices, period: float) -> Space:
    catalog = CatalogSnapshot(machines, relations, skews=skews)
    return Space(catalog, query, TimeModel(dict(lines), dispatch_s), prices, period)
