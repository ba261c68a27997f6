"""What a consumer asks for, and the query it boils down to (pure values).

A `Sharing` is SQL text, a staleness SLA in seconds and a penalty per late tuple (and, if the
consumer says so, the machine its MV must live on). `Query` is the parsed, name-resolved form
(docs/design/beyond_spj.md): its SPJ core (`SpjQuery`: relations with aliases, inner
equi-join predicates, pushed-down selections and the columns read above), at most one outer
join of two groups of its relations, the predicates evaluated above that join, and an
aggregation (or DISTINCT) on top.

Must not: parse or plan (see `parse_spj.py`, `dp.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from smile.errors import PlanError


@dataclass(frozen=True)
class Sharing:
    name: str
    sql: str
    staleness_s: float
    penalty_per_tuple: float
    mv_machine: str | None = None
    group: str = ""
    """The key of the consistent group it joins (`groups.key`); '' for none."""

    def __post_init__(self) -> None:
        if not 0 < self.staleness_s < math.inf:
            raise PlanError(f"staleness must be positive seconds, got {self.staleness_s}")
        if not 0 <= self.penalty_per_tuple < math.inf:
            raise PlanError(f"penalty per tuple must be a number of $ of at least 0, got "
                            f"{self.penalty_per_tuple}")


@dataclass(frozen=True, order=True)
class ColRef:
    alias: str
    column: str

    def sql(self) -> str:
        """The quoted reference; embedded quotes doubled (a column name is the table
        owner's choice, and this text is parsed again)."""
        alias, column = (x.replace('"', '""') for x in (self.alias, self.column))
        return f'"{alias}"."{column}"'


@dataclass(frozen=True)
class RelRef:
    alias: str
    relation: str
    """The catalog's relation name."""


@dataclass(frozen=True, order=True)
class JoinPredicate:
    left: ColRef
    right: ColRef

    def aliases(self) -> frozenset[str]:
        return frozenset((self.left.alias, self.right.alias))


@dataclass(frozen=True)
class Selection:
    alias: str
    sql: str
    """The predicate as SQL over `"alias"."column"` references."""
    columns: frozenset[str]


@dataclass(frozen=True)
class Projection:
    name: str
    """Output column name."""
    sql: str
    alias: str | None
    """The one relation whose columns it reads (None for a constant or several relations)."""
    columns: frozenset[str]
    """The columns of `alias` it reads."""
    refs: frozenset[ColRef] = frozenset()
    """Every column it reads, when it reads several relations' (else empty)."""

    def reads(self) -> frozenset[ColRef]:
        if self.refs:
            return self.refs
        return frozenset(ColRef(self.alias, c) for c in self.columns) if self.alias else \
            frozenset()


@dataclass(frozen=True)
class Predicate:
    """A predicate evaluated above an outer join, over any of its relations' columns."""

    sql: str
    refs: frozenset[ColRef]


@dataclass(frozen=True)
class SpjQuery:
    relations: tuple[RelRef, ...]
    joins: tuple[JoinPredicate, ...]
    selections: tuple[Selection, ...]
    projections: tuple[Projection, ...]
    sql: str = field(compare=False, default="")
    reads: frozenset[ColRef] = frozenset()
    """Columns the levels above read besides the projections (an aggregation's keys and
    arguments, predicates above an outer join)."""

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(r.alias for r in self.relations)

    def relation_of(self, alias: str) -> str:
        return next(r.relation for r in self.relations if r.alias == alias)

    def selections_of(self, alias: str) -> tuple[Selection, ...]:
        return tuple(s for s in self.selections if s.alias == alias)

    def joins_between(self, left: frozenset[str], alias: str) -> tuple[JoinPredicate, ...]:
        return tuple(j for j in self.joins
                     if alias in j.aliases() and (j.aliases() - {alias}) <= left
                     and len(j.aliases()) == 2)

    def selected_columns(self, alias: str) -> frozenset[str]:
        """Columns of `alias` its selections read."""
        return frozenset(c for s in self.selections_of(alias) for c in s.columns)

    def needed_columns(self, alias: str) -> frozenset[str]:
        """Columns of `alias` the MV or a join needs (what projection push-down keeps)."""
        cols: set[str] = {r.column for r in self.reads if r.alias == alias}
        for p in self.projections:
            cols |= {r.column for r in p.reads() if r.alias == alias}
        for j in self.joins:
            for c in (j.left, j.right):
                if c.alias == alias:
                    cols.add(c.column)
        return frozenset(cols)


OuterKind = Literal["left", "right", "full"]


@dataclass(frozen=True)
class OuterJoin:
    """`left ⟕ right` (or ⟖, ⟗) of two groups of the core's relations, on equalities."""

    kind: OuterKind
    left: frozenset[str]
    """Aliases of the join's left input."""
    right: frozenset[str]
    predicates: tuple[JoinPredicate, ...]
    """Its equalities, each between a column of `left` and one of `right`."""

    @property
    def preserved(self) -> tuple[frozenset[str], ...]:
        """The sides whose rows are kept, NULL-padded, when they meet nothing."""
        return {"left": (self.left,), "right": (self.right,),
                "full": (self.left, self.right)}[self.kind]

    def side(self, alias: str) -> Literal["left", "right"]:
        return "left" if alias in self.left else "right"


AggFunc = Literal["count", "sum", "avg", "min", "max"]


@dataclass(frozen=True)
class AggCall:
    """One aggregate call: `count(*)` has no argument."""

    func: AggFunc
    arg: str | None
    """SQL over `"alias"."column"` references; None for count(*)."""
    refs: frozenset[ColRef] = frozenset()
    distinct: bool = False


SLOT = "__agg"
"""The pseudo-alias aggregated outputs are written over: `"__agg"."g0"` is the first group
column, `"__agg"."a1"` the second aggregate call."""


@dataclass(frozen=True)
class Aggregation:
    """GROUP BY (or DISTINCT, or a global aggregate) over the rows below it."""

    group_by: tuple[ColRef, ...]
    calls: tuple[AggCall, ...]
    outputs: tuple[tuple[str, str], ...]
    """(name, SQL over `SLOT` references) of each output column."""
    having: str | None = None
    """A predicate over `SLOT` references."""
    distinct_rows: bool = False
    """SELECT DISTINCT: a group per distinct output row, no aggregate shown."""

    @property
    def global_(self) -> bool:
        """An aggregate without GROUP BY: one row, also over no input."""
        return not self.group_by and not self.distinct_rows


@dataclass(frozen=True)
class Query:
    """A sharing's query, parsed (`parse_spj.parse_query`)."""

    core: SpjQuery
    """The SPJ part: every relation, the inner joins (an outer join's equalities among them),
    the selections pushed down, and as projections what the levels above read."""
    outer: OuterJoin | None = None
    above: tuple[Predicate, ...] = ()
    """Predicates that must see an outer join's NULL-padded rows (on a nullable side): applied
    to the rows the join makes, not pushed below it."""
    aggregate: Aggregation | None = None
    sql: str = field(compare=False, default="")

    @property
    def spj(self) -> bool:
        return self.outer is None and self.aggregate is None and not self.above
