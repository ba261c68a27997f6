"""Parse a sharing's SQL with PostgreSQL's own parser (pglast) into a name-resolved `SpjQuery`.

Accepted: inner equi-joins (`JOIN … ON`, `USING`, or equalities in `WHERE`, over comma-separated
FROM items too), selections built from comparisons, AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL and
LIKE, and projections of columns, aliases and deterministic expressions of one relation's
columns. Everything else is refused with a `PlanError` naming the construct and its position
(line and column): aggregates, outer and natural joins, subqueries, DISTINCT, GROUP BY/HAVING,
ORDER BY/LIMIT, window functions, set operations, CTEs, volatile or unknown functions, cross
joins with no join predicate. Unknown relations or columns are refused naming what exists.

Must not: estimate or plan; no database access (the catalog snapshot is handed in).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pglast import ast, enums, parse_sql
from pglast.parser import ParseError
from pglast.stream import RawStream

from smile.errors import PlanError
from smile.optimizer.sharing import (
    ColRef,
    JoinPredicate,
    Projection,
    RelRef,
    Selection,
    SpjQuery,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from smile.optimizer.catalog import CatalogSnapshot

# Functions whose result depends only on their arguments (PostgreSQL marks them IMMUTABLE).
DETERMINISTIC = frozenset({
    "lower", "upper", "initcap", "length", "char_length", "octet_length", "substr",
    "trim", "btrim", "ltrim", "rtrim", "replace", "concat", "concat_ws", "md5", "left", "right",
    "split_part", "strpos", "position", "reverse", "abs", "round",
    "floor", "ceil", "ceiling", "trunc", "mod", "power", "sqrt", "sign", "greatest", "least",
    "nullif", "coalesce", "int4", "int8", "float8", "numeric", "text", "starts_with",
})
VOLATILE = frozenset({
    "now", "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday",
    "random", "setseed", "nextval", "currval", "lastval", "txid_current", "gen_random_uuid",
    "uuid_generate_v4", "pg_backend_pid", "current_setting", "age",
})
AGGREGATES = frozenset({
    "count", "sum", "avg", "min", "max", "array_agg", "string_agg", "bool_and", "bool_or",
    "every", "json_agg", "jsonb_agg", "json_object_agg", "jsonb_object_agg", "stddev",
    "variance", "bit_and", "bit_or", "percentile_cont", "percentile_disc", "mode",
})


MAX_SQL = 16 * 1024
"""Longest sharing SQL accepted (characters), checked before the parser sees it."""
MAX_DEPTH = 64
"""Deepest expression tree accepted, checked before anything walks it recursively."""
OPERATORS = frozenset({
    "=", "<>", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "||",
    "~~", "!~~", "~~*", "!~~*", "between", "not between",
})
TYPES = frozenset({
    "int2", "int4", "int8", "smallint", "integer", "bigint", "int", "numeric", "decimal",
    "float4", "float8", "real", "double precision", "text", "varchar", "bpchar", "char",
    "bool", "boolean", "date",
})
_EXPR_KINDS = frozenset({
    enums.A_Expr_Kind.AEXPR_OP, enums.A_Expr_Kind.AEXPR_DISTINCT,
    enums.A_Expr_Kind.AEXPR_NOT_DISTINCT, enums.A_Expr_Kind.AEXPR_NULLIF,
    enums.A_Expr_Kind.AEXPR_IN, enums.A_Expr_Kind.AEXPR_LIKE, enums.A_Expr_Kind.AEXPR_ILIKE,
    enums.A_Expr_Kind.AEXPR_BETWEEN, enums.A_Expr_Kind.AEXPR_NOT_BETWEEN,
})
# Nodes that hold nothing to check themselves (their children are checked on their own).
_LEAVES = (ast.A_Const, ast.Integer, ast.Float, ast.String, ast.Boolean, ast.BitString,
           ast.ColumnRef, ast.ResTarget)
_INNER = (ast.BoolExpr, ast.NullTest, ast.BooleanTest, ast.CoalesceExpr, ast.MinMaxExpr,
          ast.CaseExpr, ast.CaseWhen)
_REFUSED = {
    "SubLink": "a subquery", "ParamRef": "a parameter ($n)", "CollateClause": "COLLATE",
    "A_ArrayExpr": "an ARRAY constructor", "A_Indirection": "a subscript or field selection",
    "RowExpr": "a ROW constructor", "GroupingFunc": "a grouping or window construct",
    "WindowDef": "a grouping or window construct", "A_Star": "* inside an expression",
}


class _Refuse(Exception):
    def __init__(self, what: str, node: Any) -> None:
        super().__init__(what)
        self.what = what
        self.location = _location(node)


def _location(node: Any) -> int | None:
    """The first source offset at or below `node` (some nodes, like JoinExpr, have none)."""
    if node is None:
        return None
    for n in _walk(node):
        loc = getattr(n, "location", None)
        if isinstance(loc, int) and loc >= 0:
            return loc
    return None


def _position(sql: str, offset: int | None) -> str:
    if offset is None or offset < 0:
        return "somewhere in the query"
    line = sql.count("\n", 0, offset) + 1
    col = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {col}"


def _children(node: Any) -> Iterator[Any]:
    for name in getattr(type(node), "__slots__", ()):
        value = getattr(node, name, None)
        if isinstance(value, ast.Node):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, ast.Node))


def _walk(node: Any) -> Iterator[Any]:
    """Every node at or below `node`, without recursion (depth is checked first, but the
    walk must not be what fails on a deep tree)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(_children(n))))


def _depth(node: Any) -> int:
    """How deep the tree below `node` goes, without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((c, d + 1) for c in _children(n))
    return deepest


def _names(nodes: Any) -> list[str]:
    return [s.sval for s in nodes or () if isinstance(s, ast.String)]


def _builtin(names: list[str], allowed: frozenset[str], what: str, node: Any) -> str:
    """The name of a function, operator or type, if built in and allowed (unqualified or in
    pg_catalog); refused naming it otherwise."""
    shown = ".".join(names)
    if len(names) > 2 or (len(names) == 2 and names[0] != "pg_catalog"):
        raise _Refuse(f"the {what} {shown} (only built-in ones, unqualified or pg_catalog)", node)
    if names[-1].lower() not in allowed:
        raise _Refuse(f"the {what} {shown}, not in the allowed list", node)
    return names[-1].lower()


def _check_node(n: Any) -> None:
    """Refuse `n` unless it is one of the few things an SPJ expression may contain."""
    if isinstance(n, _LEAVES):
        return
    if isinstance(n, ast.A_Expr):
        if n.kind not in _EXPR_KINDS:
            raise _Refuse(f"the operator form {n.kind.name.removeprefix('AEXPR_')}", n)
        _builtin(_names(n.name), OPERATORS, "operator", n)
    elif isinstance(n, ast.FuncCall):
        names = _names(n.funcname)
        name, bare = ".".join(names), names[-1].lower()
        if n.over is not None:
            raise _Refuse(f"a window function ({name} … OVER)", n)
        if n.agg_star or n.agg_distinct or n.agg_filter is not None or n.agg_order or \
                n.agg_within_group or bare in AGGREGATES:
            raise _Refuse(f"an aggregate ({name})", n)
        if n.func_variadic:
            raise _Refuse(f"a VARIADIC call of {name}", n)
        if bare in VOLATILE:
            raise _Refuse(f"a volatile function ({name}())", n)
        if bare not in DETERMINISTIC:
            raise _Refuse(f"the function {name}(), not known to be deterministic", n)
        _builtin(names, DETERMINISTIC, "function", n)  # and unqualified or pg_catalog's
    elif isinstance(n, ast.TypeCast):
        _check_type(n.typeName, n)
    elif isinstance(n, ast.TypeName):
        _check_type(n, n)
    elif isinstance(n, ast.SQLValueFunction):
        raise _Refuse(f"a volatile value ({n.op.name.removeprefix('SVFOP_')})", n)
    elif not isinstance(n, _INNER):
        raise _Refuse(_REFUSED.get(type(n).__name__, f"the construct {type(n).__name__}"), n)


def _check_type(t: ast.TypeName, node: Any) -> None:
    if t.arrayBounds or t.setof or t.pct_type:
        raise _Refuse(f"the type {'.'.join(_names(t.names))}[] (arrays and %TYPE)", node)
    _builtin(_names(t.names), TYPES, "type", node)


def _check_expression(node: Any) -> None:
    """Refuse what no SPJ expression may contain, anywhere below `node`."""
    for n in _walk(node):
        _check_node(n)


def _check_select(stmt: ast.SelectStmt) -> None:
    if stmt.op != enums.SetOperation.SETOP_NONE:
        raise _Refuse(f"a set operation ({stmt.op.name.removeprefix('SETOP_')})", stmt.larg)
    checks = [
        ("withClause", "a WITH clause (CTE)"), ("distinctClause", "DISTINCT"),
        ("groupClause", "GROUP BY"), ("havingClause", "HAVING"), ("windowClause", "WINDOW"),
        ("sortClause", "ORDER BY"), ("limitCount", "LIMIT"), ("limitOffset", "OFFSET"),
        ("lockingClause", "FOR UPDATE/SHARE"), ("intoClause", "SELECT INTO"),
        ("valuesLists", "VALUES"),
    ]
    for attr, what in checks:
        value = getattr(stmt, attr, None)
        if value:
            first = value[0] if isinstance(value, (list, tuple)) else value
            raise _Refuse(what, first if _location(first) is not None else stmt)
    if not stmt.fromClause:
        raise _Refuse("a query without FROM", stmt)
    if not stmt.targetList:
        raise _Refuse("a query without output columns", stmt)


class _Resolver:
    """Names in the query → relations and their columns. Aliases are made canonical on the way
    (NOTES §8): the relation's own name, or `name#k` for its k-th occurrence, so two sharings
    that compute the same thing name it alike whatever aliases their authors chose."""

    def __init__(self, catalog: CatalogSnapshot) -> None:
        self.catalog = catalog
        self.rels: list[RelRef] = []
        self.users: dict[str, str] = {}  # the author's alias → the canonical one
        self.equalities: list[Any] = []  # ON/USING quals, treated like WHERE conjuncts

    def user(self, canonical: str) -> str:
        return next(u for u, c in self.users.items() if c == canonical)

    def from_item(self, node: Any) -> list[str]:
        """Register FROM items; returns the aliases under this item."""
        if isinstance(node, ast.RangeVar):
            if node.catalogname:
                raise _Refuse(f"a relation in another database ({node.catalogname})", node)
            if node.alias is not None and node.alias.colnames:
                raise _Refuse("column aliases on a FROM item (name the outputs with AS)", node)
            try:
                relation = self.catalog.relation(
                    f"{node.schemaname}.{node.relname}" if node.schemaname else node.relname).name
            except PlanError as exc:
                raise _Refuse(f"an {exc.message}", node) from exc
            user = node.alias.aliasname if node.alias else node.relname
            if user in self.users:
                raise _Refuse(f"the alias {user!r} twice (give each FROM item its own)", node)
            seen = sum(1 for r in self.rels if r.relation == relation)
            alias = relation if not seen else f"{relation}#{seen + 1}"
            self.users[user] = alias
            self.rels.append(RelRef(alias, relation))
            return [alias]
        if isinstance(node, ast.JoinExpr):
            if node.jointype != enums.JoinType.JOIN_INNER:
                kind = node.jointype.name.removeprefix("JOIN_")
                raise _Refuse(f"an outer join ({kind} JOIN)", node)
            if node.isNatural:
                raise _Refuse("a NATURAL JOIN (name the columns with USING)", node)
            left = self.from_item(node.larg)
            right = self.from_item(node.rarg)
            if node.quals is not None:
                self.equalities.append(node.quals)
            elif node.usingClause:
                for col in node.usingClause:
                    name = col.sval
                    la = self._owner(name, left, node)
                    ra = self._owner(name, right, node)
                    self.equalities.append(("using", ColRef(la, name), ColRef(ra, name)))
            elif not node.quals:
                raise _Refuse("a cross join with no join predicate", node)
            return left + right
        if isinstance(node, ast.RangeSubselect):
            raise _Refuse("a subquery in FROM", node)
        if isinstance(node, ast.RangeFunction):
            raise _Refuse("a function in FROM", node)
        raise _Refuse(f"the FROM item {type(node).__name__}", node)

    def _owner(self, column: str, aliases: list[str], node: Any) -> str:
        owners = [a for a in aliases if self._has(a, column)]
        if not owners:
            raise _Refuse(f"USING ({column}): no relation on that side has it", node)
        return owners[0]

    def _has(self, alias: str, column: str) -> bool:
        rel = self.catalog.relation(next(r.relation for r in self.rels if r.alias == alias))
        return any(c.name == column for c in rel.columns)

    def column(self, node: ast.ColumnRef) -> ColRef:
        names = [f.sval for f in node.fields if isinstance(f, ast.String)]
        if len(names) == 1:
            owners = [r.alias for r in self.rels if self._has(r.alias, names[0])]
            if not owners:
                known = {self.user(r.alias): [c.name for c in
                                              self.catalog.relation(r.relation).columns]
                         for r in self.rels}
                raise _Refuse(f"an unknown column {names[0]!r} (columns: {known})", node)
            if len(owners) > 1:
                raise _Refuse(f"an ambiguous column {names[0]!r} (in "
                              f"{[self.user(o) for o in owners]}; qualify it)", node)
            return ColRef(owners[0], names[0])
        if len(names) == 2:
            user, column = names
            if user not in self.users:
                raise _Refuse(f"an unknown table or alias {user!r} "
                              f"(FROM has {list(self.users)})", node)
            alias = self.users[user]
            if not self._has(alias, column):
                rel = self.catalog.relation(next(r.relation for r in self.rels
                                                 if r.alias == alias))
                raise _Refuse(f"an unknown column {user}.{column} "
                              f"(its columns: {[c.name for c in rel.columns]})", node)
            return ColRef(alias, column)
        raise _Refuse("a column reference with a schema (use the table's alias)", node)


def _qualify(node: Any, resolver: _Resolver) -> tuple[str, frozenset[ColRef]]:
    """SQL text of `node` with every column qualified by its alias, and the columns it reads."""
    cols: set[ColRef] = set()
    for n in _walk(node):
        if isinstance(n, ast.ColumnRef):
            if any(isinstance(f, ast.A_Star) for f in n.fields):
                raise _Refuse("* inside an expression", n)
            ref = resolver.column(n)
            cols.add(ref)
            n.fields = (ast.String(sval=ref.alias), ast.String(sval=ref.column))
    return RawStream()(node), frozenset(cols)


def _conjuncts(node: Any) -> list[Any]:
    if isinstance(node, ast.BoolExpr) and node.boolop == enums.BoolExprType.AND_EXPR:
        return [c for arg in node.args for c in _conjuncts(arg)]
    return [node]


def _equi(node: Any, resolver: _Resolver) -> JoinPredicate | None:
    if (isinstance(node, ast.A_Expr) and node.kind == enums.A_Expr_Kind.AEXPR_OP
            and len(node.name) == 1 and node.name[0].sval == "="
            and isinstance(node.lexpr, ast.ColumnRef) and isinstance(node.rexpr, ast.ColumnRef)):
        left, right = resolver.column(node.lexpr), resolver.column(node.rexpr)
        if left.alias != right.alias:
            return JoinPredicate(*sorted((left, right)))
    return None


def parse_sharing_sql(sql: str, catalog: CatalogSnapshot) -> SpjQuery:
    """The SPJ query of `sql`, or a PlanError saying what is refused and where. Input of any
    size or shape is answered with a PlanError, never a crash: the length is bounded before the
    parser runs and the depth before anything walks the tree."""
    if len(sql) > MAX_SQL:
        raise PlanError(f"the query is {len(sql)} characters long; at most {MAX_SQL} are "
                        "accepted")
    if "\x00" in sql:
        raise PlanError("the query contains a NUL character")
    try:
        sql.encode()
    except UnicodeEncodeError as exc:
        raise PlanError(f"the query is not valid Unicode text ({exc.reason})") from exc
    try:
        stmts = parse_sql(sql)
    except ParseError as exc:
        message = str(exc)
        match = re.search(r"at index (\d+)", message)
        where = _position(sql, int(match.group(1))) if match else "in the query"
        detail = message.split(", at index", maxsplit=1)[0]
        raise PlanError(f"SQL syntax error at {where}: {detail}") from exc
    if len(stmts) != 1:
        raise PlanError(f"a sharing is one SELECT statement, got {len(stmts)} statements")
    stmt = stmts[0].stmt
    if not isinstance(stmt, ast.SelectStmt):
        raise PlanError(f"a sharing is a SELECT, got {type(stmt).__name__}")
    if _depth(stmt) > MAX_DEPTH:
        raise PlanError(f"the query is nested deeper than {MAX_DEPTH} levels")
    try:
        return _parse(stmt, sql, catalog)
    except _Refuse as refuse:
        raise PlanError(
            f"unsupported in a sharing: {refuse.what}, at {_position(sql, refuse.location)}"
        ) from refuse


def _parse(stmt: ast.SelectStmt, sql: str, catalog: CatalogSnapshot) -> SpjQuery:
    _check_select(stmt)
    resolver = _Resolver(catalog)
    for item in stmt.fromClause:
        resolver.from_item(item)
    joins: set[JoinPredicate] = set()
    selections: list[Selection] = []
    conjuncts: list[Any] = []
    for q in resolver.equalities:
        if isinstance(q, tuple):
            joins.add(JoinPredicate(*sorted((q[1], q[2]))))
        else:
            conjuncts.extend(_conjuncts(q))
    if stmt.whereClause is not None:
        conjuncts.extend(_conjuncts(stmt.whereClause))
    for c in conjuncts:
        _check_expression(c)
        eq = _equi(c, resolver)
        if eq is not None:
            joins.add(eq)
            continue
        text, cols = _qualify(c, resolver)
        aliases = {r.alias for r in cols}
        if len(aliases) > 1:
            raise _Refuse(f"a predicate over several relations that is not an equality "
                          f"({text})", c)
        alias = next(iter(aliases)) if aliases else resolver.rels[0].alias
        selections.append(Selection(alias, text, frozenset(r.column for r in cols)))
    _check_connected([r.alias for r in resolver.rels], joins, stmt)
    projections = _projections(stmt, resolver)
    return SpjQuery(tuple(resolver.rels), tuple(sorted(joins)), tuple(selections),
                    tuple(projections), sql)


def _projections(stmt: ast.SelectStmt, resolver: _Resolver) -> list[Projection]:
    out: list[Projection] = []
    for target in stmt.targetList:
        val = target.val
        if isinstance(val, ast.ColumnRef) and any(isinstance(f, ast.A_Star) for f in val.fields):
            names = [f.sval for f in val.fields if isinstance(f, ast.String)]
            for user in names[:1]:
                if user not in resolver.users:
                    raise _Refuse(f"an unknown table or alias {user!r}", val)
            aliases = [resolver.users[u] for u in names[:1]] or [r.alias for r in resolver.rels]
            for alias in aliases:
                rel = resolver.catalog.relation(
                    next(r.relation for r in resolver.rels if r.alias == alias))
                for c in rel.columns:
                    ref = ColRef(alias, c.name)
                    out.append(Projection(c.name, ref.sql(), alias, frozenset({c.name})))
            continue
        _check_expression(val)
        text, cols = _qualify(val, resolver)
        aliases = {r.alias for r in cols}
        if len(aliases) > 1:
            raise _Refuse(f"an output expression over several relations ({text}); "
                          "compute it from one relation's columns", val)
        if target.name:
            name = target.name
        elif isinstance(val, ast.ColumnRef):
            name = next(iter(cols)).column
        else:
            raise _Refuse(f"an output expression without a name ({text}); add AS name", val)
        if len(name.encode()) > 63:
            raise _Refuse(f"the output name {name[:20]!r}… longer than PostgreSQL's 63 bytes",
                          val)
        alias = next(iter(aliases)) if aliases else None
        out.append(Projection(name, text, alias, frozenset(r.column for r in cols)))
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise _Refuse(f"duplicate output columns {dupes} (give them distinct names with AS)",
                      stmt.targetList[0])
    return out


def _check_connected(aliases: list[str], joins: set[JoinPredicate], stmt: Any) -> None:
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
        raise _Refuse(f"a cross join: {missing} is joined to the rest by no equality", stmt)
