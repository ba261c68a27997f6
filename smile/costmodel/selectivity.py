"""Selectivity of selections and joins from column statistics (the System R rules).

`=` → 1/n_distinct, `<>` → 1 − 1/n_distinct, ranges → 1/3, BETWEEN → 1/4, IN (k values) →
k/n_distinct, LIKE → 0.1 (0.05 with a fixed prefix), IS NULL → null_frac; AND multiplies, OR is
s₁ + s₂ − s₁s₂, NOT is 1 − s. An equi-join → 1/max(n_distinct of the two columns).

Must not: touch a database; statistics come from the catalog snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pglast import ast, enums, parse_sql

DEFAULT = 1 / 3

StatsOf = Callable[[str], tuple[float, float]]
"""column name → (n_distinct, null_frac)."""


def selection_selectivity(predicate_sql: str, stats: StatsOf) -> float:
    """Fraction of rows a predicate keeps.

    >>> selection_selectivity("x = 3", lambda c: (10.0, 0.0))
    0.1
    >>> round(selection_selectivity("x = 3 OR NOT y IS NULL", lambda c: (10.0, 0.5)), 3)
    0.55
    """
    where = parse_sql(f"SELECT 1 WHERE {predicate_sql}")[0].stmt.whereClause
    return min(1.0, max(0.0, _estimate(where, stats)))


def _column(node: Any) -> str | None:
    if isinstance(node, ast.ColumnRef):
        names = [f.sval for f in node.fields if isinstance(f, ast.String)]
        return names[-1] if names else None
    if isinstance(node, ast.TypeCast):
        return _column(node.arg)
    return None


def _nd(node: Any, stats: StatsOf) -> float:
    col = _column(node)
    return max(1.0, stats(col)[0]) if col else 10.0


def _estimate(node: Any, stats: StatsOf) -> float:
    if isinstance(node, ast.BoolExpr):
        return _boolean(node, stats)
    if isinstance(node, ast.NullTest):
        col = _column(node.arg)
        frac = stats(col)[1] if col else 0.1
        return frac if node.nulltesttype == enums.NullTestType.IS_NULL else 1.0 - frac
    if isinstance(node, ast.A_Expr):
        return _comparison(node, stats)
    return DEFAULT


def _boolean(node: Any, stats: StatsOf) -> float:
    """AND multiplies, OR is s₁ + s₂ − s₁s₂, NOT is 1 − s."""
    parts = [_estimate(a, stats) for a in node.args]
    if node.boolop == enums.BoolExprType.AND_EXPR:
        out = 1.0
        for p in parts:
            out *= p
        return out
    if node.boolop == enums.BoolExprType.OR_EXPR:
        out = 0.0
        for p in parts:
            out = out + p - out * p
        return out
    return 1.0 - parts[0]


_RANGES = {enums.A_Expr_Kind.AEXPR_BETWEEN: 0.25, enums.A_Expr_Kind.AEXPR_BETWEEN_SYM: 0.25,
           enums.A_Expr_Kind.AEXPR_NOT_BETWEEN: 0.75,
           enums.A_Expr_Kind.AEXPR_NOT_BETWEEN_SYM: 0.75}


def _comparison(node: Any, stats: StatsOf) -> float:
    """An operator, IN, BETWEEN or LIKE (anything else: `DEFAULT`)."""
    kind = node.kind
    op = node.name[0].sval if node.name else ""
    if kind == enums.A_Expr_Kind.AEXPR_OP:
        side = node.lexpr if _column(node.lexpr) else node.rexpr
        if op == "=":
            return 1.0 / _nd(side, stats)
        if op in ("<>", "!="):
            return 1.0 - 1.0 / _nd(side, stats)
        return DEFAULT  # ranges and any other operator
    if kind == enums.A_Expr_Kind.AEXPR_IN:
        k = len(node.rexpr) if isinstance(node.rexpr, (list, tuple)) else 1
        s = min(1.0, k / _nd(node.lexpr, stats))
        return s if op == "=" else 1.0 - s
    if kind in _RANGES:
        return _RANGES[kind]
    if kind in (enums.A_Expr_Kind.AEXPR_LIKE, enums.A_Expr_Kind.AEXPR_ILIKE):
        pattern = node.rexpr
        prefix = (isinstance(pattern, ast.A_Const) and isinstance(pattern.val, ast.String)
                  and not pattern.val.sval.startswith(("%", "_")))
        s = 0.05 if prefix else 0.1
        return s if op in ("~~", "~~*") else 1.0 - s
    return DEFAULT


def join_selectivity(nd_left: float, nd_right: float) -> float:
    """Fraction of the cross product an equi-join keeps.

    >>> join_selectivity(100, 1000)
    0.001
    """
    return 1.0 / max(1.0, nd_left, nd_right)
