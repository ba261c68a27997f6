"""What a vertex holds (paper §4–5, docs/design/semantics.md §4): an `Expr` — the relations it
covers (each a `Part`: the columns kept and the selections applied, under its canonical
alias), the join predicates among them, for a partial delta which input is on the left and
which one drives, and beyond SPJ an outer join (`OuterPlan`), its padded rows or an
aggregation (`AggPlan`, docs/design/beyond_spj.md). Its value depends on nothing but the
contents: not on the machine, the sharing or the route, so equal contents are equal values.

Must not: know about machines, edges or plans (`plan.py`); no database access.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Literal

Driving = Literal["", "left", "right"]


def _cached_hash(self: Any) -> int:
    """The hash of a frozen plan value, computed once: vertices and edges key every dict of
    the optimizer, and their nested fields would otherwise be hashed again on each lookup."""
    try:
        cached: int = self.__dict__["_hash"]
    except KeyError:
        cached = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
        self.__dict__["_hash"] = cached  # frozen: written past __setattr__, not a field
    return cached


_REF = re.compile(r'^"((?:[^"]|"")+)"\."((?:[^"]|"")+)"$')


def split_ref(ref: str) -> tuple[str, str]:
    """(alias, column) of a `"alias"."column"` reference, as plans write join predicates.

    >>> split_ref('"users#2"."uid"')
    ('users#2', 'uid')
    """
    m = _REF.match(ref)
    if m is None:
        raise ValueError(f"not an alias-qualified column: {ref!r}")
    return m.group(1).replace('""', '"'), m.group(2).replace('""', '"')


def ref_alias(ref: str) -> str:
    return split_ref(ref)[0]


@dataclass(frozen=True, order=True)
class Part:
    """One relation as a vertex holds it."""

    __hash__ = _cached_hash

    alias: str
    """Its canonical alias (the relation's name; `name#2` for its second occurrence)."""
    relation: str
    columns: tuple[str, ...] = ()
    """The columns kept, sorted; empty for the base relation as captured (every column)."""
    selections: tuple[str, ...] = ()
    """Predicates applied, as SQL over `alias.column` references, sorted."""

    @property
    def raw(self) -> bool:
        return not self.columns


@dataclass(frozen=True, order=True)
class OuterPlan:
    """An outer join among a vertex's parts (docs/design/beyond_spj.md); `kind` '' for none."""

    kind: str = ""
    """'left', 'right' or 'full'."""
    left: tuple[str, ...] = ()
    """The aliases of its left input, sorted (the right one is the rest)."""
    predicates: tuple[tuple[str, str], ...] = ()
    """Its equalities, `"alias"."column"` of the left side first, sorted."""

    def __bool__(self) -> bool:
        return bool(self.kind)


GROUP_BYTES = 48.0
"""Bytes of an aggregate's row besides its keys (counts, sums, extremes)."""


@dataclass(frozen=True, order=True)
class AggPlan:
    """An aggregation over what a vertex's parts hold (docs/design/beyond_spj.md); empty
    `calls` and `keys` with `distinct_rows` False for none."""

    keys: tuple[str, ...] = ()
    """The group columns, `"alias"."column"` references."""
    calls: tuple[tuple[str, str, bool], ...] = ()
    """(function, argument SQL over references or '' for `*`, DISTINCT) of each call."""
    where: tuple[str, ...] = ()
    """Predicates its input rows must pass (those above an outer join)."""
    global_: bool = False
    distinct_rows: bool = False

    def __bool__(self) -> bool:
        return bool(self.keys or self.calls or self.global_ or self.distinct_rows)

    @property
    def extreme(self) -> bool:
        """Whether it keeps a min or max (recomputed from its input's relation)."""
        return any(f in ("min", "max") for f, _, _ in self.calls)

    @property
    def group_bytes(self) -> float:
        """Bytes of one of its rows: `GROUP_BYTES` and 8 per key (what its storage is
        charged per group)."""
        return GROUP_BYTES + 8.0 * len(self.keys)


NO_OUTER = OuterPlan()
NO_AGG = AggPlan()


@dataclass(frozen=True, order=True)
class Expr:
    """What a vertex holds, independently of where and for whom."""

    __hash__ = _cached_hash

    parts: tuple[Part, ...]
    """Sorted by alias."""
    joins: tuple[tuple[str, str], ...] = ()
    """Equalities among the parts, as `"alias"."column"` pairs, sorted (an outer join's
    among them)."""
    left: tuple[str, ...] = ()
    """A partial delta: the aliases of the join's left input (the right one is the rest)."""
    driving: Driving = ""
    """A partial delta: whose changes drive it — 'left' for Δ(ΔL⋈X), 'right' for Δ(L⋈ΔX)."""
    outer: OuterPlan = NO_OUTER
    """The parts are joined by this outer join (its other equalities inner)."""
    pad: bool = False
    """Only the outer join's NULL-padded rows (the delta a Pad edge makes)."""
    agg: AggPlan = NO_AGG
    """What it holds is this aggregation of the (outer) join of the parts."""

    @staticmethod
    def base(relation: str) -> Expr:
        """A base relation as captured.

        >>> Expr.base("users").text
        'users'
        """
        return Expr((Part(relation, relation),))

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(p.alias for p in self.parts)

    @property
    def raw(self) -> bool:
        """The base relation as captured."""
        return len(self.parts) == 1 and self.parts[0].raw

    @property
    def right(self) -> str:
        """A partial delta's right input (one alias)."""
        (alias,) = set(self.aliases) - set(self.left)
        return alias

    def part(self, alias: str) -> Part:
        return next(p for p in self.parts if p.alias == alias)

    @property
    def beyond(self) -> bool:
        """An outer join, its padded rows or an aggregation: not a join's plain result."""
        return bool(self.outer or self.pad or self.agg)

    def whole(self) -> Expr:
        """The same parts and joins as a whole relation (a partial's set)."""
        return Expr(self.parts, self.joins)

    def restrict(self, aliases: tuple[str, ...] | frozenset[str]) -> Expr:
        """What this holds of some of its parts: those parts and the joins among them."""
        keep = set(aliases)
        return Expr(tuple(p for p in self.parts if p.alias in keep),
                    tuple(j for j in self.joins if {ref_alias(ref) for ref in j} <= keep))

    def columns(self) -> tuple[tuple[str, str], ...]:
        """(alias, column) of every column held, in table order (not for raw bases, nor an
        aggregation, whose table the Aggregate operator lays out)."""
        if self.agg:
            return ()
        return tuple((p.alias, c) for p in self.parts for c in p.columns)

    def digest(self) -> str:
        """Six hex digits of the contents: of the join fields as they always read, and of an
        outer join, padding or aggregation only where there is one (labels of plain joins do
        not change with them)."""
        text = (f"Expr(parts={self.parts!r}, joins={self.joins!r}, left={self.left!r}, "
                f"driving={self.driving!r})")
        if self.beyond:
            text += f"+{self.outer!r}+{self.pad!r}+{self.agg!r}"
        return hashlib.sha1(text.encode()).hexdigest()[:6]

    @cached_property
    def text(self) -> str:
        """A short readable name, unique for the contents (a digest tells apart projections
        and selections). Computed once per value (`cached_property` writes past the frozen
        `__setattr__`, as `_cached_hash` does): the executor reads every vertex's label on each
        critical path it computes, and re-hashing the repr of each expression was a third of
        its CPU with Table 1 running.

        >>> Expr((Part("a", "r", ("k",)), Part("b", "s", ("k",))), (('"a"."k"', '"b"."k"'),),
        ...      ("a",), "right").text
        'Δ(a⋈Δb)~f49de8'
        """
        if self.raw:
            return self.parts[0].relation
        if self.beyond:
            return f"{self._beyond_text()}~{self.digest()}"
        if self.driving:
            lhs = "⋈".join(self.left)
            body = f"Δ(Δ{lhs}⋈{self.right})" if self.driving == "left" else \
                f"Δ({lhs}⋈Δ{self.right})"
        else:
            body = "⋈".join(self.aliases)
        return f"{body}~{self.digest()}"

    def _beyond_text(self) -> str:
        sign = {"left": "⟕", "right": "⟖", "full": "⟗"}.get(self.outer.kind, "⋈")
        if self.outer:
            lhs = "⋈".join(self.outer.left)
            rhs = "⋈".join(a for a in self.aliases if a not in self.outer.left)
            body = f"{lhs}{sign}{rhs}"
        else:
            body = "⋈".join(self.aliases)
        if self.pad:
            body = f"pad({body})"
        if self.agg:
            body = f"γ({body})" if not self.agg.distinct_rows else f"δ({body})"
        return body

    def covers(self, other: Expr) -> bool:
        """Whether this holds every row of `other`, with every column it needs: the same
        relations, joins and selections, and at least its columns (a CopyDelta that projects
        can then feed `other` from this one) — or it is `other`'s base relation as captured
        (a CopyDelta that filters and projects). Told once per pair (`_covers`)."""
        return _covers(self, other)


@lru_cache(maxsize=1 << 18)
def _covers(mine: Expr, other: Expr) -> bool:
    """`Expr.covers`: hill-climbing asks it of the same pairs of D's vertices every round."""
    if mine.beyond or other.beyond:  # an outer join, its padding or an aggregate: only itself
        return mine == other
    if mine.raw and len(other.parts) == 1 and not other.driving:
        return mine.parts[0].relation == other.parts[0].relation
    if (mine.joins, mine.left, mine.driving) != (other.joins, other.left, other.driving):
        return False
    if mine.aliases != other.aliases:
        return False
    for a, b in zip(mine.parts, other.parts, strict=True):
        if a.relation != b.relation or a.selections != b.selections:
            return False
        if not a.raw and not set(b.columns) <= set(a.columns):
            return False
    return True
