"""Parse a sharing's SQL with PostgreSQL's own parser (pglast) into a name-resolved `Query`
(docs/design/beyond_spj.md).

Accepted: inner equi-joins (`JOIN … ON`, `USING`, `NATURAL`, or equalities in `WHERE`, over
comma-separated FROM items too); one `LEFT`, `RIGHT` or `FULL [OUTER] JOIN` on equalities
(its nullable side may have its own conditions in `ON`); selections built from comparisons,
AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL and LIKE; outputs that are deterministic expressions of
the relations' columns; `GROUP BY` columns with `count`, `sum`, `avg`, `min`, `max`
(`count(DISTINCT …)` too) and `HAVING`; `SELECT DISTINCT` of columns; a global aggregate.
Everything else is refused with a `PlanError` naming the construct and its position (line and
column); so is a sharing reading a column of a type SMILE cannot compare.

Where a condition goes follows from the outer join: one on the preserved side is pushed down
below it; one on a nullable side stays above it (it must see the NULL-padded rows); one that
would drop the padded rows of the nullable side (an equality with another relation in
`WHERE`) is refused — written as an inner join, it is one.

Must not: estimate or plan; no database access (the catalog snapshot is handed in).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pglast import ast, enums

from smile.errors import PlanError
from smile.optimizer.column_types import unsupported_reason
from smile.optimizer.parse_outputs import aggregation, projections, qualify, wants_aggregation
from smile.optimizer.resolve import Resolver
from smile.optimizer.sharing import (
    ColRef,
    JoinPredicate,
    OuterJoin,
    Predicate,
    Query,
    Selection,
    SpjQuery,
)
from smile.optimizer.sql_guard import (
    MAX_DEPTH,
    MAX_SQL,
    Refuse,
    check_expression,
    check_select,
    parse_statement,
    position,
)

if TYPE_CHECKING:
    from smile.optimizer.catalog import CatalogSnapshot
    from smile.optimizer.resolve import Condition, OuterFound

__all__ = ["MAX_DEPTH", "MAX_SQL", "parse_query", "parse_sharing_sql"]


def parse_query(sql: str, catalog: CatalogSnapshot) -> Query:
    """The query of `sql`, or a PlanError saying what is refused and where. Input of any size
    or shape is answered with a PlanError, never a crash: the length is bounded before the
    parser runs and the depth before anything walks the tree."""
    stmt = parse_statement(sql)
    try:
        return _parse(stmt, sql, catalog)
    except Refuse as refuse:
        raise PlanError(
            f"unsupported in a sharing: {refuse.what}, at {position(sql, refuse.location)}"
        ) from refuse


def parse_sharing_sql(sql: str, catalog: CatalogSnapshot) -> SpjQuery:
    """The SPJ query of `sql` (what the SPJ planner takes); a PlanError for anything beyond
    SPJ (`parse_query` takes those)."""
    query = parse_query(sql, catalog)
    if not query.spj:
        raise PlanError("the query is not select-project-join (parse it with parse_query)")
    return query.core


class _Sorted:
    """The conditions of a query, sorted by what they do."""

    def __init__(self) -> None:
        self.joins: set[JoinPredicate] = set()
        self.selections: list[Selection] = []
        self.outer: list[JoinPredicate] = []
        self.above: list[Predicate] = []


def _parse(stmt: ast.SelectStmt, sql: str, catalog: CatalogSnapshot) -> Query:
    check_select(stmt)
    resolver = Resolver(catalog)
    for item in stmt.fromClause:
        resolver.from_item(item)
    resolver.settle()
    conditions = list(resolver.conditions)
    if stmt.whereClause is not None:
        from smile.optimizer.resolve import Condition

        scope = "above" if resolver.outer is not None else "side"
        conditions.append(Condition(stmt.whereClause, scope))
    found = resolver.outer
    if found is not None and found.kind == "full":
        extra = {r.alias for r in resolver.rels} - set(found.left) - set(found.right)
        if extra:
            raise Refuse(f"a relation joined to a FULL JOIN's result "
                         f"({sorted(resolver.user(a) for a in extra)}); a FULL JOIN must be "
                         "the whole FROM", stmt)
    sorted_ = _Sorted()
    for c in conditions:
        for conjunct in _conjuncts_of(c):
            _sort(conjunct, c, resolver, found, sorted_)
    outer = _outer(found, sorted_, resolver, stmt) if found is not None else None
    aliases = [r.alias for r in resolver.rels]
    _check_connected(aliases, sorted_.joins | set(sorted_.outer), stmt)
    if outer is not None:
        for side in outer.preserved + (() if outer.kind == "full" else (
                outer.right if outer.kind == "left" else outer.left,)):
            _check_connected(sorted(side), {j for j in sorted_.joins
                                           if j.aliases() <= side}, stmt)
    agg = aggregation(stmt, resolver) if wants_aggregation(stmt) else None
    outputs = () if agg is not None else tuple(projections(stmt, resolver))
    reads = _reads(agg, sorted_.above)
    core = SpjQuery(tuple(resolver.rels), tuple(sorted(sorted_.joins | set(sorted_.outer))),
                    tuple(sorted_.selections), outputs, sql, reads)
    _check_types(core, resolver, stmt)
    return Query(core, outer, tuple(sorted_.above), agg, sql)


def _conjuncts_of(c: Condition) -> list[Any]:
    if c.pair is not None:
        return [c]
    return _conjuncts(c.node)


def _conjuncts(node: Any) -> list[Any]:
    if isinstance(node, ast.BoolExpr) and node.boolop == enums.BoolExprType.AND_EXPR:
        return [c for arg in node.args for c in _conjuncts(arg)]
    return [node]


def _sort(conjunct: Any, c: Condition, resolver: Resolver, found: OuterFound | None,
          out: _Sorted) -> None:
    """Put one conjunct where it belongs: an inner join, a pushed-down selection, the outer
    join's equalities, or above the outer join."""
    pred: JoinPredicate | None
    text, cols = "", frozenset[ColRef]()
    if conjunct is c:  # a USING pair
        assert c.pair is not None
        pred = JoinPredicate(*sorted(c.pair))
    else:
        check_expression(conjunct)
        pred = _equi(conjunct, resolver)
        if pred is None:
            text, cols = qualify(conjunct, resolver)
    if found is None:
        _sort_plain(pred, text, cols, out, conjunct, resolver)
        return
    if c.scope == "outer":
        _sort_outer_on(pred, text, cols, found, out, conjunct, resolver)
    elif c.scope == "side":
        _sort_plain(pred, text, cols, out, conjunct, resolver)
    else:
        _sort_above(pred, text, cols, found, out, conjunct, resolver)


def _sort_plain(pred: JoinPredicate | None, text: str, cols: frozenset[ColRef],
                out: _Sorted, node: Any, resolver: Resolver) -> None:
    """An inner join's equality, or a selection of one relation pushed down."""
    if pred is not None:
        out.joins.add(pred)
        return
    aliases = {r.alias for r in cols}
    if len(aliases) > 1:
        raise Refuse(f"a predicate over several relations that is not an equality ({text})",
                     node)
    alias = next(iter(aliases)) if aliases else resolver.rels[0].alias
    out.selections.append(Selection(alias, text, frozenset(r.column for r in cols)))


def _nullable(found: OuterFound) -> set[str]:
    """The aliases whose rows may be NULL-padded."""
    return {"left": set(found.right), "right": set(found.left),
            "full": set(found.left) | set(found.right)}[found.kind]


def _sort_outer_on(pred: JoinPredicate | None, text: str, cols: frozenset[ColRef],
                   found: OuterFound, out: _Sorted, node: Any, resolver: Resolver) -> None:
    """A conjunct of the outer join's ON."""
    left, right = set(found.left), set(found.right)
    if pred is not None and (pred.aliases() & left) and (pred.aliases() & right):
        out.outer.append(pred)
        return
    aliases = pred.aliases() if pred is not None else {r.alias for r in cols}
    kind = found.kind.upper()
    if aliases & left and aliases & right:
        raise Refuse(f"a condition of a {kind} JOIN that is not an equality between its "
                     f"sides ({text})", node)
    if found.kind == "full":
        raise Refuse(f"a condition on one side in the ON of a FULL JOIN ({text or pred})",
                     node)
    if not aliases <= _nullable(found):
        raise Refuse(f"a condition on the preserved side in the ON of a {kind} JOIN "
                     f"({text or pred}); filter that side in WHERE or inside it", node)
    _sort_plain(pred, text, cols, out, node, resolver)  # it restricts which rows can match


def _sort_above(pred: JoinPredicate | None, text: str, cols: frozenset[ColRef],
                found: OuterFound, out: _Sorted, node: Any, resolver: Resolver) -> None:
    """A conjunct above the outer join (WHERE, or an inner join after it)."""
    nullable = _nullable(found)
    aliases = pred.aliases() if pred is not None else {r.alias for r in cols}
    kind = found.kind.upper()
    if pred is not None:
        if aliases & nullable:
            raise Refuse(f"an equality with the NULL-padded side of a {kind} JOIN above it "
                         f"({pred.left.sql()} = {pred.right.sql()}): it drops every padded "
                         "row; write an inner JOIN", node)
        out.joins.add(pred)
        return
    if aliases & nullable:
        out.above.append(Predicate(text, cols))
        return
    _sort_plain(None, text, cols, out, node, resolver)


def _outer(found: OuterFound, out: _Sorted, resolver: Resolver, stmt: Any) -> OuterJoin:
    """The outer join, with the relations joined to it from above added to its preserved
    side (a FULL JOIN has none to add them to)."""
    if not out.outer:
        raise Refuse(f"a {found.kind.upper()} JOIN without an equality between its sides",
                     found.node)
    left, right = set(found.left), set(found.right)
    extra = {r.alias for r in resolver.rels} - left - right  # none for a FULL JOIN
    if found.kind == "left":
        left |= extra
    else:
        right |= extra
    return OuterJoin(found.kind, frozenset(left), frozenset(right),
                     tuple(sorted(out.outer)))


def _reads(agg: Any, above: list[Predicate]) -> frozenset[ColRef]:
    """Columns the levels above the core read besides its projections: the aggregation's
    keys and arguments, the predicates above an outer join."""
    refs: set[ColRef] = set()
    if agg is not None:
        refs |= set(agg.group_by)
        for call in agg.calls:
            refs |= call.refs
    for p in above:
        refs |= p.refs
    return frozenset(refs)


def _equi(node: Any, resolver: Resolver) -> JoinPredicate | None:
    if (isinstance(node, ast.A_Expr) and node.kind == enums.A_Expr_Kind.AEXPR_OP
            and len(node.name) == 1 and node.name[0].sval == "="
            and isinstance(node.lexpr, ast.ColumnRef) and isinstance(node.rexpr, ast.ColumnRef)
            and resolver.merged_full(node.lexpr) is None
            and resolver.merged_full(node.rexpr) is None):
        left, right = resolver.column(node.lexpr), resolver.column(node.rexpr)
        if left.alias != right.alias:
            return JoinPredicate(*sorted((left, right)))
    return None


def _check_connected(aliases: list[str], joins: set[JoinPredicate], stmt: Any) -> None:
    if not aliases:
        return
    reached = {aliases[0]}
    changed = True
    while changed:
        changed = False
        for j in joins:
            a = j.aliases()
            if a & reached and not a <= reached:
                reached |= a
                changed = True
    missing = [a for a in aliases if a not in reached]
    if missing:
        raise Refuse(f"a cross join: {missing} is joined to the rest by no equality", stmt)


def _check_types(core: SpjQuery, resolver: Resolver, stmt: Any) -> None:
    """Every column the sharing reads must be of a type SMILE can compare and copy."""
    for r in core.relations:
        rel = resolver.catalog.relation(r.relation)
        for name in sorted(core.needed_columns(r.alias) | core.selected_columns(r.alias)):
            why = unsupported_reason(rel.column(name).type)
            if why is not None:
                raise Refuse(f"the column {resolver.user(r.alias)}.{name} of type "
                             f"{rel.column(name).type}, {why}", stmt)
