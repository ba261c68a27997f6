"""What a consumer asks for, and the SPJ query it boils down to (pure values).

A `Sharing` is SQL text, a staleness SLA in seconds and a penalty per late tuple (and, if the
consumer says so, the machine its MV must live on). `SpjQuery` is the parsed, name-resolved form:
relations with aliases, inner equi-join predicates, per-relation selections and projections.

Must not: parse or plan (see `parse_spj.py`, `dp.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from smile.errors import PlanError


@dataclass(frozen=True)
class Sharing:
    name: str
    sql: str
    staleness_s: float
    penalty_per_tuple: float
    mv_machine: str | None = None

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
    """The one relation whose columns it reads (None for a constant)."""
    columns: frozenset[str]


@dataclass(frozen=True)
class SpjQuery:
    relations: tuple[RelRef, ...]
    joins: tuple[JoinPredicate, ...]
    selections: tuple[Selection, ...]
    projections: tuple[Projection, ...]
    sql: str = field(compare=False, default="")

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

    def needed_columns(self, alias: str) -> frozenset[str]:
        """Columns of `alias` the MV or a join needs (what projection push-down keeps)."""
        cols: set[str] = set()
        for p in self.projections:
            if p.alias == alias:
                cols |= p.columns
        for j in self.joins:
            for c in (j.left, j.right):
                if c.alias == alias:
                    cols.add(c.column)
        return frozenset(cols)
