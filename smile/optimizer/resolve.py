"""Names in a sharing's FROM clause → relations, canonical aliases and the joins among them.

Aliases are made canonical on the way (docs/design/semantics.md §8): the relation's own name,
or `name#k` for its k-th occurrence, so two sharings that compute the same thing name it alike
whatever aliases their authors chose. Inner joins (`JOIN … ON`, `USING`, `NATURAL`, commas)
and at most one outer join (`LEFT`, `RIGHT`, `FULL`) are taken apart here: each join
condition is kept with where it was written (inside one side of the outer join, the outer
join's own, or above it), and the columns a `USING` or `NATURAL` merges are known, so that an
unqualified reference to one resolves as PostgreSQL resolves it.

Must not: plan, or decide what a condition means for the query (the parser does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pglast import ast, enums

from smile.errors import PlanError
from smile.optimizer.sharing import ColRef, RelRef
from smile.optimizer.sql_guard import Refuse, walk

if TYPE_CHECKING:
    from collections.abc import Iterable

    from smile.optimizer.catalog import CatalogSnapshot

Scope = Literal["side", "outer", "above"]
"""Where a join condition was written: inside one side of the outer join (or anywhere when
there is none), in the outer join's ON, or above it."""
_KINDS = {enums.JoinType.JOIN_INNER: "inner", enums.JoinType.JOIN_LEFT: "left",
          enums.JoinType.JOIN_RIGHT: "right", enums.JoinType.JOIN_FULL: "full"}


@dataclass(frozen=True)
class Merged:
    """A column `USING`/`NATURAL` merged: what an unqualified reference to it means."""

    name: str
    kind: str
    """inner, left, right or full: the join that merged it."""
    left: ColRef
    right: ColRef

    @property
    def members(self) -> frozenset[ColRef]:
        return frozenset((self.left, self.right))


@dataclass
class Condition:
    """A join condition as written: an expression node, or a pair of columns from USING."""

    node: Any
    scope: Scope
    pair: tuple[ColRef, ColRef] | None = None


@dataclass
class OuterFound:
    kind: str
    left: list[str]
    right: list[str]
    node: Any


@dataclass
class Resolver:
    catalog: CatalogSnapshot
    rels: list[RelRef] = field(default_factory=list)
    users: dict[str, str] = field(default_factory=dict)
    """The author's alias → the canonical one."""
    conditions: list[Condition] = field(default_factory=list)
    merged: list[Merged] = field(default_factory=list)
    outer: OuterFound | None = None
    _depth_outer: int = 0
    _outers: int = 0

    def user(self, canonical: str) -> str:
        return next(u for u, c in self.users.items() if c == canonical)

    def relation(self, alias: str) -> str:
        return next(r.relation for r in self.rels if r.alias == alias)

    # -- FROM ---------------------------------------------------------------------------------
    def from_item(self, node: Any) -> list[str]:
        """Register a FROM item; the aliases under it."""
        if isinstance(node, ast.RangeVar):
            return [self._range(node)]
        if isinstance(node, ast.JoinExpr):
            return self._join(node)
        if isinstance(node, ast.RangeSubselect):
            raise Refuse("a subquery in FROM", node)
        if isinstance(node, ast.RangeFunction):
            raise Refuse("a function in FROM", node)
        raise Refuse(f"the FROM item {type(node).__name__}", node)

    def _range(self, node: ast.RangeVar) -> str:
        if node.catalogname:
            raise Refuse(f"a relation in another database ({node.catalogname})", node)
        if node.alias is not None and node.alias.colnames:
            raise Refuse("column aliases on a FROM item (name the outputs with AS)", node)
        try:
            relation = self.catalog.relation(
                f"{node.schemaname}.{node.relname}" if node.schemaname else node.relname).name
        except PlanError as exc:
            raise Refuse(f"an {exc.message}", node) from exc
        user = node.alias.aliasname if node.alias else node.relname
        if user in self.users:
            raise Refuse(f"the alias {user!r} twice (give each FROM item its own)", node)
        seen = sum(1 for r in self.rels if r.relation == relation)
        alias = relation if not seen else f"{relation}#{seen + 1}"
        self.users[user] = alias
        self.rels.append(RelRef(alias, relation))
        return alias

    def _join(self, node: ast.JoinExpr) -> list[str]:
        kind = _KINDS.get(node.jointype)
        if kind is None:
            raise Refuse(f"the join type {node.jointype.name.removeprefix('JOIN_')}", node)
        if kind != "inner":
            self._outers += 1
            if self._outers > 1:
                raise Refuse("a second outer join (one LEFT, RIGHT or FULL JOIN per sharing)",
                             node)
            self._depth_outer += 1
        left = self.from_item(node.larg)
        right = self.from_item(node.rarg)
        if kind != "inner":
            self._depth_outer -= 1
            self.outer = OuterFound(kind, left, right, node)
        scope: Scope = "outer" if kind != "inner" else self._scope()
        if node.isNatural or node.usingClause:
            columns = self._natural(left, right) if node.isNatural else [
                c.sval for c in node.usingClause]
            if not columns and node.isNatural:
                raise Refuse("a NATURAL JOIN with no column in common (a cross join)", node)
            for name in columns:
                pair = (self._owner(name, left, node), self._owner(name, right, node))
                self.conditions.append(Condition(node, scope, pair))
                self.merged.append(Merged(name, kind, *pair))
        elif node.quals is not None:
            self.conditions.append(Condition(node.quals, scope))
        else:
            raise Refuse("a cross join with no join predicate", node)
        return left + right

    def _scope(self) -> Scope:
        """An inner join's scope: inside a side of the outer join being read, else above it
        (or anywhere, while no outer join has been met: fixed up by `settle`)."""
        return "side" if self._depth_outer or self.outer is None else "above"

    def settle(self) -> None:
        """Once FROM is read: an inner join that is not inside one side of the outer join
        (a comma item read before it, say) is above it."""
        if self.outer is None:
            return
        sides = (set(self.outer.left), set(self.outer.right))
        for c in self.conditions:
            if c.scope == "side" and not any(self.aliases_of(c) <= s for s in sides):
                c.scope = "above"

    def aliases_of(self, c: Condition) -> set[str]:
        """The relations a join condition reads."""
        if c.pair is not None:
            return {c.pair[0].alias, c.pair[1].alias}
        out = set()
        for n in walk(c.node):
            if isinstance(n, ast.ColumnRef):
                out |= {r.alias for r in self.refs(n)}
        return out

    def _natural(self, left: list[str], right: list[str]) -> list[str]:
        mine = {c for a in left for c in self._columns(a)}
        return sorted(c for a in right for c in self._columns(a) if c in mine)

    def _columns(self, alias: str) -> list[str]:
        return [c.name for c in self.catalog.relation(self.relation(alias)).columns]

    def _owner(self, column: str, aliases: list[str], node: Any) -> ColRef:
        owners = [a for a in aliases if self._has(a, column)]
        if not owners:
            raise Refuse(f"USING ({column}): no relation on that side has it", node)
        return ColRef(owners[0], column)

    def _has(self, alias: str, column: str) -> bool:
        return column in self._columns(alias)

    def refuse_lost(self, alias: str, columns: Iterable[str], node: Any) -> None:
        """Refuse reading a published column of `alias`'s relation that its table no longer
        has as published (`RelationStats.lost`): capture writes it NULL since."""
        rel = self.catalog.relation(self.relation(alias))
        lost = [c for c in columns if c in rel.lost]
        if lost:
            raise Refuse(f"the columns {lost} of {rel.name} (on {rel.machine}), which were "
                         "dropped, renamed or retyped since it was published: read its other "
                         f"columns, or have an admin publish {rel.name} again to capture it "
                         "as it is now", node)

    # -- column references ----------------------------------------------------------------------
    def refs(self, node: ast.ColumnRef) -> tuple[ColRef, ...]:
        """What a column reference reads: one column, or for an unqualified column a FULL
        JOIN merged, both of its (`merged_full`)."""
        merged = self.merged_full(node)
        if merged is not None:
            return (merged.left, merged.right)
        return (self.column(node),)

    def merged_full(self, node: ast.ColumnRef) -> Merged | None:
        """The FULL JOIN's merged column an unqualified reference names, if it does."""
        names = [f.sval for f in node.fields if isinstance(f, ast.String)]
        if len(names) != 1:
            return None
        found = self._merged(names[0])
        return found if found is not None and found.kind == "full" else None

    def _merged(self, name: str) -> Merged | None:
        """The merge that covers every relation having column `name`, if one does."""
        owners = {ColRef(r.alias, name) for r in self.rels if self._has(r.alias, name)}
        merges = [m for m in self.merged if m.name == name]
        covered: set[ColRef] = set()
        for m in merges:
            covered |= m.members
        if not merges or owners - covered:
            return None
        return merges[-1]  # the outermost (read last) is what the name means at the top

    def column(self, node: ast.ColumnRef) -> ColRef:
        names = [f.sval for f in node.fields if isinstance(f, ast.String)]
        if len(names) == 1:
            return self._unqualified(names[0], node)
        if len(names) == 2:
            user, column = names
            if user not in self.users:
                raise Refuse(f"an unknown table or alias {user!r} "
                             f"(FROM has {list(self.users)})", node)
            alias = self.users[user]
            self.refuse_lost(alias, (column,), node)
            if not self._has(alias, column):
                raise Refuse(f"an unknown column {user}.{column} "
                             f"(its columns: {self._columns(alias)})", node)
            return ColRef(alias, column)
        raise Refuse("a column reference with a schema (use the table's alias)", node)

    def _unqualified(self, name: str, node: Any) -> ColRef:
        owners = [r.alias for r in self.rels if self._has(r.alias, name)]
        for owner in owners:
            self.refuse_lost(owner, (name,), node)
        if not owners:
            known = {self.user(r.alias): self._columns(r.alias) for r in self.rels}
            raise Refuse(f"an unknown column {name!r} (columns: {known})", node)
        if len(owners) == 1:
            return ColRef(owners[0], name)
        merged = self._merged(name)
        if merged is None:
            raise Refuse(f"an ambiguous column {name!r} (in "
                         f"{[self.user(o) for o in owners]}; qualify it)", node)
        # what PostgreSQL's merged column holds: the preserved side's (left for inner)
        return merged.right if merged.kind == "right" else merged.left
