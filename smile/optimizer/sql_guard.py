"""The allow-list a sharing's SQL is held to, before anything is resolved or planned: one
SELECT statement of bounded length and depth, built only from nodes, operators, functions and
types known to be deterministic and harmless. Aggregates are allowed only where the parser
says (outputs and HAVING), never inside another aggregate.

Everything refused raises `Refuse` with the construct's name and the node, which the parser
turns into a `PlanError` with the line and column.

Must not: resolve names or plan; no database access.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pglast import ast, enums, parse_sql
from pglast.parser import ParseError

from smile.errors import PlanError

if TYPE_CHECKING:
    from collections.abc import Iterator

DETERMINISTIC = frozenset({
    "lower", "upper", "initcap", "length", "char_length", "octet_length", "substr",
    "trim", "btrim", "ltrim", "rtrim", "replace", "concat", "concat_ws", "md5", "left", "right",
    "split_part", "strpos", "position", "reverse", "abs", "round",
    "floor", "ceil", "ceiling", "trunc", "mod", "power", "sqrt", "sign", "greatest", "least",
    "nullif", "coalesce", "int4", "int8", "float8", "numeric", "text", "starts_with",
})
"""Functions whose result depends only on their arguments (PostgreSQL marks them IMMUTABLE)."""
VOLATILE = frozenset({
    "now", "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday",
    "random", "setseed", "nextval", "currval", "lastval", "txid_current", "gen_random_uuid",
    "uuid_generate_v4", "pg_backend_pid", "current_setting", "age",
})
MAINTAINED = frozenset({"count", "sum", "avg", "min", "max"})
"""The aggregates SMILE maintains incrementally."""
AGGREGATES = MAINTAINED | frozenset({
    "array_agg", "string_agg", "bool_and", "bool_or", "every", "json_agg", "jsonb_agg",
    "json_object_agg", "jsonb_object_agg", "stddev", "variance", "bit_and", "bit_or",
    "percentile_cont", "percentile_disc", "mode",
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
_LEAVES = (ast.A_Const, ast.Integer, ast.Float, ast.String, ast.Boolean, ast.BitString,
           ast.ColumnRef, ast.ResTarget)
"""Nodes that hold nothing to check themselves (their children are checked on their own)."""
_INNER = (ast.BoolExpr, ast.NullTest, ast.BooleanTest, ast.CoalesceExpr, ast.MinMaxExpr,
          ast.CaseExpr, ast.CaseWhen)
_REFUSED = {
    "SubLink": "a subquery", "ParamRef": "a parameter ($n)", "CollateClause": "COLLATE",
    "A_ArrayExpr": "an ARRAY constructor", "A_Indirection": "a subscript or field selection",
    "RowExpr": "a ROW constructor", "GroupingFunc": "a grouping or window construct",
    "WindowDef": "a grouping or window construct", "A_Star": "* inside an expression",
}


class Refuse(Exception):
    """What is refused, and the node it is at."""

    def __init__(self, what: str, node: Any) -> None:
        super().__init__(what)
        self.what = what
        self.location = location(node)


def location(node: Any) -> int | None:
    """The first source offset at or below `node` (some nodes, like JoinExpr, have none)."""
    if node is None:
        return None
    for n in walk(node):
        loc = getattr(n, "location", None)
        if isinstance(loc, int) and loc >= 0:
            return loc
    return None


def position(sql: str, offset: int | None) -> str:
    """Line and column of a source offset.

    >>> position("SELECT a\\nFROM b", 9)
    'line 2, column 1'
    """
    if offset is None or offset < 0:
        return "somewhere in the query"
    line = sql.count("\n", 0, offset) + 1
    col = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {col}"


def children(node: Any) -> Iterator[Any]:
    for name in getattr(type(node), "__slots__", ()):
        value = getattr(node, name, None)
        if isinstance(value, ast.Node):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, ast.Node))


def walk(node: Any) -> Iterator[Any]:
    """Every node at or below `node`, without recursion (depth is checked first, but the
    walk must not be what fails on a deep tree)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(children(n))))


def depth(node: Any) -> int:
    """How deep the tree below `node` goes, without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((c, d + 1) for c in children(n))
    return deepest


def names(nodes: Any) -> list[str]:
    return [s.sval for s in nodes or () if isinstance(s, ast.String)]


def builtin(parts: list[str], allowed: frozenset[str], what: str, node: Any) -> str:
    """The name of a function, operator or type, if built in and allowed (unqualified or in
    pg_catalog); refused naming it otherwise."""
    shown = ".".join(parts)
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "pg_catalog"):
        raise Refuse(f"the {what} {shown} (only built-in ones, unqualified or pg_catalog)", node)
    if parts[-1].lower() not in allowed:
        raise Refuse(f"the {what} {shown}, not in the allowed list", node)
    return parts[-1].lower()


def is_aggregate(n: Any) -> bool:
    """Whether `n` is a call of an aggregate (by name or by its aggregate-only syntax)."""
    if not isinstance(n, ast.FuncCall) or n.over is not None:
        return False
    return bool(n.agg_star or n.agg_distinct or n.agg_filter is not None or n.agg_order
                or n.agg_within_group or names(n.funcname)[-1].lower() in AGGREGATES)


def check_aggregate(n: ast.FuncCall) -> str:
    """The name of an aggregate call SMILE maintains; refused naming what it is not."""
    parts = names(n.funcname)
    name, bare = ".".join(parts), parts[-1].lower()
    if n.agg_filter is not None:
        raise Refuse(f"a FILTER clause on {name}", n)
    if n.agg_order or n.agg_within_group:
        raise Refuse(f"an ordered aggregate ({name} … ORDER BY)", n)
    if bare not in MAINTAINED:
        raise Refuse(f"the aggregate {name} (maintained: count, sum, avg, min, max)", n)
    builtin(parts, MAINTAINED, "aggregate", n)
    if n.agg_distinct and bare != "count":
        raise Refuse(f"{name}(DISTINCT …) (only count(DISTINCT …) is maintained)", n)
    if n.agg_star and bare != "count":
        raise Refuse(f"{name}(*)", n)
    args = n.args or ()
    if not n.agg_star and len(args) != 1:
        raise Refuse(f"{name} with {len(args)} arguments", n)
    for arg in args:
        for inner in walk(arg):
            if is_aggregate(inner):
                raise Refuse(f"an aggregate inside another ({name})", inner)
    return bare


def check_node(n: Any, aggregates: bool = False, clause: str = "WHERE") -> None:
    """Refuse `n` unless it is one of the few things an expression may contain; aggregate
    calls only where `aggregates` (they are checked by `check_aggregate`), else refused as
    being in `clause`."""
    if isinstance(n, _LEAVES):
        return
    if isinstance(n, ast.A_Expr):
        if n.kind not in _EXPR_KINDS:
            raise Refuse(f"the operator form {n.kind.name.removeprefix('AEXPR_')}", n)
        builtin(names(n.name), OPERATORS, "operator", n)
    elif isinstance(n, ast.FuncCall):
        _check_call(n, aggregates, clause)
    elif isinstance(n, ast.TypeCast):
        check_type(n.typeName, n)
    elif isinstance(n, ast.TypeName):
        check_type(n, n)
    elif isinstance(n, ast.SQLValueFunction):
        raise Refuse(f"a volatile value ({n.op.name.removeprefix('SVFOP_')})", n)
    elif not isinstance(n, _INNER):
        raise Refuse(_REFUSED.get(type(n).__name__, f"the construct {type(n).__name__}"), n)


def _check_call(n: ast.FuncCall, aggregates: bool, clause: str) -> None:
    parts = names(n.funcname)
    name, bare = ".".join(parts), parts[-1].lower()
    if n.over is not None:
        raise Refuse(f"a window function ({name} … OVER)", n)
    if is_aggregate(n):
        if not aggregates:
            raise Refuse(f"an aggregate ({name}) in {clause}", n)
        check_aggregate(n)
        return
    if n.func_variadic:
        raise Refuse(f"a VARIADIC call of {name}", n)
    if bare in VOLATILE:
        raise Refuse(f"a volatile function ({name}())", n)
    if bare not in DETERMINISTIC:
        raise Refuse(f"the function {name}(), not known to be deterministic", n)
    builtin(parts, DETERMINISTIC, "function", n)  # and unqualified or pg_catalog's


def check_type(t: ast.TypeName, node: Any) -> None:
    if t.arrayBounds or t.setof or t.pct_type:
        raise Refuse(f"the type {'.'.join(names(t.names))}[] (arrays and %TYPE)", node)
    builtin(names(t.names), TYPES, "type", node)


def check_expression(node: Any, aggregates: bool = False, clause: str = "WHERE") -> None:
    """Refuse what no expression may contain, anywhere below `node` (`check_node`)."""
    for n in walk(node):
        check_node(n, aggregates, clause)


_STILL_REFUSED = (
    ("withClause", "a WITH clause (CTE)"), ("windowClause", "WINDOW"),
    ("sortClause", "ORDER BY"), ("limitCount", "LIMIT"), ("limitOffset", "OFFSET"),
    ("lockingClause", "FOR UPDATE/SHARE"), ("intoClause", "SELECT INTO"),
    ("valuesLists", "VALUES"),
)


def check_select(stmt: ast.SelectStmt) -> None:
    """Refuse the clauses a sharing may not have."""
    if stmt.op != enums.SetOperation.SETOP_NONE:
        raise Refuse(f"a set operation ({stmt.op.name.removeprefix('SETOP_')})", stmt.larg)
    for attr, what in _STILL_REFUSED:
        value = getattr(stmt, attr, None)
        if value:
            first = value[0] if isinstance(value, (list, tuple)) else value
            raise Refuse(what, first if location(first) is not None else stmt)
    if stmt.distinctClause and any(d is not None for d in stmt.distinctClause):
        first = next(d for d in stmt.distinctClause if d is not None)
        raise Refuse("DISTINCT ON", first)
    for g in stmt.groupClause or ():
        if isinstance(g, ast.GroupingSet):
            raise Refuse("a grouping set (GROUPING SETS, ROLLUP, CUBE or ())", g)
    if not stmt.fromClause:
        raise Refuse("a query without FROM", stmt)
    if not stmt.targetList:
        raise Refuse("a query without output columns", stmt)


def parse_statement(sql: str) -> ast.SelectStmt:
    """The one SELECT statement of `sql`, bounded in length before PostgreSQL's parser sees
    it and in depth before anything walks it; a PlanError saying what is wrong otherwise."""
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
        where = position(sql, int(match.group(1))) if match else "in the query"
        detail = message.split(", at index", maxsplit=1)[0]
        raise PlanError(f"SQL syntax error at {where}: {detail}") from exc
    if len(stmts) != 1:
        raise PlanError(f"a sharing is one SELECT statement, got {len(stmts)} statements")
    stmt = stmts[0].stmt
    if not isinstance(stmt, ast.SelectStmt):
        raise PlanError(f"a sharing is a SELECT, got {type(stmt).__name__}")
    if depth(stmt) > MAX_DEPTH:
        raise PlanError(f"the query is nested deeper than {MAX_DEPTH} levels")
    return stmt
